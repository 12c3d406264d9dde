#!/usr/bin/env bash
# The error tail on the H200 (bench/results/numerics.md): fresh leaderboard-style inputs on every official shape,
# each on the shipped path (custom_kernel, the first-call selection) and the native path forced; 500
# at I-2048 bs-512 (two processes of 250 on disjoint seeds), 200 at the other nine; one process per
# shape, all at once.
#   bench/h200/numerics_tail.sh OUT_DIR [SECONDS [BASE [NAME,CASES,SEEDS ...]]]
# SECONDS (default 330): a process still running then reports the seeds it has done. BASE (default
# 3000000): the seeds are BASE + 13 k (13 * 250 more for the second I-2048 process). NAME,CASES,SEEDS
# runs those processes instead (e.g. bench0,bench:0,100). Writes OUT_DIR/tail.json and tail.log.
set -u
out=$1
limit=${2:-330}
base=${3:-3000000}
shift $(($# < 3 ? $# : 3))
specs=("$@")
if [ ${#specs[@]} -eq 0 ]; then
  specs=(bench6a,bench:6,250)
  for index in 0 1 2; do specs+=("test$index,tests:$index,200"); done
  for index in 0 1 2 3 4 5; do specs+=("bench$index,bench:$index,200"); done
fi
for spec in "${specs[@]}"; do
  IFS=, read -r name cases seeds <<< "$spec"
  timeout "$limit" python3 -m bench.seed_check --paths shipped native --json "$out/tail-$name.json" \
    --cases "$cases" --seeds "$seeds" --seed-base "$base" > "$out/tail-$name.log" 2>&1 &
done
if [ $# -eq 0 ]; then
  timeout "$limit" python3 -m bench.seed_check --paths shipped native --json "$out/tail-bench6b.json" \
    --cases bench:6 --seeds 250 --seed-base $((base + 13 * 250)) > "$out/tail-bench6b.log" 2>&1 &
fi
wait
python3 - "$out" <<'EOF'
import json, pathlib, sys
out = pathlib.Path(sys.argv[1])
rows = [row for f in sorted(out.glob("tail-*.json")) for row in json.loads(f.read_text())]
(out / "tail.json").write_text(json.dumps(rows, indent=1) + "\n")
for f in sorted(out.glob("tail-*.json")):
    f.unlink()
EOF
for f in "$out"/tail-*.log; do echo "== $f"; cat "$f"; rm "$f"; done > "$out/tail.log"

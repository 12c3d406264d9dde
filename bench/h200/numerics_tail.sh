#!/usr/bin/env bash
# Issue 31's tail on the H200 (bench/RESULTS.md): fresh leaderboard-style inputs on every official shape,
# each on the shipped path (custom_kernel, the first-call selection) and the native path forced; 500
# at I-2048 bs-512 (two processes of 250 on disjoint seeds), 200 at the other nine; one process per
# shape, all at once. Usage: bench/h200/numerics_tail.sh OUT_DIR [SECONDS] (default 330; a process
# still running then reports the seeds it has done). Writes OUT_DIR/tail.json and tail.log.
set -u
out=$1
limit=${2:-330}
base=3000000  # seeds base + 13 k: none of them used before by the package's checks
run() {  # name, then seed_check's options
  local name=$1
  shift
  timeout "$limit" python3 -m bench.seed_check --paths shipped native --json "$out/tail-$name.json" "$@" \
    > "$out/tail-$name.log" 2>&1 &
}
run bench6a --cases bench:6 --seeds 250 --seed-base "$base"
run bench6b --cases bench:6 --seeds 250 --seed-base $((base + 13 * 250))
for index in 0 1 2; do
  run "test$index" --cases "tests:$index" --seeds 200 --seed-base "$base"
done
for index in 0 1 2 3 4 5; do
  run "bench$index" --cases "bench:$index" --seeds 200 --seed-base "$base"
done
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

#!/usr/bin/env bash
# bench/results/gfx950/native-triton-<version>.md and -ranking.json: the offline check's per-variant
# tables and ranking on the 10 official shapes (the table's tiles and tile_configs' alternates, as CI
# checks them), and native-kernel-variants-triton-<version>.md / -ranking.json with the kernel variants
# of bench/gfx950/kernel_variants.json added to every shape; once per Python given (each with its own
# Triton), e.g.
#   bench/gfx950/write_results.sh /path/to/triton-3.6/bin/python .venv/bin/python
# Every table is written even where a variant breaks a limit; the exit status is then 1.
set -uo pipefail
cd "$(dirname "$0")/../.."
status=0
check() {  # output stem, then the check's own options
  local out=$1 rc=0
  shift
  "$python" -m bench.gfx950 --cases official --md "$out.md" --ranking "$out-ranking.json" "$@" > /dev/null || rc=$?
  echo "$out.md, $out-ranking.json (exit $rc)"
  [ "$rc" -eq 0 ] || status=1
}
for python in "$@"; do
  version=$("$python" -c "import triton; print(triton.__version__)") || exit 2
  check "bench/results/gfx950/native-triton-$version"
  check "bench/results/gfx950/native-kernel-variants-triton-$version" --extra-variants bench/gfx950/kernel_variants.json
done
exit "$status"

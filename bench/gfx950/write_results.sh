#!/usr/bin/env bash
# bench/results/gfx950/native-triton-<version>.md and -ranking.json: the offline check's per-variant
# tables and ranking on the 10 official shapes, once per Python given (each with its own Triton), e.g.
#   bench/gfx950/write_results.sh /path/to/triton-3.6/bin/python .venv/bin/python
# Every table is written even where a variant breaks a limit; the exit status is then 1.
set -uo pipefail
cd "$(dirname "$0")/../.."
status=0
for python in "$@"; do
  version=$("$python" -c "import triton; print(triton.__version__)") || exit 2
  out="bench/results/gfx950/native-triton-$version"
  "$python" -m bench.gfx950 --cases official --md "$out.md" --ranking "$out-ranking.json" > /dev/null || status=1
  echo "$out.md, $out-ranking.json (exit $status)"
done
exit "$status"

#!/usr/bin/env bash
# Session 85's calls 2 and 3: issue 12's public grid (device.sh grid, which stamps $OUT/env.txt with the card,
# versions and ONLINESOFTMAX_COMMIT) in fp32 and bf16, then DTYPES=float16 in a second call. Carry .osmcache.tgz,
# .commit (git rev-parse HEAD) and this script.
set -uo pipefail
OUT=${OUT:-out}
export ONLINESOFTMAX_COMMIT="$(head -1 .commit)"
SECONDS=0
DTYPES="${DTYPES:-float32 bfloat16}" SWEEP_TIMEOUT=280 bash benchmarks/device.sh grid >/dev/null
echo "grid $SECONDS s"; head -2 "$OUT/env.txt"; tail -n 2 "$OUT"/sweep-*.txt; cut -c1-200 "$OUT/grid.md"

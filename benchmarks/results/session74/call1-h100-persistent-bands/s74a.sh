#!/usr/bin/env bash
# session 74 call 1: session 73's persistent bands kernels (next-persistent-bands.diff, applied in the working tree)
# against the bands of HEAD 549eee0 (.ab/base), forced beside the rules' plan, alone on the GPU, the trees interleaved
# per shape (device.sh layouts-ab); then in parallel the bands GPU tests and e90989f's (the strip of three bands, the
# layouts' adversarial long columns) on the new tree, and compute-sanitizer memcheck + racecheck over
# sanitize_driver.py --regime bands
set -uo pipefail
OUT=${OUT:-out}
export ONLINESOFTMAX_COMMIT="$(head -1 .commit)"
SECONDS=0
TREES="new=$PWD/src=strided,bands base=$PWD/.ab/base/src=bands" \
SHAPES="2 1000 64 64 --dim 1;8 1000 64 64 --dim 1;32 1000 64 64 --dim 1;8192 8192 --dim 0;2048 8192 --dim 0;131072 64 --dim 0" \
  bash benchmarks/device.sh layouts-ab >/dev/null
( TOOLS='memcheck racecheck' OUT="$OUT" timeout 330 bash benchmarks/sanitize.sh --regime bands >"$OUT/sanitize.txt" 2>&1 ) &
TEST_TIMEOUT=330 bash benchmarks/device.sh groups tests "tests/test_gpu_production.py -k 'bands'" \
  "tests/test_gpu_production.py -k '(automatic_plans and 3000) or forward_backward_layouts'" >/dev/null
wait
(cd "$OUT" && tar czf sanitize.tgz sanitize && rm -r sanitize)
echo "total $SECONDS s" | tee -a "$OUT/tests-summary.txt"
cat "$OUT/tests-summary.txt" "$OUT/sanitize.txt"

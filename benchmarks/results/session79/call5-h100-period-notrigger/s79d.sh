#!/usr/bin/env bash
# session 79, call 5: the period regime's merge without its early trigger (new) against call 4's form (trig: the
# apply's CTAs scheduled beside the merge's), both with the strided kernel forced beside; then the period GPU tests
# on the new kernels, every automatic plan, and memcheck over the period regime
set -uo pipefail
OUT=${OUT:-out}
export ONLINESOFTMAX_COMMIT="$(head -1 .commit)"
SECONDS=0
SHAPE_TIMEOUT=60 TREES="new=$PWD/src=strided,period trig=$PWD/.ab/trig/src=period" DTYPES="float32 bfloat16" \
SHAPES="4097 1001 --dim 0;1537 333 --dim 0;8193 1001 --dim 0;2049 3001 --dim 0;1025 1001 --dim 0" \
  bash benchmarks/device.sh layouts-ab >/dev/null
echo "A/B $SECONDS s"
( TOOLS=memcheck OUT="$OUT" timeout 150 bash benchmarks/sanitize.sh --regime period >"$OUT/sanitize.txt" 2>&1 ) &
TEST_TIMEOUT=330 bash benchmarks/device.sh groups tests \
  "tests/test_gpu_production.py -k 'period'" \
  "tests/test_gpu_production.py -k 'automatic_plans'" >/dev/null
wait
cp "$OUT/sanitize/summary.txt" "$OUT/sanitize-summary.txt" 2>/dev/null; rm -rf "$OUT/sanitize"
echo "total $SECONDS s" | tee -a "$OUT/tests-summary.txt"
cat "$OUT/tests-summary.txt" "$OUT/sanitize-summary.txt" 2>/dev/null
grep -E "^##|%" "$OUT/layouts-ab.txt" | cut -c1-250

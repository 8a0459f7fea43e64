#!/usr/bin/env bash
# the short form of s77a.sh, for a budget under ~500 s (about 4 minutes): the strided A/B on dim 0 of 4097 x 1001
# (the scalar path) and dim 0 of 8192^2 bf16 (16-bit vectors), then the strided GPU tests beside memcheck
set -uo pipefail
OUT=${OUT:-out}
export ONLINESOFTMAX_COMMIT="$(head -1 .commit)"
SECONDS=0
SHAPE_TIMEOUT=45 TREES="new=$PWD/src=strided base=$PWD/.ab/base/src=strided" DTYPES="float32 bfloat16" \
SHAPES="4097 1001 --dim 0" bash benchmarks/device.sh layouts-ab >/dev/null
SHAPE_TIMEOUT=45 AB_NAME=layouts-ab-w8 TREES="new=$PWD/src=strided base=$PWD/.ab/base/src=strided" DTYPES="bfloat16" \
SHAPES="8192 8192 --dim 0" bash benchmarks/device.sh layouts-ab >/dev/null
( TOOLS=memcheck OUT="$OUT" timeout 100 bash benchmarks/sanitize.sh --regime strided >"$OUT/sanitize.txt" 2>&1 ) &
TEST_TIMEOUT=100 bash benchmarks/device.sh groups tests \
  "tests/test_gpu_production.py -k 'variant_matches and strided'" \
  "tests/test_gpu_production.py -k 'forward_backward_layouts'" >/dev/null
wait
cp "$OUT/sanitize/summary.txt" "$OUT/sanitize-summary.txt" 2>/dev/null; rm -rf "$OUT/sanitize"
echo "total $SECONDS s" | tee -a "$OUT/tests-summary.txt"
cat "$OUT/tests-summary.txt" "$OUT/sanitize.txt"
grep -E "^##|%" "$OUT/layouts-ab.txt" "$OUT/layouts-ab-w8.txt" | cut -c1-330

#!/usr/bin/env bash
# session 79, call 7: the period apply reading its chunk's column pairs once a CTA into shared memory (call 6's
# timeline: 13 us of apply on 1025 x 1001 bf16, every thread reading 8 pairs of the same 8 KB from L2): the rules'
# plan and both regimes forced, the timeline again, then the period GPU tests and memcheck on these kernels
set -uo pipefail
OUT=${OUT:-out}
export ONLINESOFTMAX_COMMIT="$(head -1 .commit)"
SECONDS=0
SHAPE_TIMEOUT=40 TREES="new=$PWD/src=strided,period" DTYPES="float32 bfloat16" \
SHAPES="1025 1001 --dim 0;4097 1001 --dim 0;2049 3001 --dim 0" bash benchmarks/device.sh layouts-ab >/dev/null
for dtype in bfloat16 float32; do for shape in 1001x1025 1001x4097; do
  echo "## $shape dim 0 $dtype period"
  PYTHONPATH="$PWD/src" ONLINESOFTMAX_CACHE=/tmp/osm-cache timeout 30 python3 benchmarks/profile_once.py \
    softmax $dtype $shape --dim 0 --regime period --timeline 2>&1 | grep -E "^timeline|^  \+"
done; done >"$OUT/period-timeline.txt" 2>&1
( TOOLS=memcheck OUT="$OUT" timeout 100 bash benchmarks/sanitize.sh --regime period >"$OUT/sanitize.txt" 2>&1 ) &
TEST_TIMEOUT=120 bash benchmarks/device.sh groups tests "tests/test_gpu_production.py -k 'period'" >/dev/null
wait
cp "$OUT/sanitize/summary.txt" "$OUT/sanitize-summary.txt" 2>/dev/null; rm -rf "$OUT/sanitize"
echo "total $SECONDS s" | tee -a "$OUT/tests-summary.txt"
cat "$OUT/tests-summary.txt" "$OUT/sanitize-summary.txt" "$OUT/period-timeline.txt" 2>/dev/null
grep -E "^##|%" "$OUT/layouts-ab.txt" | cut -c1-250

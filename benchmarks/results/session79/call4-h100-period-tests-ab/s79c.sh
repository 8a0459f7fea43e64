#!/usr/bin/env bash
# session 79, call 4: the period regime (dim 0 of a matrix whose width is not whole 16-byte vectors: the slab read as
# vectors; stats, merge, apply), uncommitted tree against HEAD (.ab/base): its GPU tests, the automatic plans and
# layouts, memcheck over it, then the A/B of the rules' plan and the regimes forced
set -uo pipefail
OUT=${OUT:-out}
export ONLINESOFTMAX_COMMIT="$(head -1 .commit)"
SECONDS=0
( TOOLS=memcheck OUT="$OUT" timeout 150 bash benchmarks/sanitize.sh --regime period >"$OUT/sanitize.txt" 2>&1 ) &
TEST_TIMEOUT=220 bash benchmarks/device.sh groups tests \
  "tests/test_gpu_production.py -k 'period'" \
  "tests/test_gpu_production.py -k 'forward_backward_layouts'" \
  "tests/test_gpu_production.py -k 'automatic_plans'" >/dev/null
wait
cp "$OUT/sanitize/summary.txt" "$OUT/sanitize-summary.txt" 2>/dev/null; rm -rf "$OUT/sanitize"
echo "tests + memcheck $SECONDS s"
SHAPE_TIMEOUT=70 TREES="new=$PWD/src=strided,period base=$PWD/.ab/base/src=strided" DTYPES="float32 bfloat16" \
SHAPES="4097 1001 --dim 0;2049 3001 --dim 0;1537 333 --dim 0" bash benchmarks/device.sh layouts-ab >/dev/null
echo "total $SECONDS s" | tee -a "$OUT/tests-summary.txt"
cat "$OUT/tests-summary.txt" "$OUT/sanitize-summary.txt" 2>/dev/null
grep -E "^##|%" "$OUT/layouts-ab.txt" | cut -c1-330

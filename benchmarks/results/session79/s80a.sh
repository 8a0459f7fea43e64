#!/usr/bin/env bash
# Prepared in session 79, not run (README.md, "Next"): the period regime and session 78's W = 8 strided change on
# the H200, where issue 12's acceptance lies (both timed on an H100 only). From the repository root, carrying
# .osmcache.tgz (precompile.py --tests and --layouts for the tree; --layouts for .ab/w8base, `git archive fbe7b23
# src`), .commit, .ab and this script copied to the root. About 420 s.
set -uo pipefail
OUT=${OUT:-out}
export ONLINESOFTMAX_COMMIT="$(head -1 .commit)"
SECONDS=0
# 1) the rules' plan with the strided kernel and the period regime forced beside it, every dtype, the slabs on both
#    sides of plan.PERIOD_MIN_BYTES (1025 x 1001 stays strided, 4097 x 1001 takes period in every dtype)
SHAPE_TIMEOUT=60 AB_NAME=layouts-period TREES="new=$PWD/src=strided,period" DTYPES="float32 bfloat16 float16" \
SHAPES="4097 1001 --dim 0;2049 3001 --dim 0;1025 1001 --dim 0;8193 1001 --dim 0" bash benchmarks/device.sh layouts-ab >/dev/null
# 2) session 78's W = 8 strided kernels against their form before (fbe7b23), strided forced, 16-bit
SHAPE_TIMEOUT=60 AB_NAME=layouts-w8 TREES="new=$PWD/src=strided base=$PWD/.ab/w8base/src=strided" \
DTYPES="bfloat16 float16" SHAPES="8192 8192 --dim 0;8 1000 64 64 --dim 1" bash benchmarks/device.sh layouts-ab >/dev/null
echo "A/B $SECONDS s"
# 3) the period tests, every automatic plan, the layouts; memcheck over the period regime
( TOOLS=memcheck OUT="$OUT" timeout 150 bash benchmarks/sanitize.sh --regime period >"$OUT/sanitize.txt" 2>&1 ) &
TEST_TIMEOUT=330 bash benchmarks/device.sh groups tests \
  "tests/test_gpu_production.py -k 'period'" \
  "tests/test_gpu_production.py -k 'automatic_plans'" \
  "tests/test_gpu_production.py -k 'forward_backward_layouts'" >/dev/null
wait
cp "$OUT/sanitize/summary.txt" "$OUT/sanitize-summary.txt" 2>/dev/null; rm -rf "$OUT/sanitize"
echo "total $SECONDS s" | tee -a "$OUT/tests-summary.txt"
cat "$OUT/tests-summary.txt" "$OUT/sanitize-summary.txt" 2>/dev/null
grep -E "^##|%" "$OUT/layouts-period.txt" "$OUT/layouts-w8.txt" | cut -c1-260

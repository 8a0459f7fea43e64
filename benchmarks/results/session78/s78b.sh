#!/usr/bin/env bash
# session 78, call 2 (session78/README.md): the strided kernels' one-CTA form for 16-bit 16-byte accesses only (W = 8: 8 / 4 accesses a
# trip, 128 registers), the rest as HEAD, against HEAD (.ab/base) on the W = 8 shapes in bf16 and fp16; then in
# parallel the strided and layout GPU tests, every automatic plan (ids now name the shapes), and memcheck strided;
# then ncu on the scalar path
set -uo pipefail
OUT=${OUT:-out}
export ONLINESOFTMAX_COMMIT="$(head -1 .commit)"
# QUICK=1 (a budget under ~450 s): the A/B on dim 0 of 8192^2 in fp16 alone, then the same tests and memcheck
SECONDS=0
SHAPES="8 1000 64 64 --dim 1;8192 8192 --dim 0;4 1000 63 64 --dim 1" DTYPES="bfloat16 float16"
[ "${QUICK:-0}" = 1 ] && SHAPES="8192 8192 --dim 0" DTYPES=float16
SHAPE_TIMEOUT=60 AB_NAME=layouts-ab-w8 TREES="new=$PWD/src=strided base=$PWD/.ab/base/src=strided" \
DTYPES="$DTYPES" SHAPES="$SHAPES" bash benchmarks/device.sh layouts-ab >/dev/null
( TOOLS=memcheck OUT="$OUT" timeout 140 bash benchmarks/sanitize.sh --regime strided >"$OUT/sanitize.txt" 2>&1 ) &
TEST_TIMEOUT=200 bash benchmarks/device.sh groups tests \
  "tests/test_gpu_production.py -k 'variant_matches and strided'" \
  "tests/test_gpu_production.py -k 'forward_backward_layouts'" \
  "tests/test_gpu_production.py -k 'automatic_plans'" >/dev/null
wait
cp "$OUT/sanitize/summary.txt" "$OUT/sanitize-summary.txt" 2>/dev/null; rm -rf "$OUT/sanitize"
# what limits the scalar path (dim 0 of 4097 x 1001, 24-35% of copy; session 78: 16 accesses a trip in one CTA lost):
# Nsight Compute on one launch each, the strided kernel the plan takes, forward fp32 / bf16 and backward fp32
[ "${QUICK:-0}" = 1 ] || { timeout 100 bash benchmarks/ncu.sh odd-f32:softmax:float32:1001x4097:0 \
  odd-bf16:softmax:bfloat16:1001x4097:0 odd-bwd-f32:softmax_backward:float32:1001x4097:0 >/dev/null 2>&1
  tar czf "$OUT/ncu.tgz" -C "$OUT" ncu && rm -rf "$OUT/ncu"; }
echo "total $SECONDS s" | tee -a "$OUT/tests-summary.txt"
cat "$OUT/tests-summary.txt" "$OUT/sanitize.txt" "$OUT/ncu-summary.txt" 2>/dev/null
grep -E "^##|%" "$OUT/layouts-ab-w8.txt" | cut -c1-330

#!/usr/bin/env bash
# the next call, prepared in session 75 (s75a.sh) and tried in sessions 75, 76 and 77 (session77/README.md) without a
# machine, so not run: the strided kernels' scalar path (W = 1: an odd inner) with 16 accesses a
# thread in flight forward, 8 backward, one 512-thread CTA an SM (the tree with next-strided-unroll.diff; 16-bit
# vectors likewise, below) against HEAD (.ab/base: 4 and 4, two CTAs of 64 registers) on the shapes that take it
# (dim 0 of odd-width matrices; channels over an odd H x W), alone on the GPU; then in parallel the GPU tests that
# reach the strided scalar path and compute-sanitizer memcheck over the strided cases. Kernels precompiled without
# a GPU: benchmarks/precompile.py --tests (the tree), --layouts (the tree and, with PYTHONPATH=.ab/base/src, HEAD)
# QUICK=1: the short form for a budget under ~500 s (about 4 minutes): the A/B on dim 0 of 4097 x 1001 and of
# 8192^2 bf16 alone, the first two test groups and memcheck with shorter timeouts, no timeline. It decides nothing
# about shipping on its own (automatic_plans and 3000 and the channel shapes are left out).
set -uo pipefail
OUT=${OUT:-out}
export ONLINESOFTMAX_COMMIT="$(head -1 .commit)"
SECONDS=0
if [ "${QUICK:-0}" = 1 ]; then
  T=45 SHAPES_A="4097 1001 --dim 0" SHAPES_W8="8192 8192 --dim 0" SAN_T=100 TEST_T=100
  groups=("tests/test_gpu_production.py -k 'variant_matches and strided'"
          "tests/test_gpu_production.py -k 'forward_backward_layouts'")
else
  T=60 SHAPES_A="4097 1001 --dim 0;16 300 45 45 --dim 1;4 1000 63 63 --dim 1" SAN_T=140 TEST_T=150
  SHAPES_W8="8 1000 64 64 --dim 1;8192 8192 --dim 0"
  groups=("tests/test_gpu_production.py -k 'variant_matches and strided'"
          "tests/test_gpu_production.py -k 'forward_backward_layouts'"
          "tests/test_gpu_production.py -k 'automatic_plans and 3000'")
fi
SHAPE_TIMEOUT=$T TREES="new=$PWD/src=strided base=$PWD/.ab/base/src=strided" DTYPES="float32 bfloat16" \
SHAPES="$SHAPES_A" bash benchmarks/device.sh layouts-ab >/dev/null
# the 16-bit 16-byte path (W = 8) with four and twice the accesses a trip in one CTA an SM (forward 8, backward 4,
# 128 registers) against HEAD (2 and 2, two CTAs of 64): channels C = 1000 and dim 0 of 8192^2, bf16
SHAPE_TIMEOUT=$T AB_NAME=layouts-ab-w8 TREES="new=$PWD/src=strided base=$PWD/.ab/base/src=strided" DTYPES="bfloat16" \
SHAPES="$SHAPES_W8" bash benchmarks/device.sh layouts-ab >/dev/null
( TOOLS=memcheck OUT="$OUT" timeout $SAN_T bash benchmarks/sanitize.sh --regime strided >"$OUT/sanitize.txt" 2>&1 ) &
TEST_TIMEOUT=$TEST_T bash benchmarks/device.sh groups tests "${groups[@]}" >/dev/null
wait
cp "$OUT/sanitize/summary.txt" "$OUT/sanitize-summary.txt" 2>/dev/null; rm -rf "$OUT/sanitize"
# where the bands' fixed ~20 us at C = 1000 go (docs/tuning.md): the GPU timeline of one call, B = 2, bands forced,
# then the strided kernel forced on the same shape (whose intercept was 7 us: the baseline of the same timeline)
[ "${QUICK:-0}" = 1 ] || for regime in bands strided; do for op in softmax softmax_backward; do
  PYTHONPATH="$PWD/src" ONLINESOFTMAX_CACHE=/tmp/osm-cache timeout 40 python3 benchmarks/profile_once.py \
    $op float32 4096x1000 --dim 0 --outer 2 --regime $regime --timeline
done; done >"$OUT/bands-timeline.txt" 2>&1
echo "total $SECONDS s" | tee -a "$OUT/tests-summary.txt"
cat "$OUT/tests-summary.txt" "$OUT/sanitize.txt" "$OUT/bands-timeline.txt" 2>/dev/null
grep -E "^##|%" "$OUT/layouts-ab.txt" "$OUT/layouts-ab-w8.txt" | cut -c1-330

#!/usr/bin/env bash
# session 73 call 1 (session 72's planned call 3): the shipped bands rule (22c8154: bands where the strided strips
# leave half the SMs idle and a strip has more than two bands, forward or backward) on the shapes it moved and had not
# run: a strip of three bands (4, 3000, 16), (3, 2000, 72), and the forward of dim 0 of 131072 x 64; strided and bands
# forced beside the rules' plan, alone on the GPU; then in parallel the GPU tests that take automatic plans on
# non-last dims (test_automatic_plans, the layouts, the drop-in and CUDA suites); then ncu of the bands and strided
# kernels' 16-bit forward over dim 0 of 1000 x 32768
set -uo pipefail
OUT=${OUT:-out}; mkdir -p "$OUT/logs"
export PYTHONUNBUFFERED=1 ONLINESOFTMAX_COMMIT="$(head -1 .commit)" ONLINESOFTMAX_CACHE=/tmp/osm-cache PYTHONPATH=$PWD/src
mkdir -p /tmp/osm-unpack /tmp/osm-cache && tar xzf .osmcache.tgz -C /tmp/osm-unpack && cp -rn /tmp/osm-unpack/.osmcache/. /tmp/osm-cache/ 2>/dev/null
{ nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv
  python3 -c 'import torch, triton, cuda.core; print("torch", torch.__version__, "triton", triton.__version__, "cuda.core", cuda.core.__version__)'
  cat .commit; } | tee "$OUT/logs/env.txt"
SECONDS=0
{ for shape in "4 3000 16 --dim 1" "3 2000 72 --dim 1" "131072 64 --dim 0"; do
    echo "## $shape ($SECONDS s)"
    timeout 100 python3 benchmarks/layout_regimes.py --regimes strided bands --dtype float32 bfloat16 --shape $shape 2>&1 | grep -v Warning
  done
  # the bands kernels' share of copy against the waves of CTAs (one band a strip, C = 1000; 2 CTAs an SM): do whole-grid
  # phases (every CTA loading, then every CTA computing) cost the forward with few waves?
  for outer in 2 8 32; do
    echo "## $outer 1000 64 64 --dim 1, bands ($SECONDS s)"
    timeout 100 python3 benchmarks/layout_regimes.py --regimes bands --dtype float32 bfloat16 --shape $outer 1000 64 64 --dim 1 2>&1 | grep -v Warning
  done; } | tee "$OUT/ab.txt"
groups=("tests/test_gpu_production.py -k 'automatic_plans'" "tests/test_gpu_production.py -k 'forward_backward_layouts or bands_layouts'"
        "tests/test_gpu_cuda.py tests/test_gpu_dropin.py")
for i in "${!groups[@]}"; do
  ( echo "# ${groups[$i]}"
    eval ONLINESOFTMAX_EVIDENCE="$OUT/logs" timeout 330 python3 -m pytest ${groups[$i]} -m gpu -q -rfEs --durations=5 -p no:cacheprovider ) >"$OUT/logs/group-$i.log" 2>&1 &
done
wait
for i in "${!groups[@]}"; do
  echo "${groups[$i]}: $(grep -E ' in [0-9.]+s' "$OUT/logs/group-$i.log" | tail -1)"
done | tee "$OUT/summary.txt"
grep -h -E '^(FAILED|ERROR)|^E  ' "$OUT"/logs/group-*.log | head -40 | tee -a "$OUT/summary.txt"
# ncu of one bands / strided launch a case, alone on the GPU: why the 16-bit forward over a long non-last dim (one band
# a strip: C = 1000) runs near half the fp32 one's share of copy (dim 0 of 1000 x 32768, the regimes forced)
echo "## ncu ($SECONDS s)"
OUT="$OUT/logs" timeout 150 bash benchmarks/ncu.sh bands-f32-fwd:softmax:float32:32768x1000:0:ours:regime=bands \
  bands-bf16-fwd:softmax:bfloat16:32768x1000:0:ours:regime=bands strided-bf16-fwd:softmax:bfloat16:32768x1000:0:ours:regime=strided \
  | tee "$OUT/ncu-summary.txt"
echo "total $SECONDS s" | tee -a "$OUT/summary.txt"
tar czf "$OUT/logs.tgz" -C "$OUT" logs && rm -r "$OUT/logs"

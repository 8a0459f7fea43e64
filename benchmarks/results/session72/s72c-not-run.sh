#!/usr/bin/env bash
# session 72 call 3: the bands rule, second form (plan.bands_preferred: fp32 backward beyond one L2 budget in flight;
# forward or backward where the strided strips leave half the SMs idle and a strip has more than two bands): forced beside
# the rules' plan on the shapes it moves and at its boundaries, alone on the GPU; then in parallel the GPU tests that
# take automatic plans on non-last dims (test_automatic_plans, the layouts, the drop-in and CUDA suites)
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
echo "total $SECONDS s" | tee -a "$OUT/summary.txt"
tar czf "$OUT/logs.tgz" -C "$OUT" logs && rm -r "$OUT/logs"

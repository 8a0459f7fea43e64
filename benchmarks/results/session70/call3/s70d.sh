#!/usr/bin/env bash
# session 70 call 3: bands against strided for the fp32 backward across the rule's threshold (alone on the GPU),
# then the automatic-plan, layout, bands and concurrency GPU tests in parallel pytest processes
set -uo pipefail
OUT=${OUT:-out}; mkdir -p "$OUT/logs"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD/src ONLINESOFTMAX_COMMIT="$(head -1 .commit)" ONLINESOFTMAX_CACHE=/tmp/osm-cache
mkdir -p /tmp/osm-unpack /tmp/osm-cache && tar xzf .osmcache.tgz -C /tmp/osm-unpack && cp -rn /tmp/osm-unpack/.osmcache/. /tmp/osm-cache/ 2>/dev/null
{ nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv
  python3 -c 'import torch, triton, cuda.core; print("torch", torch.__version__, "triton", triton.__version__, "cuda.core", cuda.core.__version__)'
  cat .commit; } | tee "$OUT/logs/env.txt"
L="timeout 100 python3 benchmarks/layout_regimes.py --regimes strided bands --dtype float32"
{ $L --shape 2048 8192 --dim 0
  $L --shape 4 2000 4096 --dim 1
  $L --shape 16384 4096 --dim 0
  $L --shape 3 3000 512 --dim 1
  $L --shape 8 1000 64 64 --dim 1; } 2>&1 | grep -v Warning | tee "$OUT/layouts.txt"
P=tests/test_gpu_production.py
groups=("$P -k 'automatic_plans or forward_backward_layouts'" "$P -k 'bands'" "tests/test_gpu_concurrency.py")
for i in "${!groups[@]}"; do
  ( echo "# ${groups[$i]}"
    eval ONLINESOFTMAX_EVIDENCE="$OUT/logs" timeout "${TEST_TIMEOUT:-300}" python3 -m pytest ${groups[$i]} -m gpu -q -rfEs --durations=10 -p no:cacheprovider ) >"$OUT/logs/group-$i.log" 2>&1 &
done
wait
for i in "${!groups[@]}"; do
  echo "${groups[$i]}: $(grep -E ' in [0-9.]+s' "$OUT/logs/group-$i.log" | tail -1)"
done | tee "$OUT/summary.txt"
grep -h -E '^(FAILED|ERROR)|^E  ' "$OUT"/logs/group-*.log | head -40 | tee -a "$OUT/summary.txt"
tar czf "$OUT/logs.tgz" -C "$OUT" logs && rm -r "$OUT/logs"

#!/usr/bin/env bash
# session 70 call: the bands regime timed against strided / the rules / torch on the long non-last dims (alone on
# the GPU), then the GPU tests in parallel pytest processes (bands; the ones not yet run; sanitizer over bands)
set -uo pipefail
OUT=${OUT:-out}; mkdir -p "$OUT/logs"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD/src ONLINESOFTMAX_COMMIT="$(head -1 .commit)" ONLINESOFTMAX_CACHE=/tmp/osm-cache
mkdir -p /tmp/osm-unpack /tmp/osm-cache && tar xzf .osmcache.tgz -C /tmp/osm-unpack && cp -rn /tmp/osm-unpack/.osmcache/. /tmp/osm-cache/ 2>/dev/null
{ nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv
  python3 -c 'import torch, triton, cuda.core; print("torch", torch.__version__, "triton", triton.__version__, "cuda.core", cuda.core.__version__)'
  cat .commit; } | tee "$OUT/logs/env.txt"
L="timeout 100 python3 benchmarks/layout_regimes.py --regimes strided bands --dtype float32 bfloat16"
{ $L --shape 8 1000 64 64 --dim 1
  $L --shape 8192 8192 --dim 0
  $L --shape 4097 1001 --dim 0
  $L --shape 8 150 256 256 --dim 1
  $L --shape 2 256 256 512 --dim 1; } 2>&1 | grep -v Warning | tee "$OUT/layouts.txt"
# the group kernels after os_group_arrive (their SASS changed): the automatic plan and the forced regimes
timeout 120 python3 benchmarks/regimes.py 64x1000003 --ops softmax softmax_backward --dtypes float32 2>&1 | grep -v Warning | tee "$OUT/regimes-group.txt"
P=tests/test_gpu_production.py
SAN="compute-sanitizer --report-api-errors no"
groups=("python3 -m pytest $P -k 'bands'"
        "python3 -m pytest $P -k 'short_wait or in_place or abandoned_at_once or left_unwritten'"
        "python3 -m pytest $P -k 'window_path and float16 and not bfloat16'"
        "$SAN --tool memcheck python3 -m pytest $P -k 'bands_layouts and float32'"
        "$SAN --tool racecheck python3 -m pytest $P -k 'bands_layouts and bfloat16 and none'"
        "python3 -m pytest tests/test_gpu_cross_entropy.py tests/test_gpu_attention.py")
for i in "${!groups[@]}"; do
  ( echo "# ${groups[$i]}"
    eval ONLINESOFTMAX_EVIDENCE="$OUT/logs" timeout "${TEST_TIMEOUT:-330}" ${groups[$i]} -m gpu -q -rfEs --durations=10 -p no:cacheprovider ) >"$OUT/logs/group-$i.log" 2>&1 &
done
wait
for i in "${!groups[@]}"; do
  echo "${groups[$i]}: $(grep -E ' in [0-9.]+s|SUMMARY' "$OUT/logs/group-$i.log" | tail -2 | tr '\n' ' ')"
done | tee "$OUT/summary.txt"
grep -h -E '^(FAILED|ERROR)|^E  ' "$OUT"/logs/group-*.log | head -60 | tee -a "$OUT/summary.txt"
tar czf "$OUT/logs.tgz" -C "$OUT" logs && rm -r "$OUT/logs"

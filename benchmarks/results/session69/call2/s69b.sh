#!/usr/bin/env bash
# session 69 call 2: the GPU tests the group regime (now on by default) reaches, in parallel pytest processes
set -uo pipefail
OUT=${OUT:-out}; mkdir -p "$OUT/logs"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD/src ONLINESOFTMAX_COMMIT=$(cat .commit) ONLINESOFTMAX_CACHE=/tmp/osm-cache
mkdir -p /tmp/osm-unpack /tmp/osm-cache && tar xzf .osmcache.tgz -C /tmp/osm-unpack && cp -rn /tmp/osm-unpack/.osmcache/. /tmp/osm-cache/ 2>/dev/null
{ nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv
  python3 -c 'import torch, triton, cuda.core; print("torch", torch.__version__, "triton", triton.__version__, "cuda.core", cuda.core.__version__)'
  echo "commit $ONLINESOFTMAX_COMMIT"; } | tee "$OUT/logs/env.txt"
P=tests/test_gpu_production.py
groups=("$P -k 'variant_matches and float32'" "$P -k 'variant_matches and not float32'"
        "$P -k 'not variant_matches and not window_path and not abandoned'" "$P -k 'abandoned'"
        "tests/test_gpu_concurrency.py")
for i in "${!groups[@]}"; do
  ( echo "# pytest -m gpu ${groups[$i]}"
    eval ONLINESOFTMAX_EVIDENCE="$OUT/logs" timeout "${TEST_TIMEOUT:-540}" python3 -m pytest -m gpu -q -rfEs --durations=15 \
      -p no:cacheprovider "${groups[$i]}" ) >"$OUT/logs/group-$i.log" 2>&1 &
done
wait
for i in "${!groups[@]}"; do
  echo "${groups[$i]}: $(grep -E ' in [0-9.]+s' "$OUT/logs/group-$i.log" | tail -1)"
done | tee "$OUT/summary.txt"
grep -h -E '^(FAILED|ERROR)' "$OUT"/logs/group-*.log | tee -a "$OUT/summary.txt"
tar czf "$OUT/logs.tgz" -C "$OUT" logs && rm -r "$OUT/logs"

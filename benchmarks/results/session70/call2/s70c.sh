#!/usr/bin/env bash
# session 70 call 2: bands with 16 / 8 accesses a thread against strided / the rules / torch (alone on the GPU),
# then the bands GPU tests
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
  $L --shape 4097 1001 --dim 0; } 2>&1 | grep -v Warning | tee "$OUT/layouts.txt"
timeout 200 python3 -m pytest tests/test_gpu_production.py -k bands -m gpu -q -rfEs -p no:cacheprovider > "$OUT/logs/bands-tests.log" 2>&1
tail -3 "$OUT/logs/bands-tests.log" | tee "$OUT/summary.txt"
grep -h -E '^(FAILED|ERROR)|^E  ' "$OUT/logs/bands-tests.log" | head -30 | tee -a "$OUT/summary.txt"
tar czf "$OUT/logs.tgz" -C "$OUT" logs && rm -r "$OUT/logs"

#!/usr/bin/env bash
# session 69 call 1: bounded group waits (grp_fix), groups on by default
set -uo pipefail
OUT=${OUT:-out}; mkdir -p "$OUT/logs"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD/src ONLINESOFTMAX_COMMIT=$(cat .commit) ONLINESOFTMAX_CACHE=/tmp/osm-cache
mkdir -p /tmp/osm-unpack /tmp/osm-cache && tar xzf .osmcache.tgz -C /tmp/osm-unpack && cp -rn /tmp/osm-unpack/.osmcache/. /tmp/osm-cache/
{ nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv
  python3 -c 'import torch, triton, cuda.core; print("torch", torch.__version__, "triton", triton.__version__, "cuda.core", cuda.core.__version__)'
  echo "commit $ONLINESOFTMAX_COMMIT"; } | tee "$OUT/logs/env.txt"
T() { local n=$1 t=$2; shift 2; echo "== $n: $*"; ( timeout "$t" "$@" ) > "$OUT/logs/$n.log" 2>&1; echo "rc=$? $(grep -E ' in [0-9.]+s' "$OUT/logs/$n.log" | tail -1)"; grep -E '^(FAILED|ERROR)' "$OUT/logs/$n.log" | head -20; }
T conc 150 python3 -m pytest -m gpu -q -rfEs -p no:cacheprovider tests/test_gpu_concurrency.py -k group_kernels_on_streams
T prod 300 python3 -m pytest -m gpu -q -rfEs -p no:cacheprovider tests/test_gpu_production.py -k "group or in_place or cuda_graph or split_waves or automatic_plans"
T waits 120 python3 benchmarks/group_waits.py --streams 1 4 8 --calls 10 --out "$OUT/group_waits.csv"
tail -30 "$OUT/logs/waits.log"
T regimes 150 python3 benchmarks/regimes.py --ops softmax softmax_backward --dtypes float32 bfloat16 --out "$OUT/regimes.csv" 64x1000003 528x300007
grep -E "group|split|auto|copy" "$OUT/logs/regimes.log" | head -60
tar czf "$OUT/logs.tgz" -C "$OUT" logs && rm -r "$OUT/logs"

#!/usr/bin/env bash
# session 79, call 2: benchmarks/probe_period.py (kernels/period.cu, uncommitted) on the long layouts, every op, fp32 and bf16
set -uo pipefail
OUT=${OUT:-out}
mkdir -p /tmp/osm-unpack /tmp/osm-cache && tar xzf .osmcache.tgz -C /tmp/osm-unpack && cp -rn /tmp/osm-unpack/.osmcache/. /tmp/osm-cache/
export ONLINESOFTMAX_CACHE=/tmp/osm-cache PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; python3 -c 'import torch, triton; print(torch.__version__, triton.__version__)'; } > "$OUT/env.txt" 2>&1
SECONDS=0
timeout 500 python3 benchmarks/probe_period.py --op softmax --op softmax_backward > "$OUT/probe-period.txt" 2>&1
echo "rc $? total $SECONDS s"
grep -v Warning "$OUT/probe-period.txt"

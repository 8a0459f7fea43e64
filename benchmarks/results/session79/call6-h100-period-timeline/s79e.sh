#!/usr/bin/env bash
# session 79, call 6: where the period regime's fixed cost goes on small slabs (1025 x 1001 and 4097 x 1001 over
# dim 0 lost to the strided kernel in bf16): the GPU timeline of one softmax call (profile_once.py --timeline), the
# period regime and the strided kernel forced, fp32 and bf16
set -uo pipefail
OUT=${OUT:-out}
mkdir -p /tmp/osm-unpack /tmp/osm-cache && tar xzf .osmcache.tgz -C /tmp/osm-unpack && cp -rn /tmp/osm-unpack/.osmcache/. /tmp/osm-cache/ 2>/dev/null
SECONDS=0
for shape in 1001x1025 1001x4097; do for dtype in bfloat16 float32; do for regime in period strided; do
  echo "## $shape dim 0 $dtype $regime"
  PYTHONPATH="$PWD/src" ONLINESOFTMAX_CACHE=/tmp/osm-cache timeout 40 python3 benchmarks/profile_once.py \
    softmax $dtype $shape --dim 0 --regime $regime --timeline 2>&1 | grep -v Warning
done; done; done >"$OUT/period-timeline.txt" 2>&1
echo "total $SECONDS s"
cat "$OUT/period-timeline.txt"

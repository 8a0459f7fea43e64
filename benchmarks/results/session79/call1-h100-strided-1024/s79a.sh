#!/usr/bin/env bash
# the next call, prepared in session 78 (README.md, "Next"), not run: the strided kernels' scalar path (W = 1) may
# launch 1024-thread CTAs, one an SM under the same 64-register cap (next-strided-1024.diff: the shared arrays and
# launch bound of W = 1 sized for 1024 threads; the rules still launch 512). Ncu put the scalar path at 25% occupancy:
# 126 strips, one 512-thread CTA an SM. 1) the rules' 512-thread launches, the tree against HEAD (.ab/base), for the
# larger static arrays' cost; 2) benchmarks/probe_columns.py --strided on dim 0 of 4097 x 1001: every lanes x rows
# (512 and 1024 threads) and grid, each output NaN-poisoned and checked against float64, torch and the plan beside.
# From the repository root, carrying .osmcache.tgz (precompile --layouts for the tree and .ab/base), .commit, .ab
set -uo pipefail
OUT=${OUT:-out}
export ONLINESOFTMAX_COMMIT="$(head -1 .commit)"
SECONDS=0
SHAPE_TIMEOUT=60 TREES="new=$PWD/src=strided base=$PWD/.ab/base/src=strided" DTYPES="float32 bfloat16" \
SHAPES="4097 1001 --dim 0;16 300 45 45 --dim 1" bash benchmarks/device.sh layouts-ab >/dev/null
PYTHONPATH="$PWD/src" ONLINESOFTMAX_CACHE=/tmp/osm-cache timeout 240 python3 benchmarks/probe_columns.py --strided \
  --layout 'dim 0 of an odd-width matrix' --dtype float32 --dtype bfloat16 >"$OUT/probe-strided.txt" 2>&1
echo "total $SECONDS s"
grep -E "^##|%" "$OUT/layouts-ab.txt" | cut -c1-330
grep -v Warning "$OUT/probe-strided.txt"

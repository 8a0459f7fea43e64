#!/usr/bin/env bash
# Session 85's call 1 (session 84's s84a.sh, which no machine ran), by the GPU that comes. Setup: git apply benchmarks/results/session84/next-period-merge-shfl.diff; .ab/head and .ab/trace as below; precompile
# --tests, --layouts and the sweep for src and the 12 period kernels of each .ab tree (session 84's README).
# src = HEAD (8de87a8) + the period merge phase's rows folded by warp
# shuffles in the stats' pairs' place (one barrier where a static tree took seven; no static shared memory, so
# PERIOD_SMEM 220 -> 227 KB: 8193 x 1001 bf16 backward keeps 12 periods, not 8); .ab/head = HEAD; .ab/trace = HEAD + session83/next-s83trace.diff.
# Only the period kernels differ between src and HEAD (sass_diff: 12 of 12 changed, the rest the same source).
# On an H200 (none since session 65): issue 12's public grid in fp32 and bf16 (device.sh grid, ~250 s a dtype).
# On an H100: the A/B of the merge (period forced), the period/layout/graph/concurrency tests beside the sanitizers
# on src, the phases' stamps of HEAD, and period against strided at 1537 and 1793 x 1001 dim 0 (PERIOD_MIN_BYTES).
# Carrying .osmcache.tgz, .commit, .ab, this script.
set -uo pipefail
OUT=${OUT:-out}
export ONLINESOFTMAX_COMMIT="$(head -1 .commit)+s84 (period merge rows by shuffles)"
SECONDS=0
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  python3 -c "import torch, triton, cuda.core as c; print('torch', torch.__version__, 'triton', triton.__version__, 'cuda.core', c.__version__)"
} > "$OUT/env.txt" 2>&1
cat "$OUT/env.txt"
if grep -q H200 "$OUT/env.txt"; then
  DTYPES="float32 bfloat16" SWEEP_TIMEOUT=280 bash benchmarks/device.sh grid >/dev/null
  echo "grid $SECONDS s"; tail -2 "$OUT"/sweep-*.txt; cut -c1-200 "$OUT/grid.md"
  exit 0
fi
SHAPE_TIMEOUT=60 AB_NAME=layouts-shfl TREES="shfl=$PWD/src=period head=$PWD/.ab/head/src=period" \
  DTYPES="float32 bfloat16" SHAPES="4097 1001 --dim 0;8193 1001 --dim 0;2049 3001 --dim 0" \
  bash benchmarks/device.sh layouts-ab >/dev/null
echo "A/B $SECONDS s"
grep -E "^##|%" "$OUT"/layouts-shfl.txt | sed -E 's/\| torch.*//; s/\(err [^)]*\)//g' | cut -c1-200
SANITIZE_ARGS="--regime period" TEST_TIMEOUT=240 bash benchmarks/device.sh checks tests period >/dev/null
echo "checks $SECONDS s" | tee -a "$OUT/tests-summary.txt"
cat "$OUT"/tests-summary.txt "$OUT/sanitize-summary.txt" 2>/dev/null
ONLINESOFTMAX_CACHE=/tmp/osm-cache timeout 120 python3 benchmarks/results/session81/call1-h100-period-cpa-trace/s81trace.py \
  "$PWD/.ab/trace/src" softmax float32 1001x4097 softmax bfloat16 1001x4097 softmax_backward bfloat16 1001x4097 \
  > "$OUT/trace.txt" 2>&1
echo "stamps $SECONDS s"; cat "$OUT/trace.txt"
SHAPE_TIMEOUT=80 AB_NAME=floor TREES="shfl=$PWD/src=period,strided" DTYPES="float32 bfloat16" \
  SHAPES="1537 1001 --dim 0;1793 1001 --dim 0" bash benchmarks/device.sh layouts-ab >/dev/null
echo "floor $SECONDS s"
grep -E "^##|%" "$OUT"/floor.txt | sed -E 's/\| torch.*//; s/\(err [^)]*\)//g' | cut -c1-200

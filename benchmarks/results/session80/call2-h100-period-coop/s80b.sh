#!/usr/bin/env bash
# Session 80, call 1: the period regime in one cooperative launch (stats, merge and apply as phases of one grid,
# two grid barriers; uncommitted tree `src`) against its three-launch form (f30780f, .ab/base) and the strided kernel,
# and the same with more accesses in flight a trip (.ab/u8: 8 fp32 / 6 16-bit forward, 4 backward); then the GPU
# tests of the period regime (the layouts, the known-wrong barrier, several streams, a CUDA graph), every automatic
# plan and memcheck. Carrying .osmcache.tgz, .commit, .ab and this script. On an H200 also session 78's W = 8 strided
# change against fbe7b23 (.ab/w8base).
set -uo pipefail
OUT=${OUT:-out}
export ONLINESOFTMAX_COMMIT="$(head -1 .commit)"
SECONDS=0
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
SHAPE_TIMEOUT=90 AB_NAME=layouts-period TREES="new=$PWD/src=period u8=$PWD/.ab/u8/src=period base=$PWD/.ab/base/src=period,strided" \
DTYPES="float32 bfloat16" \
SHAPES="4097 1001 --dim 0;2049 3001 --dim 0;1025 1001 --dim 0;513 1001 --dim 0;8193 1001 --dim 0;16 300 45 45 --dim 1" \
  bash benchmarks/device.sh layouts-ab >/dev/null
echo "A/B $SECONDS s"
if grep -q H200 "$OUT/gpu.txt"; then
  SHAPE_TIMEOUT=60 AB_NAME=layouts-w8 TREES="new=$PWD/src=strided base=$PWD/.ab/w8base/src=strided" \
  DTYPES="bfloat16 float16" SHAPES="8192 8192 --dim 0;8 1000 64 64 --dim 1" bash benchmarks/device.sh layouts-ab >/dev/null
  echo "W8 $SECONDS s"
fi
( TOOLS="memcheck synccheck" OUT="$OUT" timeout 220 bash benchmarks/sanitize.sh --regime period >"$OUT/sanitize.txt" 2>&1 ) &
TEST_TIMEOUT=300 bash benchmarks/device.sh groups tests \
  "tests/test_gpu_production.py -k 'period'" \
  "tests/test_gpu_production.py -k 'automatic_plans'" \
  "tests/test_gpu_production.py -k 'forward_backward_layouts'" >/dev/null
wait
cp "$OUT/sanitize/summary.txt" "$OUT/sanitize-summary.txt" 2>/dev/null; rm -rf "$OUT/sanitize"
echo "total $SECONDS s" | tee -a "$OUT/tests-summary.txt"
cat "$OUT/tests-summary.txt" "$OUT/sanitize-summary.txt" 2>/dev/null
grep -E "^##|%" "$OUT"/layouts-*.txt | cut -c1-260

#!/usr/bin/env bash
# Session 80, call 4: the one-launch period kernel with each CTA's band kept in shared memory from its stats to its
# apply (plan.period_keep; uncommitted tree `src`) against the three-launch form (f30780f, .ab/base), then the period
# GPU tests (layouts, the known-wrong barrier, several streams), the CUDA graph test, every automatic plan and
# memcheck. Carrying .osmcache.tgz, .commit, .ab and this script.
set -uo pipefail
OUT=${OUT:-out}
export ONLINESOFTMAX_COMMIT="$(head -1 .commit)"
SECONDS=0
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
SHAPE_TIMEOUT=90 AB_NAME=layouts-keep TREES="new=$PWD/src=period base=$PWD/.ab/base/src=period" \
DTYPES="float32 bfloat16" SHAPES="4097 1001 --dim 0;2049 3001 --dim 0;8193 1001 --dim 0;1025 1001 --dim 0" \
  bash benchmarks/device.sh layouts-ab >/dev/null
echo "A/B $SECONDS s"
( TOOLS=memcheck OUT="$OUT" timeout 150 bash benchmarks/sanitize.sh --regime period >"$OUT/sanitize.txt" 2>&1 ) &
TEST_TIMEOUT=260 bash benchmarks/device.sh groups tests \
  "tests/test_gpu_production.py -k 'period and not cuda_graph'" \
  "tests/test_gpu_production.py -k 'automatic_plans'" \
  "tests/test_gpu_production.py -k 'cuda_graph'" >/dev/null
wait
cp "$OUT/sanitize/summary.txt" "$OUT/sanitize-summary.txt" 2>/dev/null; rm -rf "$OUT/sanitize"
echo "total $SECONDS s" | tee -a "$OUT/tests-summary.txt"
cat "$OUT/tests-summary.txt" "$OUT/sanitize-summary.txt" 2>/dev/null
grep -E "^##|%" "$OUT"/layouts-*.txt | cut -c1-260

#!/usr/bin/env bash
# Session 82, call 1. Two trees on dim 0 of three shapes, period forced: src = session 81's held-back
# next-period-merge-passes.diff plus the driver's grid barrier (os_grid_sync: no counter, no memset), .ab/head =
# HEAD. Then on src the period tests (the known-wrong build without waits among them), the
# layout tests and the CUDA graph test beside memcheck, racecheck and synccheck --regime period; where the period
# tests fail, again on .ab/passes (the diff alone). Carrying .osmcache.tgz, .commit, .ab and this script.
set -uo pipefail
OUT=${OUT:-out}
export ONLINESOFTMAX_COMMIT="$(head -1 .commit)+s82 (next-period-merge-passes.diff, os_grid_sync)"
SECONDS=0
SHAPE_TIMEOUT=60 AB_NAME=layouts-sync TREES="sync=$PWD/src=period head=$PWD/.ab/head/src=period" \
DTYPES="float32 bfloat16" SHAPES="4097 1001 --dim 0;8193 1001 --dim 0;2049 3001 --dim 0" \
  bash benchmarks/device.sh layouts-ab >/dev/null
echo "A/B $SECONDS s"
SANITIZE_ARGS="--regime period" TEST_TIMEOUT=240 bash benchmarks/device.sh checks tests \
  "tests/test_gpu_production.py -k 'period and not cuda_graph'" \
  "tests/test_gpu_production.py -k 'forward_backward_layouts'" \
  "tests/test_gpu_production.py -k 'cuda_graph'" >/dev/null
if grep -q "failed\|error\|RAN NO TEST" "$OUT/tests-summary.txt"; then
  rm -rf src && cp -r .ab/passes/src src
  TEST_TIMEOUT=120 bash benchmarks/device.sh groups tests-passes "tests/test_gpu_production.py -k 'period and not cuda_graph'" >/dev/null
fi
echo "total $SECONDS s" | tee -a "$OUT/tests-summary.txt"
cat "$OUT"/tests*-summary.txt "$OUT/sanitize-summary.txt" 2>/dev/null
grep -E "^##|%" "$OUT"/layouts-*.txt | sed -E 's/\| torch.*//; s/\(err [^)]*\)//g' | cut -c1-200

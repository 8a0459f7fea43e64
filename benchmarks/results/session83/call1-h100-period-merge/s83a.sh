#!/usr/bin/env bash
# Session 83, call 1. src = HEAD (72d94e7) with the period stats' pass-free merge (every thread stores its T x V
# pairs, one barrier, a thread folds each column's); .ab/head = HEAD. The A/B on dim 0 (period forced in both,
# strided beside in src: below plan.PERIOD_MIN_BYTES too, now that the kernel is one launch without a memset);
# then on src the period, layout, CUDA graph and concurrency tests beside memcheck, racecheck, synccheck --regime
# period. Carrying .osmcache.tgz, .commit, .ab and this script.
set -uo pipefail
OUT=${OUT:-out}
export ONLINESOFTMAX_COMMIT="$(head -1 .commit)+s83 (period stats merge without passes)"
SECONDS=0
SHAPE_TIMEOUT=60 AB_NAME=layouts-merge TREES="new=$PWD/src=period,strided head=$PWD/.ab/head/src=period" \
  DTYPES="float32 bfloat16" \
  SHAPES="4097 1001 --dim 0;8193 1001 --dim 0;2049 3001 --dim 0;1025 1001 --dim 0;2049 1001 --dim 0" \
  bash benchmarks/device.sh layouts-ab >/dev/null
echo "A/B $SECONDS s"
grep -E "^##|%" "$OUT"/layouts-merge.txt | sed -E 's/\| torch.*//; s/\(err [^)]*\)//g' | cut -c1-200
SANITIZE_ARGS="--regime period" TEST_TIMEOUT=240 bash benchmarks/device.sh checks tests \
  "tests/test_gpu_production.py -k 'period and not cuda_graph'" \
  "tests/test_gpu_production.py -k 'forward_backward_layouts or cuda_graph'" \
  "tests/test_gpu_concurrency.py" >/dev/null
echo "total $SECONDS s" | tee -a "$OUT/tests-summary.txt"
cat "$OUT"/tests-summary.txt "$OUT/sanitize-summary.txt" 2>/dev/null

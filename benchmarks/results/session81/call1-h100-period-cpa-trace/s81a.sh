#!/usr/bin/env bash
# Session 81, call 1: the period stats with the kept periods copied by cp.async (all in flight at once, the unkept
# ones read meanwhile; working tree `src`) against session 80's review mend alone (.ab/unkeep: period_in and
# period_unkeep) and HEAD a9d198c (.ab/base); then the period tests, memcheck, racecheck and synccheck over the
# period regime; the phases' times from each CTA's stamps (s81trace.py). On an H200 also the rules' strided against the period regime (session 79's s80a.sh, part 1).
# Carrying .osmcache.tgz, .commit, .ab and this script.
set -uo pipefail
OUT=${OUT:-out}
export ONLINESOFTMAX_COMMIT="$(head -1 .commit)"
SECONDS=0
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
python3 -c "import torch, triton, cuda.core, numpy; print(torch.__version__, triton.__version__, cuda.core.__version__, numpy.__version__)" > "$OUT/env.txt" 2>&1
SHAPE_TIMEOUT=90 AB_NAME=layouts-cpa TREES="cpa=$PWD/src=period unkeep=$PWD/.ab/unkeep/src=period base=$PWD/.ab/base/src=period" \
DTYPES="float32 bfloat16" SHAPES="4097 1001 --dim 0;2049 3001 --dim 0;8193 1001 --dim 0" \
  bash benchmarks/device.sh layouts-ab >/dev/null
echo "A/B $SECONDS s"
export ONLINESOFTMAX_CACHE=/tmp/osm-cache
# where the one launch's time goes: each CTA's %globaltimer stamps (s81trace.diff on the cpa tree and on HEAD's)
for t in trace tracebase; do
  echo "# tree $t" >> "$OUT/trace.txt"
  timeout 150 python3 s81trace.py "$PWD/.ab/$t/src" softmax float32 1001x4097 softmax bfloat16 1001x4097 \
    softmax_backward float32 1001x4097 softmax float32 3001x2049 >> "$OUT/trace.txt" 2>&1
done
echo "trace $SECONDS s"
( TOOLS="memcheck racecheck synccheck" OUT="$OUT" timeout 240 bash benchmarks/sanitize.sh --regime period >"$OUT/sanitize.txt" 2>&1 ) &
TEST_TIMEOUT=200 bash benchmarks/device.sh groups tests \
  "tests/test_gpu_production.py -k 'period and not cuda_graph'" >/dev/null
wait
cp "$OUT/sanitize/summary.txt" "$OUT/sanitize-summary.txt" 2>/dev/null; rm -rf "$OUT/sanitize"
if grep -q H200 "$OUT/gpu.txt"; then
  SHAPE_TIMEOUT=60 AB_NAME=layouts-h200 TREES="cpa=$PWD/src=strided,period" DTYPES="float32 bfloat16 float16" \
  SHAPES="4097 1001 --dim 0;2049 3001 --dim 0;1025 1001 --dim 0" bash benchmarks/device.sh layouts-ab >/dev/null
fi
echo "total $SECONDS s" | tee -a "$OUT/tests-summary.txt"
cat "$OUT/tests-summary.txt" "$OUT/sanitize-summary.txt" 2>/dev/null
grep -E "^##|%" "$OUT"/layouts-*.txt | cut -c1-200
cat "$OUT/trace.txt"

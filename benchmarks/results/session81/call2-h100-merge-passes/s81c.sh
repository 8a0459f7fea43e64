#!/usr/bin/env bash
# Session 81, the last call's short form of s81b.sh (433 s of device time left after six refused starts): the merge
# (src) and the passes (.ab/passes) trees against unkeep (.ab/unkeep) on dim 0 of 4097 x 1001 and 8193 x 1001, then
# the period tests and memcheck, racecheck and synccheck on the passes tree, then the stamps and the floor if time is
# left. Carrying .osmcache.tgz, .commit, .ab, s81trace.py and this script.
set -uo pipefail
OUT=${OUT:-out}
export ONLINESOFTMAX_COMMIT="$(head -1 .commit)"
SECONDS=0
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
python3 -c "import torch, triton, cuda.core, numpy; print(torch.__version__, triton.__version__, cuda.core.__version__, numpy.__version__)" > "$OUT/env.txt" 2>&1
SHAPE_TIMEOUT=60 AB_NAME=layouts-merge TREES="merge=$PWD/src=period passes=$PWD/.ab/passes/src=period unkeep=$PWD/.ab/unkeep/src=period" \
DTYPES="float32 bfloat16" SHAPES="4097 1001 --dim 0;8193 1001 --dim 0" bash benchmarks/device.sh layouts-ab >/dev/null
echo "A/B $SECONDS s"
rm -rf src && cp -r .ab/passes/src src
( TOOLS="memcheck racecheck synccheck" OUT="$OUT" timeout 120 bash benchmarks/sanitize.sh --regime period >"$OUT/sanitize.txt" 2>&1 ) &
TEST_TIMEOUT=120 bash benchmarks/device.sh groups tests "tests/test_gpu_production.py -k 'period and not cuda_graph'" >/dev/null
wait
cp "$OUT/sanitize/summary.txt" "$OUT/sanitize-summary.txt" 2>/dev/null; rm -rf "$OUT/sanitize" "$OUT/sanitize.txt"
echo "checks $SECONDS s" | tee -a "$OUT/tests-summary.txt"
export ONLINESOFTMAX_CACHE=/tmp/osm-cache
timeout 60 python3 s81trace.py "$PWD/.ab/tracep/src" softmax float32 1001x4097 softmax bfloat16 1001x4097 > "$OUT/trace.txt" 2>&1
PYTHONPATH=$PWD/src timeout 60 python3 benchmarks/two_phase_floor.py --shape 4097 1001 --shape 8193 1001 > "$OUT/floor.txt" 2>&1
echo "total $SECONDS s" | tee -a "$OUT/tests-summary.txt"
cat "$OUT/tests-summary.txt" "$OUT/sanitize-summary.txt" 2>/dev/null
grep -E "^##|%" "$OUT"/layouts-*.txt | sed -E 's/\| torch.*//; s/\(err [^)]*\)//g' | cut -c1-200
cat "$OUT/floor.txt" "$OUT/trace.txt"

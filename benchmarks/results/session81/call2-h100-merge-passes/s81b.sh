#!/usr/bin/env bash
# Prepared in session 81, not run as is (six starts were refused; call 2 ran its short form s81c.sh and found the
# merge's rows wrong where T < 512). For the next session, on a tree with next-period-merge-passes.diff applied as
# `.ab/passes` and next-period-merge.diff as `src`, each precompiled (--tests --layouts for .ab/passes), .ab/unkeep
# = afe5c62's src, .ab/tracem and .ab/tracep with s81trace.diff's stamps: the A/B on four shapes (strided beside),
# the period tests, the CUDA graph test and memcheck, racecheck and synccheck on the passes tree, then the stamps
# and benchmarks/two_phase_floor.py. device.sh writes env.txt (GPU, versions, commit). Carrying .osmcache.tgz,
# .commit, .ab, s81trace.py and this script.
set -uo pipefail
OUT=${OUT:-out}
export ONLINESOFTMAX_COMMIT="$(head -1 .commit)"
SECONDS=0
SHAPE_TIMEOUT=90 AB_NAME=layouts-merge TREES="merge=$PWD/src=period,strided passes=$PWD/.ab/passes/src=period unkeep=$PWD/.ab/unkeep/src=period" \
DTYPES="float32 bfloat16" SHAPES="4097 1001 --dim 0;8193 1001 --dim 0;2049 3001 --dim 0;1025 1001 --dim 0" \
  bash benchmarks/device.sh layouts-ab >/dev/null
echo "A/B $SECONDS s"
# the checks on the passes tree (the merge and the passes), copied over src here
rm -rf src && cp -r .ab/passes/src src
( TOOLS="memcheck racecheck synccheck" OUT="$OUT" timeout 200 bash benchmarks/sanitize.sh --regime period >"$OUT/sanitize.txt" 2>&1 ) &
TEST_TIMEOUT=260 bash benchmarks/device.sh groups tests \
  "tests/test_gpu_production.py -k 'period and not cuda_graph'" \
  "tests/test_gpu_production.py -k 'cuda_graph'" >/dev/null
wait
cp "$OUT/sanitize/summary.txt" "$OUT/sanitize-summary.txt" 2>/dev/null; rm -rf "$OUT/sanitize" "$OUT/sanitize.txt"
export ONLINESOFTMAX_CACHE=/tmp/osm-cache
for t in tracem tracep; do
  echo "# tree $t" >> "$OUT/trace.txt"
  timeout 120 python3 s81trace.py "$PWD/.ab/$t/src" softmax float32 1001x4097 softmax bfloat16 1001x4097 \
    softmax_backward float32 1001x4097 >> "$OUT/trace.txt" 2>&1
done
PYTHONPATH=$PWD/src timeout 120 python3 benchmarks/two_phase_floor.py --shape 4097 1001 --shape 2049 3001 \
  --shape 8193 1001 --shape 1025 1001 --shape 8192 8192 > "$OUT/floor.txt" 2>&1
echo "trace, floor $SECONDS s"
echo "total $SECONDS s" | tee -a "$OUT/tests-summary.txt"
cat "$OUT/tests-summary.txt" "$OUT/sanitize-summary.txt" 2>/dev/null
grep -E "^##|%" "$OUT"/layouts-*.txt | sed -E 's/\| torch.*//; s/\(err [^)]*\)//g' | cut -c1-200
cat "$OUT/floor.txt" "$OUT/trace.txt"

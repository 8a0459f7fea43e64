#!/usr/bin/env bash
# Session 80, call 3: call 2's one-launch period kernel (src) against its form with more accesses in flight a trip
# (.ab/u8: 8 fp32 / 6 16-bit forward, 4 backward; call 2 ran it without run.py's fix) and the three-launch form
# (f30780f, .ab/base), then ncu on the forward of dim 0 of 4097 x 1001 fp32 in each tree (one launch each).
set -uo pipefail
OUT=${OUT:-out}
export ONLINESOFTMAX_COMMIT="$(head -1 .commit)"
SECONDS=0
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
SHAPE_TIMEOUT=90 AB_NAME=layouts-u8 TREES="new=$PWD/src=period u8=$PWD/.ab/u8/src=period base=$PWD/.ab/base/src=period" \
DTYPES="float32 bfloat16" SHAPES="4097 1001 --dim 0;2049 3001 --dim 0;8193 1001 --dim 0;1025 1001 --dim 0" \
  bash benchmarks/device.sh layouts-ab >/dev/null
echo "A/B $SECONDS s"
mkdir -p "$OUT/ncu"
for t in new=src u8=.ab/u8/src base=.ab/base/src; do
  IFS='=' read -r name dir <<<"$t"
  for op in softmax softmax_backward; do
    n=1; [ $name = base ] && n=3  # the three launches of the first form
    PYTHONPATH="$PWD/$dir" ONLINESOFTMAX_CACHE=/tmp/osm-cache timeout 100 ncu --clock-control none -k 'regex:^(fwd|bwd)_period' -c $n \
      --section SpeedOfLight --section Occupancy --section WarpStateStats --section MemoryWorkloadAnalysis \
      --metrics 'regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio' \
      python3 benchmarks/profile_once.py $op float32 1001x4097 --dim 0 --regime period >"$OUT/ncu/$name-$op.txt" 2>&1
  done
done
python3 benchmarks/ncu_summary.py "$OUT"/ncu/*.txt | tee "$OUT/ncu-summary.txt"
tar czf "$OUT/ncu.tgz" -C "$OUT" ncu && rm -rf "$OUT/ncu"
echo "total $SECONDS s"
grep -E "^##|%" "$OUT"/layouts-*.txt | cut -c1-260

#!/usr/bin/env bash
# Nsight Compute on one launch per case: the production kernels at the shapes where the H200 targets are missed,
# with torch's kernel beside some. Runs on the lent GPU from the repository root (the package from src/):
#   bash benchmarks/ncu.sh [CASE ...]     CASE = name:OP:DTYPE:MxN[:DIM[:IMPL[:VIEW]]]   (IMPL ours, triton or
#                                         torch; default: the list below;
#                                         VIEW a flag of profile_once.py without its dashes: sliced, x[:, 1:]
#                                         of M x (N + 1); regime=R, ours with regime R forced, e.g. regime=bands)
# Writes $OUT/ncu/<name>.txt (sections + warp-stall metrics) and prints benchmarks/ncu_summary.py's table.
set -uo pipefail
OUT=${OUT:-out}
mkdir -p "$OUT/ncu"
export PYTHONPATH="$PWD/src" PYTHONUNBUFFERED=1 ONLINESOFTMAX_CACHE=${ONLINESOFTMAX_CACHE:-/tmp/osm-cache}
CASES=("$@")
if [ ${#CASES[@]} -eq 0 ]; then
  CASES=(
    fwd-f32-128:softmax:float32:1048576x128 fwd-f32-128-torch:softmax:float32:1048576x128:-1:torch
    fwd-bf16-128:softmax:bfloat16:1048576x128 fwd-bf16-256:softmax:bfloat16:524288x256
    log-bf16-128:log_softmax:bfloat16:1048576x128 log-bf16-8192:log_softmax:bfloat16:16384x8192
    fwd-f32-65536:softmax:float32:2048x65536 fwd-f32-262144:softmax:float32:512x262144
    fwd-bf16-262144:softmax:bfloat16:512x262144 logbwd-f32-262144:log_softmax_backward:float32:512x262144
    bwd-bf16-131072:softmax_backward:bfloat16:1024x131072
    few-f32-1x262144:softmax:float32:1x262144 few-f32-32x131072:softmax:float32:32x131072
    few-bf16-32x131072:softmax:bfloat16:32x131072
    dim0-f32:softmax:float32:8192x8192:0 dim0-bwd-f32:softmax_backward:float32:8192x8192:0
  )
fi
for c in "${CASES[@]}"; do
  IFS=: read -r name op dtype shape dim impl view <<<"$c"
  impl=${impl:-ours}
  case $impl in ours) filter='regex:^(fwd|bwd)_' ;; triton) filter='regex:^(rows|online|split)_kernel' ;;
                *) filter='regex:[Ss]oft[Mm]ax' ;; esac
  ncu --clock-control none -k "$filter" -c 1 \
      --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats \
      --section MemoryWorkloadAnalysis --metrics 'regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio' \
      python3 benchmarks/profile_once.py "$op" "$dtype" "$shape" --dim "${dim:--1}" --impl "$impl" \
        ${view:+--$view} \
      >"$OUT/ncu/$name.txt" 2>&1 || echo "$name: ncu failed (rc $?), see $OUT/ncu/$name.txt"
done
python3 benchmarks/ncu_summary.py "$OUT"/ncu/*.txt | tee "$OUT/ncu-summary.txt"

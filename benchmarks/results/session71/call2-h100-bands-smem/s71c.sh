#!/usr/bin/env bash
# session 71 call 2: bands staged in shared memory (the working tree: S = 16 / 8 accesses a thread beside 14 / 7 in
# registers; .ab/s96: S = 24 / 12) against the bands of HEAD (.ab/base: 16 / 8 in registers), forced beside the
# rules' plan, alone on the GPU and interleaved per shape (benchmarks/layout_regimes.py); then the GPU tests in
# parallel processes: the bands tests of the working tree, the rest of test_gpu_production.py that call 1 cut off, and
# compute-sanitizer (memcheck, racecheck) over sanitize_driver.py --regime bands and the bands_fix test
set -uo pipefail
OUT=${OUT:-out}; mkdir -p "$OUT/logs"
export PYTHONUNBUFFERED=1 ONLINESOFTMAX_COMMIT="$(head -1 .commit)" ONLINESOFTMAX_CACHE=/tmp/osm-cache
mkdir -p /tmp/osm-unpack /tmp/osm-cache && tar xzf .osmcache.tgz -C /tmp/osm-unpack && cp -rn /tmp/osm-unpack/.osmcache/. /tmp/osm-cache/ 2>/dev/null
{ nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv
  python3 -c 'import torch, triton, cuda.core; print("torch", torch.__version__, "triton", triton.__version__, "cuda.core", cuda.core.__version__)'
  cat .commit; } | tee "$OUT/logs/env.txt"
declare -A TREE=([base]=.ab/base/src [s64]=$PWD/src [s96]=.ab/s96/src)
{ for shape in "8192 8192 --dim 0" "8 1000 64 64 --dim 1" "4 2000 4096 --dim 1" "2048 8192 --dim 0"; do
    for t in base s64 s96; do
      echo "## $t: $shape"
      PYTHONPATH=${TREE[$t]} timeout 100 python3 benchmarks/layout_regimes.py --regimes bands --dtype float32 bfloat16 \
        --shape $shape 2>&1 | grep -v Warning
    done
  done; } | tee "$OUT/ab.txt"
P=tests/test_gpu_production.py
groups=("$PWD/src|$P -k 'automatic_plans'" "$PWD/src|$P -k 'long_rows_run_the_rules_plan or few_row_clusters'"
        "$PWD/src|$P -k 'torch_compile or side_stream or cuda_graph or in_place or split_waves'"
        "$PWD/src|$P -k 'beyond_2_31 or realigning or near_one_hot or fused_cast or hot_path'"
        "$PWD/src|$P -k 'bands'")
for i in "${!groups[@]}"; do
  ( g=${groups[$i]}; echo "# ${g}"
    eval PYTHONPATH=${g%%|*} ONLINESOFTMAX_EVIDENCE="$OUT/logs" timeout 330 python3 -m pytest ${g#*|} -m gpu -q -rfEs --durations=5 -p no:cacheprovider ) >"$OUT/logs/group-$i.log" 2>&1 &
done
for tool in memcheck racecheck; do
  ( PYTHONPATH=$PWD/src timeout 330 compute-sanitizer --tool $tool --report-api-errors no python3 benchmarks/sanitize_driver.py --regime bands \
      > "$OUT/logs/san-driver-bands-$tool.log" 2>&1; echo "exit $?" >> "$OUT/logs/san-driver-bands-$tool.log" ) &
done
( PYTHONPATH=$PWD/src timeout 330 compute-sanitizer --tool memcheck --report-api-errors no python3 -m pytest $P -k 'bands_fix and float32' -m gpu -q -p no:cacheprovider \
    > "$OUT/logs/san-pytest-bands-fix-memcheck.log" 2>&1 ) &
wait
for i in "${!groups[@]}"; do
  echo "${groups[$i]}: $(grep -E ' in [0-9.]+s' "$OUT/logs/group-$i.log" | tail -1)"
done | tee "$OUT/summary.txt"
for f in "$OUT"/logs/san-*.log; do echo "$(basename $f): $(grep -E 'SUMMARY|^driver|cases|^exit| in [0-9.]+s' "$f" | tr '\n' ' ')"; done | tee -a "$OUT/summary.txt"
grep -h -E '^(FAILED|ERROR)|^E  ' "$OUT"/logs/group-*.log | head -40 | tee -a "$OUT/summary.txt"
tar czf "$OUT/logs.tgz" -C "$OUT" logs && rm -r "$OUT/logs"

#!/usr/bin/env bash
# session 72 call 1: even bands (the working tree: 45b60ce + next-even-bands.diff: the band's rows a run-time
# argument, up to 24 / 12 accesses a thread in shared memory, N shared evenly among the fewest bands) against HEAD's
# bands (.ab/base: 16 / 8 slots, bands of 960 / 480 rows), forced beside the rules' plan, alone on the GPU and
# interleaved per shape; then in parallel: -k bands and automatic_plans on the working tree, compute-sanitizer
# memcheck / racecheck over sanitize_driver.py --regime bands, memcheck over the bands_fix tests
set -uo pipefail
OUT=${OUT:-out}; mkdir -p "$OUT/logs"
export PYTHONUNBUFFERED=1 ONLINESOFTMAX_COMMIT="$(head -1 .commit)" ONLINESOFTMAX_CACHE=/tmp/osm-cache
mkdir -p /tmp/osm-unpack /tmp/osm-cache && tar xzf .osmcache.tgz -C /tmp/osm-unpack && cp -rn /tmp/osm-unpack/.osmcache/. /tmp/osm-cache/ 2>/dev/null
{ nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv
  python3 -c 'import torch, triton, cuda.core; print("torch", torch.__version__, "triton", triton.__version__, "cuda.core", cuda.core.__version__)'
  cat .commit; } | tee "$OUT/logs/env.txt"
declare -A TREE=([base]=.ab/base/src [even]=$PWD/src)
SECONDS=0
{ for shape in "8192 8192 --dim 0" "8 1000 64 64 --dim 1" "2048 8192 --dim 0" "4 2000 4096 --dim 1" "3 3000 512 --dim 1" "8 150 256 256 --dim 1"; do
    for t in base even; do
      echo "## $t: $shape ($SECONDS s)"
      PYTHONPATH=${TREE[$t]} timeout 100 python3 benchmarks/layout_regimes.py --regimes bands --dtype float32 bfloat16 \
        --shape $shape 2>&1 | grep -v Warning
    done
  done; } | tee "$OUT/ab.txt"
P=tests/test_gpu_production.py
groups=("$P -k 'bands'" "$P -k 'automatic_plans'")
for i in "${!groups[@]}"; do
  ( echo "# ${groups[$i]}"
    eval PYTHONPATH=$PWD/src ONLINESOFTMAX_EVIDENCE="$OUT/logs" timeout 300 python3 -m pytest ${groups[$i]} -m gpu -q -rfEs --durations=5 -p no:cacheprovider ) >"$OUT/logs/group-$i.log" 2>&1 &
done
for tool in memcheck racecheck; do
  ( PYTHONPATH=$PWD/src timeout 300 compute-sanitizer --tool $tool --report-api-errors no python3 benchmarks/sanitize_driver.py --regime bands \
      > "$OUT/logs/san-driver-bands-$tool.log" 2>&1; echo "exit $?" >> "$OUT/logs/san-driver-bands-$tool.log" ) &
done
( PYTHONPATH=$PWD/src timeout 300 compute-sanitizer --tool memcheck --report-api-errors no python3 -m pytest $P -k 'bands_fix and float32' -m gpu -q -p no:cacheprovider \
    > "$OUT/logs/san-pytest-bands-fix-memcheck.log" 2>&1 ) &
wait
for i in "${!groups[@]}"; do
  echo "${groups[$i]}: $(grep -E ' in [0-9.]+s' "$OUT/logs/group-$i.log" | tail -1)"
done | tee "$OUT/summary.txt"
for f in "$OUT"/logs/san-*.log; do echo "$(basename $f): $(grep -E 'SUMMARY|^driver|cases|^exit| in [0-9.]+s' "$f" | tr '\n' ' ')"; done | tee -a "$OUT/summary.txt"
grep -h -E '^(FAILED|ERROR)|^E  ' "$OUT"/logs/group-*.log | head -40 | tee -a "$OUT/summary.txt"
echo "total $SECONDS s" | tee -a "$OUT/summary.txt"
tar czf "$OUT/logs.tgz" -C "$OUT" logs && rm -r "$OUT/logs"

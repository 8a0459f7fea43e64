#!/usr/bin/env bash
# The same sweep (ours only, CUDA backend unless BACKEND) for several source trees, one after the other on the same GPU: the A/B
# of a kernel change. Runs on the lent GPU from the repository root:
#   bash benchmarks/ab.sh NAME=SRC_DIR [NAME=SRC_DIR ...] -- [sweep args]
# e.g. bash benchmarks/ab.sh base=/tmp/base/src new=src -- --op softmax --dtype bfloat16 --n 128 --n 256
# BACKEND=triton: the Triton backend's A/B instead (the sweep's --backend)
# Writes $OUT/ab-NAME.csv per tree and prints % of copy side by side, each tree's change against the first and the
# cells at target ($OUT/ab.txt: onlinesoftmax report --ab, which reads those CSVs anywhere).
set -uo pipefail
OUT=${OUT:-out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
trees=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do trees+=("$1"); shift; done
shift || true
for t in "${trees[@]}"; do
  name=${t%%=*}; dir=${t#*=}
  rm -f "$OUT/ab-$name.csv"  # never an earlier run's
  ONLINESOFTMAX_CACHE=/tmp/osm-cache-$name PYTHONPATH="$dir" \
    python3 -m onlinesoftmax sweep --ours-only --backend "${BACKEND:-cuda}" --out "$OUT/ab-$name.csv" "$@" >"$OUT/ab-$name.txt" 2>&1 \
    || { echo "$name: sweep failed"; tail -20 "$OUT/ab-$name.txt"; }
done
csvs=()
for t in "${trees[@]}"; do [ -f "$OUT/ab-${t%%=*}.csv" ] && csvs+=("$OUT/ab-${t%%=*}.csv"); done  # the trees that ran
PYTHONPATH="$PWD/src" python3 -m onlinesoftmax report --ab "${csvs[@]}" | tee "$OUT/ab.txt"  # this checkout's report

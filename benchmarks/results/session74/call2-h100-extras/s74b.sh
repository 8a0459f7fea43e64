#!/usr/bin/env bash
# session 74 call 2: issue 12's layouts on the H200 at the tree of call 1's verdict (onlinesoftmax extras: every
# non-last dim and sliced view of harness/extras.py, every op and dtype, ours (CUDA and Triton) beside torch, each
# output against float64), then the host overhead per eager 1 x 1024 call; the first whole layouts run since bdd899c
set -uo pipefail
OUT=${OUT:-out}
export ONLINESOFTMAX_COMMIT="$(head -1 .commit)"
SECONDS=0
timeout 560 bash benchmarks/device.sh extras --out "$OUT/extras.csv" >/dev/null 2>"$OUT/extras-stderr.txt"
echo "exit $? after $SECONDS s"; grep -c '' "$OUT/extras.txt"; tail -3 "$OUT/extras.txt"

#!/usr/bin/env bash
# The GPU run that decides the pending/issue12-gpu branch (issue 12), on the lent H200 from the repository root of
# a checkout of the branch's tip (the package from src/), one stage a call:
#   bash benchmarks/pending_12.sh fwd | bwd | check | sanitize | triton   results under $OUT (a .tgz a stage)
# Its trees are git-ignored folders carried with the call (carry: [".wt-base", ".wt-A", ".wt-AB", ".wt-ABC"]),
# each the src/ of one commit of the branch (found by subject, so a rebase keeps them), made here first:
#   bash benchmarks/pending_12.sh trees
# fwd: the log-softmax forward, main -> A (one subtraction an output) -> AB (lg2.approx for 16-bit outputs): the
#      public grid's N where it is short, every dtype (benchmarks/ab.sh), and x[:, 1:] rows (sliced_rows.py)
# bwd: the log-softmax backward, AB -> ABC (the alive flag as an unsigned max); then ABC -> the tip (D,
#      plan.REALIGN_WIDE_SLOTS) on fp32 rows of 160001-180000 sliced (P = 2) and with y fresh (P = 3)
# check: the GPU tests of what changed (window path and variants of both log ops, every dtype; D's own test)
#        (main's tests made able to fail run apart, from main: bash benchmarks/device.sh hardened)
# sanitize: compute-sanitizer over sanitize_driver.py --window and --regime flat (the tip)
# triton: tune_triton.py --quick (main's): the rows regime persistent / unpipelined / one tile a program
# Order, within one session's 30 device-minutes (~1800 s with the starts): main's `device.sh hardened` (~540 s,
# from main), then fwd (~400) and check (~540) here; bwd (~300), triton (~300) and sanitize (~560) in the next
# session; merge to main only what wins and passes.
set -uo pipefail
export PYTHONUNBUFFERED=1
stage=${1:?trees, fwd, bwd, check, sanitize or triton}
if [ "$stage" = trees ]; then  # here, not on the device: base = where the branch leaves main, then its commits
  pick() { git log --format=%h -F --grep="$1" main..HEAD | tail -1; }
  for t in base=$(git merge-base main HEAD) A=$(pick 'v keeps x - st, each output one subtraction') \
           AB=$(pick '16-bit log-softmax: log d through lg2.approx (pending a GPU A/B)') \
           ABC=$(pick 'the alive flag as an unsigned max of bits'); do
    [ -n "${t#*=}" ] || { echo "no commit for ${t%%=*}" >&2; exit 1; }
    rm -rf ".wt-${t%%=*}" && mkdir ".wt-${t%%=*}" && git archive "${t#*=}" src | tar x -C ".wt-${t%%=*}"
    echo ".wt-${t%%=*}: $(git log -1 --format='%h %s' "${t#*=}")"
  done
  exit 0
fi
R=$OUT/$stage
mkdir -p "$R"
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem --format=csv
  python3 -c 'import torch, triton, cuda.core, numpy; print("torch", torch.__version__, "cuda", torch.version.cuda, "triton", triton.__version__, "cuda.core", cuda.core.__version__, "numpy", numpy.__version__)'
  echo "tip $(git rev-parse --short HEAD 2>/dev/null)"; } | tee "$R/env.txt"
NS="--n 127 --n 129 --n 1023 --n 1025 --n 4095 --n 4096 --n 4097 --n 12289 --n 32001 --n 131072"
DT="--dtype bfloat16 --dtype float16 --dtype float32"
sliced() {  # sliced_rows.py per tree: NAME SRC ARGS...
  local name=$1 src=$2; shift 2
  (cd benchmarks && ONLINESOFTMAX_CACHE=/tmp/osm-cache-$name PYTHONPATH=../$src timeout 200 python3 sliced_rows.py \
    --out "$R/sliced-$name.csv" "$@" 2>&1 | tee "$R/sliced-$name.txt")
}
case "$stage" in
  fwd)
    OUT=$R timeout 400 bash benchmarks/ab.sh base=.wt-base/src A=.wt-A/src AB=.wt-AB/src -- --op log_softmax $DT $NS
    for t in base AB; do
      sliced $t .wt-$t/src --dtype bfloat16 --dtype float32 --op log_softmax --shape 32768 4096 4097 1 \
        --shape 32768 4097 4099 1 --shape 8192 16384 16385 1
    done
    ;;
  bwd)
    OUT=$R timeout 300 bash benchmarks/ab.sh AB=.wt-AB/src ABC=.wt-ABC/src -- --op log_softmax_backward $DT $NS \
      --n 65537
    long="--shape 840 160001 160002 1 --shape 800 165000 165001 1 --shape 789 170001 170002 1 --shape 744 180000 180001 1"
    for y in sliced fresh; do
      for t in ABC tip; do
        sliced $t-$y $([ $t = tip ] && echo src || echo .wt-$t/src) --y $y --dtype float32 --op log_softmax_backward $long
      done
    done
    ;;
  check)
    P=tests/test_gpu_production.py
    groups=("$P -k 'window_path and float32-log_softmax'" "$P -k 'window_path and bfloat16-log_softmax'"
            "$P -k 'window_path and float16-log_softmax and not bfloat16'"
            "$P -k 'variant_matches and log_softmax and float32'" "$P -k 'variant_matches and log_softmax and bfloat16'"
            "$P -k 'variant_matches and log_softmax and float16 and not bfloat16'"
            "$P -k 'realigning_windows or near_one_hot or layouts or long_rows or fused_cast or automatic_plans'")
    for i in "${!groups[@]}"; do
      while [ "$(jobs -rp | wc -l)" -ge 4 ]; do wait -n; done
      ( echo "# pytest -m gpu ${groups[$i]}"
        eval PYTHONPATH=src ONLINESOFTMAX_CACHE=/tmp/osm-cache timeout 540 python3 -m pytest -m gpu -q -rfEs \
          -p no:cacheprovider "${groups[$i]}" ) >"$R/group-$i.log" 2>&1 &
    done
    wait
    for i in "${!groups[@]}"; do echo "${groups[$i]}: $(grep -E ' in [0-9.]+s' "$R/group-$i.log" | tail -1)"; done \
      | tee "$R/summary.txt"
    grep -h -E '^(FAILED|ERROR)' "$R"/group-*.log | tee -a "$R/summary.txt"
    ;;
  triton)
    (PYTHONPATH=src timeout 400 python3 benchmarks/tune_triton.py --quick 2>&1 | tee "$R/tune-triton.txt")
    ;;
  sanitize)
    OUT=$R/window timeout 280 bash benchmarks/sanitize.sh --window
    OUT=$R/flat timeout 280 bash benchmarks/sanitize.sh --regime flat
    cat "$R"/*/sanitize/summary.txt
    ;;
esac
tar czf "$OUT/$stage.tgz" -C "$OUT" "$stage"

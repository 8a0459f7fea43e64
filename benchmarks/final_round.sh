#!/usr/bin/env bash
# One device call that checks a merged tree (the session's last): the GPU tests of what changed, run side by side
# (correctness only), then the timings one at a time: the cross-entropy anchors and a sample of issue 12's grid.
#   OUT=... bash benchmarks/final_round.sh        results in $OUT/final.tgz (+ env.txt)
# TESTS (default "production attention cross-entropy"; also "launch": concurrency and drop-in) picks the GPU test
# groups (PROD_K: the production tests' -k expression), SWEEP=0 skips issue 12's sample.
set -uo pipefail
OUT=${OUT:-out}
R="$OUT/final"; mkdir -p "$R"
export PYTHONUNBUFFERED=1 ONLINESOFTMAX_CACHE=/tmp/osm-cache
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl
fi
export PYTHONPATH="$PWD/src:/tmp/site"
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
  python3 -c 'import torch, triton, cuda.core; from onlinesoftmax.runtime import nvrtc; print("torch", torch.__version__, "triton", triton.__version__, "cuda.core", cuda.core.__version__, "nvrtc", nvrtc.nvrtc_version())'
  echo "commit ${ONLINESOFTMAX_COMMIT:-unknown}"; } | tee "$OUT/env.txt"
NS="1023 1025 3000 4095 4096 4097 12289 50001 65536 65537 131071 262143 262144"
[ "${SWEEP:-1}" = 0 ] || python3 benchmarks/precompile.py --workers 12 --n $NS 2>&1 | tail -1
t() { python3 -m pytest -m gpu -q -rs -p no:cacheprovider "$@"; }
TESTS=${TESTS:-production attention cross-entropy}
[[ " $TESTS " == *" production "* ]] &&
  ( t tests/test_gpu_production.py -k "${PROD_K:-window or fused or automatic or layouts}" \
      >"$R/pytest-production.log" 2>&1 ) &
[[ " $TESTS " == *" attention "* ]] &&
  ( t tests/test_gpu_attention.py tests/test_gpu_attention_ladder.py >"$R/pytest-attention.log" 2>&1 ) &
[[ " $TESTS " == *" cross-entropy "* ]] && ( t tests/test_gpu_cross_entropy.py >"$R/pytest-cross-entropy.log" 2>&1 ) &
[[ " $TESTS " == *" launch "* ]] &&
  ( t tests/test_gpu_concurrency.py tests/test_gpu_dropin.py >"$R/pytest-launch.log" 2>&1 ) &
wait
for f in "$R"/pytest-*.log; do echo "== $f"; tail -4 "$f"; done
timeout ${CE_TIMEOUT:-150} python3 benchmarks/cross_entropy.py --out "$R/cross-entropy" >"$R/cross-entropy.log" 2>&1
tail -16 "$R/cross-entropy.txt"
[ "${SWEEP:-1}" = 0 ] || for dt in bfloat16 float32; do
  args=(); for n in $NS; do args+=(--n "$n"); done
  timeout ${SWEEP_TIMEOUT:-80} python3 -m onlinesoftmax sweep --backend cuda --dtype $dt --op softmax \
    --op softmax_backward "${args[@]}" --out "$R/sweep-$dt.csv" >"$R/sweep-$dt.txt" 2>&1; tail -1 "$R/sweep-$dt.txt"
done
tar czf "$OUT/final.tgz" -C "$OUT" final && rm -r "$R"

#!/usr/bin/env bash
# Runs on the lent GPU machine from the repository root (the package from the source tree):
#   bash benchmarks/device.sh STAGE [args...]      results under $OUT (default ./out)
# Stages: verify (GPU tests, check, ladder) | tests (every GPU test, parallel processes; ONLY=REGEX some) | hardened (the GPU tests
#         made able to fail without a GPU) | concurrency
#         | release [sweep args] | attention | attention-hbm [B H S D]
#         | sweep [sweep args] | cross-entropy | ce-load | tune-flat [N ...] | grid [sweep args] (issue 12: the public grid, a
#         CSV per dtype, DTYPES) | shapes [sweep args] (the production GPU tests, then grid) | triton (issue 12: the Triton
#         backend's pending checks, PARTS)
#         | groups NAME GROUP... (the GPU tests of each GROUP, "file -k 'expr'", a pytest process each: run_groups)
#         | checks NAME GROUP... (the same beside compute-sanitizer: TOOLS, SANITIZE_ARGS)
#         | layouts-ab (benchmarks/layout_regimes.py a shape at a time, source trees interleaved: TREES, SHAPES)
#         | any CLI command
set -uo pipefail
OUT=${OUT:-out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 ONLINESOFTMAX_CACHE=/tmp/osm-cache
# A kernel cache compiled without a GPU and carried as .osmcache (ONLINESOFTMAX_CACHE=$PWD/.osmcache python
# benchmarks/precompile.py --tests, or without --tests for the sweep's shapes; the same NVRTC version) saves the
# device the compiles; the --tests cache (~60 MB since the flat kernels' lanes) and the tree pass the 64 MiB a call
# carries, so it travels compressed: tar czf .osmcache.tgz .osmcache (~20 MB). At most 8 files come back from $OUT:
# stages that write more pack them (tests.tgz)
if [ -f .osmcache.tgz ]; then mkdir -p /tmp/osm-unpack && tar xzf .osmcache.tgz -C /tmp/osm-unpack; fi
for d in .osmcache /tmp/osm-unpack/.osmcache; do
  if [ -d "$d" ]; then mkdir -p /tmp/osm-cache && cp -rn "$d"/. /tmp/osm-cache/; fi
done
# Wheels carried in .whl/ (Liger-Kernel for the sweep, expecttest for the OpInfo tests; see docs/tuning.md)
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl
fi
export PYTHONPATH="$PWD/src:/tmp/site"
osm() { python3 -m onlinesoftmax "$@"; }

# run_groups NAME GROUP...: each group ("file -k 'expr'") in its own pytest process, at most TEST_JOBS (4) at a
# time, TEST_TIMEOUT (540 s) each; a summary line per group ($OUT/NAME-summary.txt), the logs in $OUT/NAME.tgz
run_groups() {
  local name=$1 i
  shift
  local groups=("$@")
  mkdir -p "$OUT/$name"
  for i in "${!groups[@]}"; do
    while [ "$(jobs -rp | wc -l)" -ge "${TEST_JOBS:-4}" ]; do wait -n; done
    ( echo "# pytest -m gpu ${groups[$i]}"
      eval ONLINESOFTMAX_EVIDENCE="$OUT/$name" timeout "${TEST_TIMEOUT:-540}" python3 -m pytest -m gpu -q -rfEs \
        -p no:cacheprovider "${groups[$i]}" ) >"$OUT/$name/group-$i.log" 2>&1 &
  done
  wait
  # a group that ran no test (a -k expression that matches none, or every test skipped) says so: sessions 74-77's
  # 'automatic_plans and 3000' matched no pytest id and read as a pass
  local line
  for i in "${!groups[@]}"; do
    line=$(grep -E ' in [0-9.]+s' "$OUT/$name/group-$i.log" | tail -1)
    grep -qE '[0-9]+ (passed|failed|error)' <<<"$line" || line="$line  RAN NO TEST"
    echo "${groups[$i]}: $line"
  done | tee "$OUT/$name-summary.txt"
  grep -h -E '^(FAILED|ERROR)' "$OUT/$name"/group-*.log | tee -a "$OUT/$name-summary.txt"
  tar czf "$OUT/$name.tgz" -C "$OUT" "$name" && rm -r "${OUT:?}/$name"
}

{
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm,clocks.mem --format=csv
  python3 -c 'import torch, triton, cuda.core, numpy; print("torch", torch.__version__, "cuda", torch.version.cuda, "triton", triton.__version__, "cuda.core", cuda.core.__version__, "numpy", numpy.__version__)'
  echo "commit ${ONLINESOFTMAX_COMMIT:-unknown}"
} | tee "$OUT/env.txt"

# The public grid (every N at M x N = 2^27, the few-row shapes, 4 ops, torch / torch.compile / Liger in the run), one
# CSV per dtype: ~220-270 s a dtype at bdd899c, so a 600 s call holds two (DTYPES=float16 the next call); then the
# table of every CSV there (onlinesoftmax report --grid)
grid() {
  for dt in ${DTYPES:-float32 bfloat16}; do
    timeout "${SWEEP_TIMEOUT:-290}" python3 -m onlinesoftmax sweep --backend cuda --dtype "$dt" "$@" \
      --out "$OUT/sweep-$dt.csv" >"$OUT/sweep-$dt.txt" 2>&1; tail -2 "$OUT/sweep-$dt.txt"
  done
  osm report --grid "$OUT"/sweep-*.csv | tee "$OUT/grid.md"
}

stage=${1:-verify}; shift || true
case "$stage" in
  verify)
    python3 -m pytest -m gpu -q -rs -p no:cacheprovider tests 2>&1 | tee "$OUT/pytest-gpu.log" | tail -40
    osm check --backend cuda --seed 2026 2>&1 | tee "$OUT/check-cuda.txt" | tail -60
    osm check --backend triton --seed 2026 2>&1 | tee "$OUT/check-triton.txt" | tail -30
    osm ladder --out "$OUT/ladder.csv" 2>&1 | tee "$OUT/ladder.txt"
    ;;
  tests)  # every GPU test in parallel pytest processes, at most TEST_JOBS (4) at a time, the longest groups first
    # (each compiles what its tests load: a cold cache took more than 380 s for test_gpu_production.py alone, one
    # process; the window-path groups took 120-160 s each 4 at a time, h200-gpu-tests-e18d732.txt, and none of them
    # had finished after 240 s with 10 at once)
    P=tests/test_gpu_production.py
    groups=()
    for dt in float32 bfloat16 float16; do
      for op in softmax log_softmax; do groups+=("$P -k 'window_path and [$dt-$op]'"); done
    done
    groups+=("$P -k 'variant_matches and float32'" "$P -k 'variant_matches and not float32'"
             "$P -k 'not variant_matches and not window_path'" tests/test_gpu_cross_entropy.py
             tests/test_gpu_concurrency.py tests/test_gpu_cuda.py
             tests/test_gpu_dropin.py "tests/test_gpu_attention.py tests/test_gpu_attention_ladder.py")
    # test_gpu_triton.py, a Triton compile a kernel: in 10 groups, test_variant by op (one process took 290 s for
    # 60 of its tests, h200-session57/triton/pytest-gpu-triton.log), the others in six (on the H200 the windows'
    # 42 tests passed 31 in 280 s, the regime picks and ready launches 22 of 27: h200-session61/call1-1481bcb)
    T=tests/test_gpu_triton.py
    groups+=("$T -k 'test_variant and log_softmax_backward'"
             "$T -k 'test_variant and softmax_backward and not log_softmax'"
             "$T -k 'test_variant and log_softmax and not backward'"
             "$T -k 'test_variant and not log_softmax and not backward'" "$T -k 'test_window_rows or rule_windows'"
             "$T -k 'window_padded'" "$T -k 'chunk_windows'" "$T -k 'auto_regime or (ready_launch and fp32)'"
             "$T -k 'ready_launch and bf16'"
             "$T -k 'not test_variant and not window and not auto_regime and not ready_launch'")
    if [ -n "${ONLY:-}" ]; then  # ONLY=REGEX: the groups whose selector matches (grep -E), e.g. '-softmax]|triton'
      mapfile -t groups < <(printf '%s\n' "${groups[@]}" | grep -E -- "$ONLY")
      [ ${#groups[@]} -gt 0 ] || { echo "ONLY=$ONLY matches no group" >&2; exit 2; }
    fi
    run_groups tests "${groups[@]}"
    ;;
  hardened)  # the GPU tests made able to fail without a GPU (7b818b0, c5fa360: error_scale along dim, regimes
    # asserted, float64 references, poisoned outputs); first run at 38dbd4c (results/h200-hardened-38dbd4c: all
    # passed but a test defect, fixed in 99563b8); the window-path groups longest: first
    P=tests/test_gpu_production.py
    groups=("$P -k 'window_path and [float32-'" "$P -k 'window_path and [bfloat16-'" "$P -k 'window_path and [float16-'"
            "$P -k 'layouts or automatic_plans or torch_compile or side_stream or beyond_2_31 or fused_cast'"
            "tests/test_gpu_attention.py tests/test_gpu_attention_ladder.py" tests/test_gpu_dropin.py
            "tests/test_gpu_cross_entropy.py -k 'cuda_row_kernel or split_forced'"
            "tests/test_gpu_triton.py -k 'auto_regime or current_stream'"
            "tests/test_gpu_concurrency.py -k 'reduce_overhead or new_row_counts'"
            "tests/test_gpu_cuda.py -k 'sum_of_2_24 or current_stream'")
    run_groups hardened "${groups[@]}"
    ;;
  concurrency)  # issue 10: the concurrency tests with their counts, then the host cost of new row counts
    ONLINESOFTMAX_EVIDENCE="$OUT" python3 -m pytest -q -rs -p no:cacheprovider tests/test_gpu_concurrency.py 2>&1 \
      | tee "$OUT/pytest-gpu-concurrency.log" | tail -20
    python3 benchmarks/new_shapes.py --out "$OUT/new-shapes.json" 2>&1 | tail -40
    ;;
  release)  # everything that backs a release, on two GPUs: every GPU test on both (GPU 1 only for the two-device
    # test); meanwhile on GPU 1: the sanitizer, a sample of the sweep (ours only) and new_shapes. Logs in one archive.
    ( export CUDA_VISIBLE_DEVICES=1
      OUT="$OUT" bash benchmarks/sanitize.sh >"$OUT/sanitize-run.log" 2>&1
      timeout 330 python3 -m onlinesoftmax sweep --ours-only "$@" --out "$OUT/sweep-sample.csv" >"$OUT/sweep-sample.txt" 2>&1
      timeout 80 python3 benchmarks/new_shapes.py --out "$OUT/new-shapes.json" >"$OUT/new-shapes.txt" 2>&1 ) &
    ONLINESOFTMAX_EVIDENCE="$OUT" python3 -m pytest -m gpu -q -rs -p no:cacheprovider tests 2>&1 \
      | tee "$OUT/pytest-gpu.log" | tail -20
    wait
    cat "$OUT/sanitize/summary.txt"; tail -4 "$OUT/sweep-sample.txt"
    tar czf "$OUT/logs.tgz" -C "$OUT" sanitize sanitize-run.log new-shapes.txt $(cd "$OUT" && ls *.png 2>/dev/null) \
      && rm -r "$OUT/sanitize" "$OUT/sanitize-run.log" "$OUT/new-shapes.txt" "$OUT"/*.png
    ;;
  attention)  # issue 16: the attention rungs' GPU tests (on GPU 1 where there are two, meanwhile) and the attention
    # ladder on GPU 0, S = 4096 first
    tests=1; [ "$(nvidia-smi -L | wc -l)" -ge 2 ] || tests=0
    ( CUDA_VISIBLE_DEVICES=$tests python3 -m pytest -m gpu -q -rs -p no:cacheprovider tests/test_gpu_attention_ladder.py \
        >"$OUT/pytest-gpu-attention-ladder.log" 2>&1 ) &
    [ $tests = 1 ] || wait
    for s in 4096 1024; do
      CUDA_VISIBLE_DEVICES=0 osm attention-ladder --s $s --out "$OUT/attention-ladder-s$s.csv" "$@" 2>&1 \
        | tee "$OUT/attention-ladder-s$s.txt" | grep -v '^timing'
    done
    wait
    tail -25 "$OUT/pytest-gpu-attention-ladder.log"
    ;;
  attention-hbm)  # issue 16: HBM bytes of each attention rung and SDPA flash (ncu) beside the models; B H S D
    shape=${*:-1 16 4096 128}
    ncu --clock-control none --print-units base --csv -k 'regex:attn_|online_v4|flash' \
        --metrics dram__bytes_read.sum,dram__bytes_write.sum,lts__t_sectors_srcunit_tex_op_read.sum \
        python3 benchmarks/attention_hbm.py run $shape >"$OUT/attention-ncu.csv" 2>&1
    python3 benchmarks/attention_hbm.py summarize "$OUT/attention-ncu.csv" $shape | tee "$OUT/attention-hbm.md"
    ;;
  cross-entropy)  # issue 15: the cross-entropy GPU tests, the host's cost of a step, then every row (--quick);
    # carry the kernels of `benchmarks/precompile.py --cross-entropy`
    python3 -m pytest -m gpu -q -rs -p no:cacheprovider tests/test_gpu_cross_entropy.py 2>&1 \
      | tee "$OUT/pytest-gpu-cross-entropy.log" | tail -3
    python3 benchmarks/cross_entropy.py --host 8192x32000:bfloat16 2>&1 | tee "$OUT/cross-entropy-host.txt" | tail -14
    python3 benchmarks/cross_entropy.py --quick --out "$OUT/cross-entropy" 2>&1 | grep -v Backend | tail -16
    ;;
  ce-load)  # the cross-entropy GPU tests where ce_row's read of its scale raced ce_targets (8a1e292), in ${PROCS:-4}
    # processes at once: alone they passed with the race in the kernel, under this load they failed 1-2 a process
    for i in $(seq 1 "${PROCS:-4}"); do
      ( timeout "${TEST_TIMEOUT:-300}" python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_gpu_cross_entropy.py \
          -k "${CE_K:-50257 or loss_only or threads}" >"$OUT/ce-load-$i.log" 2>&1 ) &
    done
    wait
    for i in $(seq 1 "${PROCS:-4}"); do tail -1 "$OUT/ce-load-$i.log"; grep -h '^FAILED' "$OUT/ce-load-$i.log"; done \
      | tee "$OUT/ce-load-summary.txt"
    ;;
  tune-flat)  # issue 12: the flat regime against torch and the other plans (tune_rows --flat), every op and dtype
    for dt in bfloat16 float32 float16; do for op in softmax log_softmax softmax_backward log_softmax_backward; do
      python3 benchmarks/tune_rows.py --flat --dtype $dt --op $op --n ${*:-63 127 129 199 255 1023 1025} 2>&1 | grep -v Warning
    done; done | tee "$OUT/tune-flat.txt"
    ;;
  triton)  # issue 12, what the Triton backend's changes since session 53 wait for, in PARTS (default all four):
    # tests: its GPU tests of the 16-byte windows (rules.ROWS_WINDOW_MIN_N forced to every N), the ready launch
    # (threads too), the regimes; host: the host's time of a call, piece by piece (host_softmax.py); ab: the window's
    # A/B (the rule's ROWS_WINDOW_MIN_N against none and every N) at odd N, N = 1000 and powers of two; few: the
    # few-row shapes beside torch, torch.compile and Liger (if carried).
    # tune (not in the default PARTS): tune_triton.py's rows settings, windows on and off, at TUNE_N (127: the scalar
    # rows' one-warp tile, rows_scalar_tile; 8193: the windows' threshold), TUNE_ONLY=REGEX those settings alone,
    # TUNE_DTYPES its dtypes (fp32 bf16), TUNE_OPS its ops; tune-few (nor this): tune_triton.py --few, every regime
    # at TUNE_FEW's few-row shapes beside torch (default: where SPLIT_TASKS_PER_PROGRAM = 2, session 65, moved the
    # forward's chunk).
    # All four may pass a device call's 10 minutes: PARTS='tests host', then PARTS='ab few', in two calls
    for part in ${PARTS:-tests host ab few}; do case $part in
      tests) python3 -m pytest -m gpu -q -rfEs -p no:cacheprovider tests/test_gpu_triton.py tests/test_gpu_concurrency.py \
               -k 'window or ready or auto_regime or current_stream or split_is or triton_threads' \
               >"$OUT/pytest-gpu-triton.log" 2>&1
             tail -5 "$OUT/pytest-gpu-triton.log" ;;
      host) for s in "7 32768" "32 131072" "1 1024"; do set -- $s
              python3 benchmarks/host_softmax.py --backend triton --m "$1" --n "$2" 2>&1 | grep -v Warn
            done | tee "$OUT/host-triton.txt" ;;
      ab) trees=()  # the rule (src) against trees with rules.py's knobs set otherwise (AB_TREES)
          knob() {  # knob FILE NAME VALUE: one of rules.py's knobs set on a copy
            sed -i "s/^$2 = [^#]*#/$2 = $3  #/" "$1" && grep -q "^$2 = $3  #" "$1" \
              || { echo "the knob $2 was not found in $1" >&2; exit 2; }; }
          # AB_TREES: NAME:KNOB=VALUE,KNOB=VALUE ... (default: the windows off, and on for every N and size), or
          # NAME@DIR: the source tree DIR as it is (an earlier commit's src, carried: .ab/NAME/src)
          for spec in ${AB_TREES:-off:ROWS_WINDOW_MIN_N=None every:ROWS_WINDOW_MIN_N=1,ROWS_WINDOW_TAIL_MIN_BYTES=0}; do
            if [[ $spec == *@* ]]; then trees+=("${spec%%@*}=${spec#*@}"); continue; fi
            t=${spec%%:*} d=/tmp/ab-${spec%%:*} f=/tmp/ab-${spec%%:*}/src/onlinesoftmax/engines/triton/softmax_rules.py
            rm -rf "$d" && mkdir -p "$d" && cp -r src "$d/"
            IFS=, read -ra kvs <<<"${spec#*:}"
            for kv in "${kvs[@]}"; do knob "$f" "${kv%%=*}" "${kv#*=}"; done
            trees+=("$t=$d/src"); done
          ns=(); for n in ${AB_N:-127 129 1000 1023 1025 3000 4095 4097 8193 12289 32001 128 4096}; do ns+=(--n "$n"); done
          BACKEND=triton bash benchmarks/ab.sh rule=src "${trees[@]}" -- --dtype float32 --dtype bfloat16 "${ns[@]}" \
            | tail -125
          # three trees' csv, txt and png would pass the 8 files a device call returns: one archive beside ab.txt
          (cd "$OUT" && tar czf ab-trees.tgz ab-*.csv ab-*.txt && rm -f ab-*.csv ab-*.txt ab-*.png) ;;
      tune) python3 benchmarks/tune_triton.py --n ${TUNE_N:-127 8193} ${TUNE_ONLY:+--only "$TUNE_ONLY"} \
              ${TUNE_DTYPES:+--dtypes $TUNE_DTYPES} ${TUNE_OPS:+--ops $TUNE_OPS} 2>&1 \
              | grep -v Warn | tee "$OUT/tune-odd-n.txt" | tail -12 ;;
      tune-few) few=${TUNE_FEW:-16x131072 32x131072 7x262144 16x262144 2x1000003}
                python3 benchmarks/tune_triton.py --few $few 2>&1 \
                  | grep -v Warn | tee "$OUT/tune-few.txt" | tail -34 ;;
      few) osm sweep --backend triton --dtype float32 --dtype bfloat16 --n 7x32768 --n 32x131072 --n 1x262144 \
             --out "$OUT/sweep-triton-few.csv" >"$OUT/sweep-triton-few.txt" 2>&1; tail -3 "$OUT/sweep-triton-few.txt"
           rm -f "$OUT/sweep-triton-few.png" ;;
      *) echo "unknown part $part (tests host ab few tune tune-few)" >&2; exit 2 ;;
    esac; done
    ;;
  groups)  # groups NAME GROUP...: the pytest groups given, as the tests stage runs its own
    name=$1; shift
    run_groups "$name" "$@"
    ;;
  checks)  # checks NAME GROUP...: those groups beside benchmarks/sanitize.sh (TOOLS, default memcheck racecheck
    # synccheck; SANITIZE_ARGS, e.g. "--regime period"; SANITIZE_TIMEOUT, 200 s) on the same GPU; the sanitizer's
    # summary kept as $OUT/sanitize-summary.txt, its logs dropped (sessions 78-82 wrote this in each run script).
    # GROUP "period": the period kernel's checks (its tests, the layouts and CUDA graphs, the concurrency storm),
    # as sessions 83-84 ran them
    name=$1; shift
    if [ "$*" = period ]; then
      set -- "tests/test_gpu_production.py -k 'period and not cuda_graph'" \
        "tests/test_gpu_production.py -k 'forward_backward_layouts or cuda_graph'" "tests/test_gpu_concurrency.py"
    fi
    ( OUT="$OUT" TOOLS="${TOOLS:-memcheck racecheck synccheck}" timeout "${SANITIZE_TIMEOUT:-200}" \
        bash benchmarks/sanitize.sh ${SANITIZE_ARGS:-} >"$OUT/sanitize.txt" 2>&1 ) &
    run_groups "$name" "$@"
    wait
    cp "$OUT/sanitize/summary.txt" "$OUT/sanitize-summary.txt" 2>/dev/null \
      || echo "no sanitizer summary" >"$OUT/sanitize-summary.txt"
    rm -rf "${OUT:?}/sanitize" "$OUT/sanitize.txt"
    ;;
  layouts-ab)  # the A/B of a layouts kernel (bands, strided, columns, chan) change, alone on the GPU: for each of SHAPES
    # (';' between layout_regimes.py's shape args, e.g. "8192 8192 --dim 0;8 1000 64 64 --dim 1") each of TREES
    # ("NAME=SRC_DIR[=REGIME,REGIME]": the regimes forced beside the plan in that tree, default REGIMES or bands) in turn,
    # DTYPES (float32 bfloat16); $OUT/$AB_NAME.txt (AB_NAME: layouts-ab)
    IFS=';' read -ra shapes <<<"${SHAPES:?SHAPES: layout_regimes.py shape args, ';' between shapes}"
    for shape in "${shapes[@]}"; do
      for t in ${TREES:-new=$PWD/src}; do
        IFS='=' read -r name dir regimes <<<"$t"; regimes=${regimes:-${REGIMES:-bands}}
        echo "## $name: $shape ($SECONDS s)"
        PYTHONPATH="$dir:/tmp/site" timeout "${SHAPE_TIMEOUT:-100}" python3 benchmarks/layout_regimes.py \
          --regimes ${regimes//,/ } --dtype ${DTYPES:-float32 bfloat16} --shape $shape 2>&1 | grep -v Warning
      done
    done | tee "$OUT/${AB_NAME:-layouts-ab}.txt"
    ;;
  sweep)
    osm sweep --out "$OUT/sweep.csv" "$@" 2>&1 | tee "$OUT/sweep.txt"
    ;;
  shapes)  # issue 12: the production GPU tests, then the public grid (below)
    python3 -m pytest -m gpu -q -rs -p no:cacheprovider tests/test_gpu_production.py 2>&1 \
      | tee "$OUT/pytest-gpu-production.log" | tail -8
    grid "$@"
    ;;
  grid)  # issue 12's public grid in one committed sweep (below)
    grid "$@"
    ;;
  *)
    osm "$stage" "$@" 2>&1 | tee "$OUT/$stage.txt"
    ;;
esac

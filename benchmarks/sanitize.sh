#!/usr/bin/env bash
# compute-sanitizer memcheck, racecheck, synccheck and initcheck over benchmarks/sanitize_driver.py: every regime of
# the CUDA backend, forward and backward, vector and scalar paths, odd shapes and the layouts ops.py passes on, each
# output checked against float64. Runs on the lent GPU from the repository root (the package from src/):
#   bash benchmarks/sanitize.sh [driver args, e.g. --dtype float32]      results under $OUT/sanitize (default ./out)
# Writes $OUT/sanitize/<tool>.log and $OUT/sanitize/summary.txt (errors per tool, the driver's verdict, seconds);
# exits 0 only when every tool reports 0 errors and the driver found every result right. TOOLS: some of the four
# (e.g. TOOLS='memcheck racecheck').
# --report-api-errors no: cuda-bindings probes driver entry points, which the sanitizer reports as API errors.
# A warm-up run without a sanitizer compiles every instantiation in parallel (NVRTC disk cache) and checks once.
set -uo pipefail
OUT=${OUT:-out}
DIR="$OUT/sanitize"
mkdir -p "$DIR"
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
export ONLINESOFTMAX_CACHE=${ONLINESOFTMAX_CACHE:-/tmp/osm-cache}
PY=${PYTHON:-python3}
SANITIZER=${SANITIZER:-$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)}
summary="$DIR/summary.txt"
{
  echo "commit ${ONLINESOFTMAX_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}, driver args: $*"
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  "$SANITIZER" --version | tail -1
} >"$summary" 2>&1
start=$SECONDS
"$PY" benchmarks/sanitize_driver.py --precompile "$@" >"$DIR/warmup.log" 2>&1
rc=$?
echo "warm-up without a sanitizer: $(tail -1 "$DIR/warmup.log") (exit $rc, $((SECONDS - start)) s)" >>"$summary"
bad=$rc
for tool in ${TOOLS:-memcheck racecheck synccheck initcheck}; do
  start=$SECONDS
  "$SANITIZER" --tool "$tool" --report-api-errors no "$PY" benchmarks/sanitize_driver.py "$@" >"$DIR/$tool.log" 2>&1
  rc=$?
  # memcheck, synccheck, initcheck: "ERROR SUMMARY: N errors"; racecheck: "RACECHECK SUMMARY: ... (N errors, ...)"
  errors=$(grep -oE 'ERROR SUMMARY: [0-9]+|RACECHECK SUMMARY: .*\([0-9]+ errors' "$DIR/$tool.log" | tail -1 \
    | grep -oE '[0-9]+( errors)?$' | grep -oE '^[0-9]+')
  verdict=$(grep -E '^driver: ' "$DIR/$tool.log" | tail -1)
  printf '%-9s %s errors   (%s; exit %d; %d s)\n' "$tool" "${errors:-no summary:}" "${verdict:-driver did not finish}" \
    "$rc" $((SECONDS - start)) >>"$summary"
  if [ "${errors:-1}" != 0 ] || [ "$rc" != 0 ]; then bad=1; fi
done
cat "$summary"
exit $((bad != 0))

#!/usr/bin/env bash
# Runs on the lent GPU machine from the repository root (the package from the source tree):
#   bash benchmarks/device.sh STAGE [args...]      results under $OUT (default ./out)
# Stages: verify (GPU tests, check, ladder) | concurrency | sweep [sweep args] | any other CLI command (extras, ...)
set -uo pipefail
OUT=${OUT:-out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 ONLINESOFTMAX_CACHE=/tmp/osm-cache
# Liger-Kernel, carried as a wheel in .whl/ (see README: device runs)
if ls .whl/liger_kernel-*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl
fi
export PYTHONPATH="$PWD/src:/tmp/site"
osm() { python3 -m onlinesoftmax "$@"; }

{
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm,clocks.mem --format=csv
  python3 -c 'import torch, triton, cuda.core, numpy; print("torch", torch.__version__, "cuda", torch.version.cuda, "triton", triton.__version__, "cuda.core", cuda.core.__version__, "numpy", numpy.__version__)'
  echo "commit ${ONLINESOFTMAX_COMMIT:-unknown}"
} | tee "$OUT/env.txt"

stage=${1:-verify}; shift || true
case "$stage" in
  verify)
    python3 -m pytest -m gpu -q -rs -p no:cacheprovider tests 2>&1 | tee "$OUT/pytest-gpu.log" | tail -40
    osm check --backend cuda --seed 2026 2>&1 | tee "$OUT/check-cuda.txt" | tail -60
    osm check --backend triton --seed 2026 2>&1 | tee "$OUT/check-triton.txt" | tail -30
    osm ladder --out "$OUT/ladder.csv" 2>&1 | tee "$OUT/ladder.txt"
    ;;
  concurrency)  # issue 10: the concurrency tests with their counts, then the host cost of new row counts
    ONLINESOFTMAX_EVIDENCE="$OUT" python3 -m pytest -q -rs -p no:cacheprovider tests/test_gpu_concurrency.py 2>&1 \
      | tee "$OUT/pytest-gpu-concurrency.log" | tail -20
    python3 benchmarks/new_shapes.py --out "$OUT/new-shapes.json" 2>&1 | tail -40
    ;;
  sweep)
    osm sweep --out "$OUT/sweep.csv" "$@" 2>&1 | tee "$OUT/sweep.txt"
    ;;
  *)
    osm "$stage" "$@" 2>&1 | tee "$OUT/$stage.txt"
    ;;
esac

#!/usr/bin/env bash
# Session 85's call 2: issue 12's public grid on an H200 (none since session 65) in fp32 and bf16, at HEAD (88657c3).
set -uo pipefail
OUT=${OUT:-out}
export ONLINESOFTMAX_COMMIT="$(head -1 .commit)"
SECONDS=0
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  python3 -c "import torch, triton, cuda.core as c; print('torch', torch.__version__, 'triton', triton.__version__, 'cuda.core', c.__version__)"
} > "$OUT/env.txt" 2>&1
cat "$OUT/env.txt"
DTYPES="float32 bfloat16" SWEEP_TIMEOUT=280 bash benchmarks/device.sh grid >/dev/null
echo "grid $SECONDS s"; tail -2 "$OUT"/sweep-*.txt; cut -c1-200 "$OUT/grid.md"

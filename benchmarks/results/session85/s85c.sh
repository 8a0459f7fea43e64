#!/usr/bin/env bash
# Session 85's call 4, not run (too little device time was left to start a machine): the shared-memory limit's
# fallback (next-smem-limit-fallback.diff: LoadedKernel.smem_max from the driver, ShapedKernel.refused, every
# automatic plan's kernels checked in run._fitted_plan) on a GPU. Before it: git apply
# benchmarks/results/session85/next-smem-limit-fallback.diff; the --tests cache as in session 84's README (the .cu is
# unchanged, so the kernels are the same); carry .osmcache.tgz and this script (copied to the root).
# The first group checks the driver's limit against torch's shared_memory_per_block_optin less ptxas' static shared
# memory (a wrong limit would send every plan with shared memory to its fallback, silently slower) and the fallback
# with the limit lowered to 160 KB; the others are the plans the change now loads at planning time.
set -uo pipefail
OUT=${OUT:-out}
TEST_TIMEOUT=300 bash benchmarks/device.sh groups smem "tests/test_gpu_production.py -k past_the_devices" \
  "tests/test_gpu_production.py -k 'period or layouts or cuda_graph or few_row'" "tests/test_gpu_concurrency.py" \
  >/dev/null
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; cat "$OUT"/smem-summary.txt 2>/dev/null

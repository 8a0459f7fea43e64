"""The Triton engine: rules.py (regime, block sizes, warps, stages, grid; pure Python, no triton
import, so the registry asks it on machines without Triton) and softmax.py (the kernels and their
launchers). Import softmax only after TRITON_INTERPRET is set (if it is to be set): `triton.jit`
decides at decoration time whether a kernel is interpreted."""

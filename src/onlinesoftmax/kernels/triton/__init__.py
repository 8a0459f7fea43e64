"""The Triton engine, in three modules that import downwards:

    softmax.py      the launchers: softmax_forward / softmax_backward, the plan of a launch
    softmax_jit.py  the kernels, one per regime, forward and backward written once
    rules.py        regime, block sizes, warps, stages, grid; pure Python (no triton import),
                    so the registry asks it on machines without Triton

Import softmax or softmax_jit only after TRITON_INTERPRET is set (if it is to be set): `triton.jit`
decides at decoration time whether a kernel is interpreted."""

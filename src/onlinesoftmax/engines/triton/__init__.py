"""The Triton engine, in modules that import downwards:

    variants.py         the regimes as registry variants (imports no triton)
    softmax.py          the launchers: softmax_forward / softmax_backward, the plan of a launch
    softmax_kernels.py  the kernels, one per regime, forward and backward written once
    softmax_rules.py    regime, block sizes, warps, stages, grid; pure Python (no triton import),
                        so the registry asks it on machines without Triton

Import softmax or softmax_kernels only after TRITON_INTERPRET is set (if it is to be set): `triton.jit`
decides at decoration time whether a kernel is interpreted."""

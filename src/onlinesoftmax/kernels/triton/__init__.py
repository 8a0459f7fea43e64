"""Triton kernels. Import `onlinesoftmax.kernels.triton.softmax` only after TRITON_INTERPRET is set
(if it is to be set): `triton.jit` decides at decoration time whether a kernel is interpreted."""

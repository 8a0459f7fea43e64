"""The plans the automatic rules give a few shapes on a device of 132 SMs (an H100 or H200): (shape, dim, dtype,
forward regime, backward regime). tests/test_gpu_production.py runs them on the GPU and checks their values against
float64; tests/test_production_compile.py plans them on the CPU through run's own path, the device's queries
stubbed, so that a rule change which moves one fails in CI before a GPU runs it."""

import torch

from onlinesoftmax.harness.runs import dtype_name


def case_id(value) -> str | None:
    """Test ids that name the case, so that -k can pick one: (4, 3000, 16) as 4x3000x16, torch.float32 as float32
    (pytest's own ids number the tuples and dtypes: shape0-1-dtype0)."""
    if isinstance(value, tuple):
        return "x".join(map(str, value))
    if isinstance(value, torch.dtype):
        return dtype_name(value)
    return None


AUTOMATIC_PLANS = [
    ((4096, 128), 1, torch.bfloat16, "warp", "warp"),
    ((40001, 63), 1, torch.bfloat16, "flat", "flat"),  # odd rows, contiguous: staged in shared memory, both ways;
    ((20001, 63), 1, torch.float32, "flat", "flat"),  # the tensors end inside a 16-byte access
    ((2048, 4096), 1, torch.float32, "block", "block"),
    ((256, 32768), 1, torch.bfloat16, "block", "cluster"),
    ((256, 65536), 1, torch.float16, "block", "cluster"),  # 16-bit forward: 64K elements in one CTA (registers + smem)
    ((256, 131072), 1, torch.float16, "cluster", "cluster"),
    ((64, 262144), 1, torch.float32, "cluster", "cluster"),
    ((300, 80000), 1, torch.bfloat16, "cluster", "cluster"),  # odd share: the last CTA of each cluster partly filled
    ((3, 262144), 1, torch.bfloat16, "cluster", "cluster"),  # few rows: clusters of 16
    ((1, 262144), 1, torch.bfloat16, "split", "split"),  # 1-2 rows: full clusters of 16 would leave the SMs idle
    ((2, 262143), 1, torch.float16, "split", "split"),  # and through the window
    ((32, 131072), 1, torch.float32, "cluster", "cluster"),  # few rows: clusters of 8 in registers
    ((3, 100001), 1, torch.float16, "cluster", "cluster"),  # few rows, odd N: the window path
    ((1, 1 << 20), 1, torch.float32, "split", "split"),
    ((40, 1 << 20), 1, torch.float32, "group", "group"),  # rows enough for groups to fill the chip (GROUP_AUTOMATIC)
    ((2048, 2048), 0, torch.float32, "strided", "bands"),  # columns would hold it in registers: strided is faster;
    # backward: 64 strips of 4 bands (the strided kernel would leave half the SMs idle)
    ((4096, 2048), 0, torch.float32, "columns", "bands"),  # the band needs shared memory: columns; backward: 67 MB
    # of strided strips in flight, more than the L2 budget
    ((8192, 8192), 0, torch.float32, "columns", "bands"),  # the brief's dim-0 case: clusters of 8 per strip; 18 bands
    ((16384, 4096), 0, torch.float32, "strided", "bands"),  # 35 bands of 480 rows a strip (backward)
    ((8192, 8192), 0, torch.bfloat16, "strided", "bands"),  # 16-bit strips overflowing the L2 four times
    ((3, 70000, 40), 1, torch.bfloat16, "bands", "bands"),  # columns beyond a cluster of 8, and the strided kernel
    # would run 3 CTAs: 3 strips of 58 bands (backward 116)
    ((4, 3000, 16), 1, torch.float32, "strided", "strided"),  # one strip of 3 bands (backward), but a strided strip
    # of 94 KB: the bands' memset, exchange and second launch lose there (plan.BANDS_FEW_STRIPS_BYTES)
    ((4097, 1001), 0, torch.float32, "period", "period"),  # an odd width: the slab read as 16-byte vectors
    ((2049, 3001), 0, torch.bfloat16, "period", "period"),  # (a period of 8 rows: 3001 vectors, 6 chunks)
    ((16, 300, 45, 45), 1, torch.float32, "strided", "strided"),  # odd inner, 16 slabs: the strided kernel
    ((8, 1000, 16, 16), 1, torch.bfloat16, "strided", "strided"),  # C = 1000: columns would hold it in registers;
    # backward: 32 strips of 2 bands, where bands lose
    ((16, 19, 64, 128), 1, torch.bfloat16, "chan", "chan"),  # channels: whole columns in registers, both ways
    ((4, 21, 4097), 1, torch.float16, "chan", "chan"),  # odd inner: one element an access
    ((2, 150, 64, 64), 1, torch.bfloat16, "chan", "chan"),  # C = 150: 8 threads a column
]

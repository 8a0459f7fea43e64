"""What `check`, `bench` and `ladder` run: shapes chosen here, variants taken from the registry.

No variant list is written down: a suite names an op, a backend and shapes, and every registered
variant that matches (and can run the shape) is measured.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..errors import OnlineSoftmaxError
from ..registry import Variant, variants

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16,
          "fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}

# check: N = 1, odd N, N below and above a block of 256 threads, tails off the float4 width,
# M = 1, and rows long enough for several chunks. Small enough for the CPU ladder's loops.
CHECK_SHAPES = [(1, 1), (3, 1), (5, 7), (4, 33), (3, 256), (2, 1000), (3, 1027), (1, 4099), (2, 8192)]
# GPU variants also get longer rows and more rows than a block/grid covers.
GPU_CHECK_SHAPES = [(33, 12345), (2, 65539), (300, 128), (1, 262144)]
SUM_CHECK_SHAPES = [(1, 1), (1, 7), (1, 1000), (1, 4099), (1, (1 << 20) + 3)]


def check_shapes(variant: Variant) -> list[tuple[int, int]]:
    if variant.op == "sum":
        return SUM_CHECK_SHAPES
    return CHECK_SHAPES + (GPU_CHECK_SHAPES if variant.device == "cuda" else [])


@dataclass(frozen=True)
class Group:
    """One table: an op at one shape and dtype, every matching variant in registry order.

    A ladder group takes every variant of its backends. A sweep group takes the public ops
    (`api.*`), the baselines, and the seeds' best rung that runs the shape: the one that moves
    the fewest bytes; on a tie the one without a stack frame, then the later rung."""

    title: str
    op: str
    M: int
    N: int
    backends: tuple[str, ...]
    dtype: torch.dtype = torch.float32
    sweep: bool = False
    compare: bool = True  # sweep: also the baselines and the seeds' best rung

    def members(self) -> list[Variant]:
        if not self.sweep:  # the rungs themselves, not the public ops that dispatch to them
            return [v for b in self.backends for v in variants(op=self.op, backend=b)
                    if not v.name.startswith("api.")]
        ours = self.backends or ("cuda", "triton")
        chosen = [v for v in variants(op=self.op)
                  if (v.baseline and self.compare) or (v.name.startswith("api.") and v.backend in ours)]
        ladder = [] if "cuda" not in ours or not self.compare else [v for v in variants(op=self.op, backend="cuda")
                  if v.seed_ref.startswith("seed") and not v.refuses(self.M, self.N, self.dtype)]
        if ladder:
            size = torch.empty((), dtype=self.dtype).element_size()

            def cost(item):  # fewest bytes, then no local memory (not V3's runtime-index twin), then later
                i, v = item
                stack = ((v.resources(self.M, self.N, self.dtype) or {}) if v.resources else {}).get("stack", 0)
                return (v.algo_bytes(self.M, self.N, size), stack, -i)

            chosen.append(min(enumerate(ladder), key=cost)[1])
        return chosen


# The CPU ladder, the main job on a machine without a GPU (under a minute on 2 cores).
CPU_BENCH = [
    Group("CPU ladder, 1024 x 4096 fp32", "softmax", 1024, 4096, ("numpy",)),
    Group("CPU ladder at seed 003's shape, 256 x 65536 fp32", "softmax", 256, 65536, ("numpy",)),
    Group("CPU tree sum, 2^24 floats", "sum", 1, 1 << 24, ("numpy",)),
]

# The seeds' shapes on the GPU. The CPU baseline joins seed 003's table, as it does in the seed.
GPU_LADDER = [
    Group("reduction, 32M floats (seed 001 exp 1)", "sum", 1, 32 << 20, ("cuda",)),
    Group("softmax 4096 x 4096 (seeds 000, 002)", "softmax", 4096, 4096, ("cuda",)),
    Group("softmax 8192 x 4096 (seed 001 exp 2, 3)", "softmax", 8192, 4096, ("cuda",)),
    Group("softmax 256 x 65536 (seed 003)", "softmax", 256, 65536, ("numpy", "cuda")),
]


def parse_shape(text: str) -> tuple[int, int]:
    """'MxN' -> (M, N), with clear errors for anything else."""
    parts = text.lower().replace("×", "x").split("x")
    if len(parts) != 2:
        raise OnlineSoftmaxError(
            f"shape {text!r}: expected MxN (rows x row length), a 2-D problem; got {len(parts)} dims")
    try:
        M, N = (int(p) for p in parts)
    except ValueError:
        raise OnlineSoftmaxError(f"shape {text!r}: M and N must be integers") from None
    if M < 1 or N < 1:
        raise OnlineSoftmaxError(f"shape {text!r}: empty problem; M and N must be >= 1")
    return M, N


def parse_dtype(text: str) -> torch.dtype:
    try:
        return DTYPES[text.lower()]
    except KeyError:
        raise OnlineSoftmaxError(
            f"dtype {text!r} not supported; use one of: float32, float16, bfloat16") from None


# The sweep (issue 12's public grid): every op and dtype; N = 128 ... 262144 and the odd and non-power-of-two N
# users run (vocabularies, hidden and head sizes, tails off the vector width), M * N = 2^27; plus few-row shapes.
SWEEP_OPS = ("softmax", "log_softmax", "softmax_backward", "log_softmax_backward")
SWEEP_DTYPES = ("float32", "bfloat16", "float16")
SWEEP_ELEMENTS = 1 << 27
POW2_N = [1 << k for k in range(7, 19)]
ODD_N = [127, 129, 1000, 1023, 1025, 3000, 4095, 4097, 12289, 32001, 50001, 65537, 100003, 131071, 200003, 262143]
SWEEP_N = sorted(POW2_N + ODD_N)
# the few-row grid, and 32 x 131072 (its 4x-torch target, with 1 x 262144)
FEW_ROWS = [(M, N) for N in (32768, 131072, 262144, 1000003) for M in (1, 2, 7, 16, 64)] + [(32, 131072)]


def parse_sweep_n(text: str):
    """One --n item of a sweep: a row length N (an int; M = SWEEP_ELEMENTS // N) or an MxN shape (a tuple)."""
    return parse_shape(text) if any(c in text.lower() for c in "x×") else int(text)


def sweep_shapes(ns=None) -> list[tuple[int, int]]:
    """The sweep's (M, N): ns row lengths N (M = SWEEP_ELEMENTS / N) or (M, N) shapes (default: SWEEP_N and the
    FEW_ROWS shapes)."""
    shapes = [n if isinstance(n, tuple) else (SWEEP_ELEMENTS // n, n) for n in (ns or SWEEP_N)]
    return shapes + ([] if ns else FEW_ROWS)


def sweep_groups(ops=SWEEP_OPS, dtypes=SWEEP_DTYPES, ns=None, backends=(), compare=True) -> list[Group]:
    """backends: which of ours to time ("cuda", "triton"; empty = both); compare: the baselines too; ns: as
    sweep_shapes'."""
    shapes = sweep_shapes(ns)
    return [
        Group(f"{op} {dt} {M} x {N}", op, M, N, backends, parse_dtype(dt), sweep=True, compare=compare)
        for op in ops for dt in dtypes for M, N in shapes
    ]

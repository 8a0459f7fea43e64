"""Seeded inputs, adversarial ones included. Never zeros: zeros hide unwritten outputs.

`generate_input(shape, dtype, kind, seed)` draws in float64 with NumPy's PCG64 and casts once,
so the float64 reference sees exactly the values the variant sees.
"""

from __future__ import annotations

import zlib

import numpy as np
import torch

from ..errors import OnlineSoftmaxError
from ..reference import log_softmax, softmax

KINDS = {
    "normal": "N(0, 1)",
    "uniform": "U[-10, 40]: overflows exp() in fp16 without the max shift (seed 001 exp 4)",
    "outliers": "N(0, 1) with ~1% of each row replaced by +-20..40 (x20 outliers)",
    "offset": "N(0, 1) + 100: overflows exp() in fp32 without the max shift",
    "huge": "values within a factor 2 of the dtype's max (fp32 3.4e38, fp16 65504)",
    "masked": "every 3rd row (row 0 included) all -inf, the others N(0, 1)",
    "one_finite": "each row -inf except one N(0, 1) value",
    "nan": "every 3rd row (row 0 included) holds a NaN",
}
# A flat sum has no rows to mask; NaN/-inf would only test IEEE propagation.
_SUM_KINDS = ("normal", "uniform", "outliers", "offset")


def kinds_for(op: str) -> tuple[str, ...]:
    return _SUM_KINDS if op == "sum" else tuple(KINDS)


def _rng(seed: int, *salt) -> np.random.Generator:
    return np.random.default_rng([seed, zlib.crc32(repr(salt).encode())])


def generate_input(shape, dtype: torch.dtype, kind: str, seed: int) -> torch.Tensor:
    """A (M, N) CPU tensor of `dtype`; the same (shape, dtype, kind, seed) gives the same values."""
    if kind not in KINDS:
        raise OnlineSoftmaxError(f"unknown input kind {kind!r}; kinds: {', '.join(KINDS)}")
    M, N = shape
    rng = _rng(seed, "x", shape, str(dtype), kind)
    x = rng.standard_normal((M, N))
    rows = np.arange(M) % 3 == 0
    if kind == "uniform":
        x = rng.uniform(-10.0, 40.0, (M, N))
    elif kind == "outliers":
        hit = rng.random((M, N)) < 0.01
        hit[np.arange(M), rng.integers(0, N, M)] = True  # at least one per row
        x[hit] = rng.choice([-1.0, 1.0], hit.sum()) * rng.uniform(20.0, 40.0, hit.sum())
    elif kind == "offset":
        x += 100.0
    elif kind == "huge":
        top = float(torch.finfo(dtype).max)
        x = rng.choice([-1.0, 1.0], (M, N)) * rng.uniform(0.5, 1.0, (M, N)) * top
    elif kind == "masked":
        x[rows] = -np.inf
    elif kind == "one_finite":
        keep = rng.integers(0, N, M)
        finite = x[np.arange(M), keep]
        x[:] = -np.inf
        x[np.arange(M), keep] = finite
    elif kind == "nan":
        x[rows, rng.integers(0, N, rows.sum())] = np.nan
    return torch.from_numpy(x).to(dtype)


def make_inputs(op: str, M: int, N: int, dtype: torch.dtype, kind: str, seed: int) -> tuple:
    """The input tuple of `op` (registry convention), on the CPU.

    Backward ops get y = softmax(x) (or log_softmax) of an x of `kind`, rounded to `dtype`,
    and a fresh N(0, 1) upstream gradient dy.
    """
    if op == "sum":
        return (generate_input((1, N), dtype, kind, seed),)
    x = generate_input((M, N), dtype, kind, seed)
    if op in ("softmax", "log_softmax"):
        return (x,)
    forward = log_softmax if op == "log_softmax_backward" else softmax
    y = torch.from_numpy(forward(x)).to(dtype)
    dy = torch.from_numpy(_rng(seed, "dy", M, N).standard_normal((M, N))).to(dtype)
    return (y, dy)


def out_shape(op: str, M: int, N: int) -> tuple[int, ...]:
    return (1,) if op == "sum" else (M, N)

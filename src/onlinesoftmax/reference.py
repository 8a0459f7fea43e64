"""Float64 references: the specification every variant is checked against.

Semantics (the same for every backend, and documented in the README):
- softmax of a row whose entries are all -inf is 0 (not nan); its gradient is 0;
- log_softmax of such a row is -inf; its gradient is 0;
- a row holding nan or +inf gives nan across the row, as torch.softmax does;
- everything else is the textbook definition, computed with the max shift in float64.
"""

from __future__ import annotations

import numpy as np
import torch

from .opdefs import OPS


def as_float64(a) -> np.ndarray:
    if isinstance(a, torch.Tensor):
        return a.detach().to("cpu", torch.float64).numpy()
    return np.asarray(a, dtype=np.float64)


def _row_stats(x: np.ndarray):
    m = x.max(axis=-1, keepdims=True)  # nan propagates, as it should
    shift = np.where(m == -np.inf, 0.0, m)
    with np.errstate(invalid="ignore", over="ignore"):
        e = np.exp(x - shift)
    return shift, e, e.sum(axis=-1, keepdims=True)


def softmax(x) -> np.ndarray:
    x = as_float64(x)
    _, e, d = _row_stats(x)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(d == 0, 0.0, e / d)


def log_softmax(x) -> np.ndarray:
    x = as_float64(x)
    shift, _, d = _row_stats(x)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(d == 0, -np.inf, x - shift - np.log(d))


def softmax_backward(y, dy) -> np.ndarray:
    """dx = y * (dy - sum(dy * y)); a masked row has y = 0 and so dx = 0."""
    y, dy = as_float64(y), as_float64(dy)
    return y * (dy - (dy * y).sum(axis=-1, keepdims=True))


def log_softmax_backward(y, dy) -> np.ndarray:
    """dx = dy - exp(y) * sum(dy); 0 for a masked row (y all -inf)."""
    y, dy = as_float64(y), as_float64(dy)
    dx = dy - np.exp(y) * dy.sum(axis=-1, keepdims=True)
    masked = np.all(y == -np.inf, axis=-1, keepdims=True)
    return np.where(masked, 0.0, dx)


def total(x) -> np.ndarray:
    """The sum reduction of seed 001 §1.2, as a (1,) array."""
    return np.array([as_float64(x).sum()])


def attention(q, k, v, causal: bool = False, rows=None) -> np.ndarray:
    """Attention forward in float64 over the last two dims ([..., S, D]): softmax(q k^T / sqrt(D)) v, key j visible
    to query i when j <= i under `causal`. A query with no visible key gives 0 (softmax's all -inf row). `rows`:
    only these query indices (a long sequence checked on a sample of rows)."""
    q, k, v = as_float64(q), as_float64(k), as_float64(v)
    idx = np.arange(q.shape[-2]) if rows is None else np.asarray(rows)
    s = np.matmul(q[..., idx, :], np.swapaxes(k, -1, -2)) * q.shape[-1] ** -0.5
    if causal:
        s = np.where(np.arange(k.shape[-2])[None, :] > idx[:, None], -np.inf, s)
    return np.matmul(softmax(s), v)


_BY_OP = {
    "softmax": softmax,
    "log_softmax": log_softmax,
    "softmax_backward": softmax_backward,
    "log_softmax_backward": log_softmax_backward,
    "sum": total,
}
assert set(_BY_OP) == set(OPS)


def reference(op: str, inputs: tuple) -> np.ndarray:
    """The float64 answer for `op` on `inputs` (the registry's calling convention)."""
    return _BY_OP[op](*inputs)

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


# ------------------------------------------------------------------------------- cross-entropy
def cross_entropy(logits, target, ignore_index: int = -100, label_smoothing: float = 0.0, z_loss: float = 0.0,
                  softcap=None, reduction: str = "mean"):
    """(loss, dloss/dlogits) in float64 for logits (M, V) and integer targets (M,): F.cross_entropy's meaning
    (ignore_index, label_smoothing, reduction "none" / "sum" / "mean" over the non-ignored rows: NaN when every
    row is ignored, as torch), plus z_loss * lse^2 per row and softcap (x -> cap * tanh(x / cap) first).

        lse_r  = log sum_j exp(x_rj)
        loss_r = lse_r - (1 - eps) x_r,t - eps / V sum_j x_rj + z lse_r^2       (0 for an ignored row)
        dloss_r / dx_rj = (1 + 2 z lse_r) softmax_rj - eps / V - (1 - eps) [j = t] (times 1 - tanh^2 under softcap)

    The gradient is that of the reduced loss (of the sum for "none"); an ignored row's is 0."""
    x, t = as_float64(logits), np.asarray(torch.as_tensor(target).cpu(), dtype=np.int64)
    M, V = x.shape
    if softcap is not None:
        th = np.tanh(x / softcap)
        x = softcap * th
    valid = t != ignore_index
    cols = np.where(valid, t, 0)
    m = x.max(axis=-1, keepdims=True)
    shift = np.where(m == -np.inf, 0.0, m)
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        e = np.exp(x - shift)
        d = e.sum(axis=-1, keepdims=True)
        lse = shift + np.log(d)
        xt = np.take_along_axis(x, cols[:, None], axis=-1)
        rows = lse - (1 - label_smoothing) * xt - label_smoothing / V * x.sum(-1, keepdims=True) + z_loss * lse ** 2
        grad = (1 + 2 * z_loss * lse) * (e / d) - label_smoothing / V
    grad[np.arange(M), cols] -= 1 - label_smoothing
    if softcap is not None:
        grad = grad * (1 - th ** 2)
    rows = np.where(valid[:, None], rows, 0.0)[:, 0]
    grad = np.where(valid[:, None], grad, 0.0)
    if reduction == "none":
        return rows, grad
    if reduction == "sum":
        return np.array(rows.sum()), grad
    n = valid.sum()
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.array(rows.sum() / n), grad / n if n else grad

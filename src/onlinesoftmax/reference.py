"""Float64 references: the specification every variant is checked against.

Semantics (the same for every backend, and documented in the README):
- softmax of a row whose entries are all -inf is 0 (not nan); its gradient is 0;
- log_softmax of such a row is -inf; its gradient is 0;
- a row holding nan or +inf gives nan across the row, as torch.softmax does;
- everything else is the textbook definition, computed with the max shift in float64.

Attention (not a row op of opdefs, so outside `reference()`): O = softmax(scale * Q K^T + mask) V per
head, grouped-query heads (query head h reads key/value head h // (H / Hkv)), causal aligned to the
bottom right (query i sees key j iff j <= i + Sk - Sq); LSE is the natural-log log-sum-exp of each
row's scores, -inf for a row with no visible key, whose O is 0 (the softmax rule above).
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


def causal_mask(sq: int, sk: int) -> np.ndarray:
    """(sq, sk) bool: query i sees key j iff j <= i + sk - sq (bottom-right aligned, as flash-attn)."""
    return np.arange(sk)[None, :] <= np.arange(sq)[:, None] + (sk - sq)


def _attention_probabilities(q, k, causal, scale, rows=None):
    """float64 (q, k expanded to q's heads, scores, P, LSE) of attention over the last two dims ([..., S, D];
    heads, when there are, at dim -3). rows: only these query indices (a long sequence checked on a sample)."""
    q, k = as_float64(q), as_float64(k)
    sq = q.shape[-2]
    if rows is not None:
        q = q[..., np.asarray(rows), :]
    k = _expand(k, q)
    scale = 1.0 / np.sqrt(q.shape[-1]) if scale is None else scale
    s = scale * np.einsum("...id,...jd->...ij", q, k)
    if causal:
        mask = causal_mask(sq, k.shape[-2])
        s = np.where(mask if rows is None else mask[np.asarray(rows)], s, -np.inf)
    return q, k, s, softmax(s), _logsumexp(s)


def _logsumexp(s: np.ndarray) -> np.ndarray:
    if s.shape[-1] == 0:
        return np.full(s.shape[:-1], -np.inf)
    shift, _, d = _row_stats(s)
    with np.errstate(divide="ignore"):
        return np.where(d == 0, -np.inf, shift + np.log(d))[..., 0]


def _expand(t, q) -> np.ndarray:
    """Key/value heads (dim -3) repeated to the query's: query head h reads head h // (H / Hkv)."""
    t = as_float64(t)
    if t.ndim < 3 or t.shape[-3] in (0, q.shape[-3]):
        return t
    return np.repeat(t, q.shape[-3] // t.shape[-3], axis=-3)


def _group_sum(g: np.ndarray, hkv: int) -> np.ndarray:
    *lead, h, s, d = g.shape
    return g.reshape(*lead, hkv, h // hkv, s, d).sum(axis=-3)


def attention(q, k, v, causal: bool = False, scale=None, rows=None) -> tuple[np.ndarray, np.ndarray]:
    """(O, LSE) in float64: O (..., H, Sq, D), LSE (..., H, Sq) (only the query `rows` when given)."""
    q, _, _, p, lse = _attention_probabilities(q, k, causal, scale, rows)
    return np.einsum("...ij,...jd->...id", p, _expand(v, q)), lse


def attention_backward(q, k, v, do, dlse=None, causal: bool = False, scale=None):
    """(dQ, dK, dV) in float64 for the upstream gradients dO of O and dLSE of LSE (None: 0).
    dS = P * (dP - rowsum(dO * O) + dLSE), dQ = scale dS K, dK = scale dS^T Q, dV = P^T dO, with dK, dV summed
    over the query heads that share a key/value head. A row with no visible key has P = 0: zero gradients."""
    hkv = as_float64(k).shape[-3]
    scale = 1.0 / np.sqrt(as_float64(q).shape[-1]) if scale is None else scale
    q, ke, s, p, _ = _attention_probabilities(q, k, causal, scale)
    ve, do = _expand(v, q), as_float64(do)
    o = np.einsum("...ij,...jd->...id", p, ve)
    dp = np.einsum("...id,...jd->...ij", do, ve)
    delta = (do * o).sum(-1, keepdims=True)
    if dlse is not None:
        delta = delta - as_float64(dlse)[..., None]
    ds = p * (dp - delta)
    dq = scale * np.einsum("...ij,...jd->...id", ds, ke)
    dk = scale * np.einsum("...ij,...id->...jd", ds, q)
    dv = np.einsum("...ij,...id->...jd", p, do)
    return dq, _group_sum(dk, hkv), _group_sum(dv, hkv)


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


def reference(op: str, inputs: tuple, dim: int = -1) -> np.ndarray:
    """The float64 answer for `op` on `inputs` (the registry's calling convention); the softmax ops along `dim`
    (their rows: the last dim by default)."""
    if dim == -1:
        return _BY_OP[op](*inputs)
    moved = [np.moveaxis(as_float64(t), dim, -1) for t in inputs]
    return np.moveaxis(_BY_OP[op](*moved), -1, dim)


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
        rows = lse - (1 - label_smoothing) * xt + z_loss * lse ** 2
        if label_smoothing:  # only then: 0 * sum(x) would be NaN for a row with a -inf logit (torch: finite)
            rows = rows - label_smoothing / V * x.sum(-1, keepdims=True)
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

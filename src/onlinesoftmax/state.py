"""The online-softmax state (m, d) and its merge, defined once for NumPy arrays and torch tensors.

A state summarises a set of values x_i:  m = max x_i,  d = sum exp(x_i - m).

    (m1, d1) (+) (m2, d2) = (M, d1 * exp(m1 - M) + d2 * exp(m2 - M)),   M = max(m1, m2)
    identity               = (-inf, 0)
    state of one value x   = (x, 1)

The merge is associative and commutative (up to rounding), so a row can be folded in any order
and any tree shape: one thread serially (V0), a warp by shuffles (V1), a block through shared
memory, several CTAs (split rows), several GPUs (one all-gather). Every backend in this package
evaluates this one fold.

The guard. When both inputs are empty (m1 = m2 = -inf) the plain formula computes
exp(-inf - (-inf)) = exp(nan) = nan (seed 002 §4.3 meets it in the second warp level, seed 001
§8.3 in fully masked rows). We shift by 0 instead of M when M = -inf: exp(-inf - 0) = 0, and the
empty state stays (-inf, 0). NaN inputs still propagate (max(nan, .) = nan), and +inf still gives
nan as in torch.softmax.
"""

from __future__ import annotations

import numpy as np
import torch

NEG_INF = float("-inf")


def _xp(a):
    return torch if isinstance(a, torch.Tensor) else np


def safe_shift(m):
    """The max to subtract: m itself, or 0 where m = -inf (the guard)."""
    xp = _xp(m)
    return xp.where(m == NEG_INF, xp.zeros_like(m), m)


def merge(a, b):
    """(m1, d1) (+) (m2, d2), elementwise over arrays of states."""
    (m1, d1), (m2, d2) = a, b
    xp = _xp(m1)
    m = xp.maximum(m1, m2)
    shift = safe_shift(m)
    return m, d1 * xp.exp(m1 - shift) + d2 * xp.exp(m2 - shift)


def merge_unguarded(a, b):
    """The merge as the seeds first write it, without the guard: nan for two empty states.
    Kept for the tests that show why the guard exists; nothing in the package folds with it."""
    (m1, d1), (m2, d2) = a, b
    xp = _xp(m1)
    m = xp.maximum(m1, m2)
    return m, d1 * xp.exp(m1 - m) + d2 * xp.exp(m2 - m)


def identity_like(x):
    """The empty state (-inf, 0) shaped like x."""
    xp = _xp(x)
    return xp.full_like(x, NEG_INF), xp.zeros_like(x)


def of_values(x, axis=-1):
    """State of the values along `axis` by the two-pass definition (max, then sum of exp)."""
    xp = _xp(x)
    m = x.max(axis=axis, keepdims=True) if xp is np else x.amax(dim=axis, keepdim=True)
    e = xp.exp(x - safe_shift(m))
    d = e.sum(axis=axis, keepdims=True) if xp is np else e.sum(dim=axis, keepdim=True)
    return m, d


def probabilities(x, state):
    """softmax from a row's final state: exp(x - m) / d, and 0 for an empty (all -inf) row."""
    m, d = state
    xp = _xp(x)
    e = xp.exp(x - safe_shift(m))
    with np.errstate(divide="ignore", invalid="ignore"):
        return xp.where(d == 0, xp.zeros_like(e), e / d)


def log_probabilities(x, state):
    """log_softmax from a row's final state: x - m - log d (-inf everywhere for an empty row)."""
    m, d = state
    xp = _xp(x)
    with np.errstate(divide="ignore", invalid="ignore"):
        logp = x - safe_shift(m) - xp.log(d)
    return xp.where(d == 0, xp.full_like(logp, NEG_INF), logp)


def _sigmoid(x):
    if isinstance(x, torch.Tensor):
        return torch.sigmoid(x)
    with np.errstate(over="ignore"):
        return 1.0 / (1.0 + np.exp(-x))


def _logsigmoid(x):
    if isinstance(x, torch.Tensor):
        return torch.nn.functional.logsigmoid(x)
    return -np.logaddexp(0.0, -x)


def merge_lse(o1, lse1, o2, lse2):
    """Attention over two disjoint key sets -> attention over their union (split-KV decoding, ring attention).

    o1, o2 (..., D) are each part's normalised output and lse1, lse2 (...) its log-sum-exp: the (m, d) state of
    the row as m + log d. The merge above, written so that nothing overflows (ring attention's sigmoid form):

        o   = sigmoid(lse1 - lse2) * o1 + sigmoid(lse2 - lse1) * o2
        lse = max(lse1, lse2) - logsigmoid(|lse1 - lse2|)          (= log(e^lse1 + e^lse2))

    An empty part (lse = -inf, o = 0) is the identity: its weight is sigmoid(-inf) = 0 and the other's 1. Two empty
    parts would compute -inf - -inf = nan (the guard of `merge`): their difference is taken as 0 instead, which
    gives o = 0 and lse = -inf, with finite gradients everywhere. Differentiable under torch autograd."""
    xp = _xp(lse1)
    both_empty = (lse1 == NEG_INF) & (lse2 == NEG_INF)
    with np.errstate(invalid="ignore"):
        diff = xp.where(both_empty, xp.zeros_like(lse1), lse1 - lse2)
    w1, w2 = _sigmoid(diff)[..., None], _sigmoid(-diff)[..., None]
    lse = xp.maximum(lse1, lse2) - _logsigmoid(xp.abs(diff))
    return w1 * o1 + w2 * o2, lse

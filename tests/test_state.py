"""Properties of the (m, d) state and its merge, for NumPy and torch alike."""

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from onlinesoftmax import state

finite = st.floats(-80, 80, allow_nan=False, width=64)
entry = st.one_of(finite, st.just(-math.inf))
rows = st.lists(entry, min_size=1, max_size=40)


def fold(values, xp=np):
    """Serial fold of single-value states (V0's order)."""
    arr = xp.asarray(values, dtype=xp.float64) if xp is np else torch.tensor(values, dtype=torch.float64)
    s = state.identity_like(arr[:1])
    for i in range(len(values)):
        s = state.merge(s, (arr[i : i + 1], xp.ones_like(arr[:1])))
    return s


def close(a, b):
    (m1, d1), (m2, d2) = a, b
    same_m = np.array_equal(np.asarray(m1), np.asarray(m2))
    return same_m and np.allclose(np.asarray(d1), np.asarray(d2), rtol=1e-12, atol=0)


def two_pass(values):
    return state.of_values(np.asarray(values, dtype=np.float64)[None, :], axis=-1)


@settings(max_examples=200, deadline=None)
@given(rows, rows, rows)
def test_merge_is_associative(a, b, c):
    A, B, C = fold(a), fold(b), fold(c)
    assert close(state.merge(state.merge(A, B), C), state.merge(A, state.merge(B, C)))


@settings(max_examples=200, deadline=None)
@given(rows, rows)
def test_merge_is_commutative(a, b):
    A, B = fold(a), fold(b)
    assert close(state.merge(A, B), state.merge(B, A))


@settings(max_examples=100, deadline=None)
@given(rows)
def test_identity(a):
    A = fold(a)
    empty = state.identity_like(A[0])
    assert close(state.merge(A, empty), A)
    assert close(state.merge(empty, A), A)


@settings(max_examples=100, deadline=None)
@given(rows, finite)
def test_shift_invariance(a, c):
    """softmax(x + c) = softmax(x): m moves by c, d stays."""
    x = np.asarray(a, dtype=np.float64)[None, :]
    p = state.probabilities(x, state.of_values(x))
    q = state.probabilities(x + c, state.of_values(x + c))
    np.testing.assert_allclose(p, q, rtol=1e-9, atol=1e-300)
    m1, d1 = state.of_values(x)
    m2, d2 = state.of_values(x + c)
    np.testing.assert_allclose(d1, d2, rtol=1e-12)


@settings(max_examples=200, deadline=None)
@given(rows)
def test_fold_agrees_with_two_pass_definition(a):
    (m1, d1), (m2, d2) = fold(a), two_pass(a)
    assert m1.item() == m2.item()
    assert math.isclose(d1.item(), d2.item(), rel_tol=1e-12)


@settings(max_examples=50, deadline=None)
@given(rows)
def test_torch_and_numpy_agree(a):
    assert close(fold(a, np), fold(a, torch))


def test_all_minus_inf_row_stays_empty_with_the_guard():
    m, d = fold([-math.inf] * 5)
    assert m.item() == -math.inf and d.item() == 0.0
    x = np.full((1, 5), -np.inf)
    assert (state.probabilities(x, (m[None], d[None])) == 0).all()
    assert (state.log_probabilities(x, (m[None], d[None])) == -np.inf).all()


@pytest.mark.parametrize("xp", [np, torch])
def test_unguarded_merge_makes_nan_for_two_empty_states(xp):
    """Seed 002 §4.3: exp(-inf - (-inf)) = nan. The guard is what prevents it."""
    e = state.identity_like(xp.zeros(1) if xp is np else torch.zeros(1))
    with np.errstate(invalid="ignore"):
        assert math.isnan(float(state.merge_unguarded(e, e)[1][0]))
    assert float(state.merge(e, e)[1][0]) == 0.0


def test_nan_and_plus_inf_propagate():
    for bad in (math.nan, math.inf):
        with np.errstate(invalid="ignore"):
            m, d = fold([0.5, bad, -1.0])
        assert math.isnan(d.item())

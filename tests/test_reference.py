"""The float64 references: the textbook definitions, torch's autograd, the documented semantics."""

import numpy as np
import pytest
import torch

from onlinesoftmax import reference
from onlinesoftmax.harness.inputs import KINDS, generate_input, make_inputs


def test_softmax_matches_torch_in_float64(seed):
    x = generate_input((7, 301), torch.float64, "outliers", seed)
    np.testing.assert_allclose(reference.softmax(x), torch.softmax(x, -1).numpy(), rtol=1e-13, atol=1e-300)
    np.testing.assert_allclose(reference.log_softmax(x), torch.log_softmax(x, -1).numpy(), rtol=1e-13, atol=1e-12)


@pytest.mark.parametrize("log", [False, True])
def test_backward_matches_autograd(seed, log):
    x = generate_input((5, 129), torch.float64, "normal", seed).requires_grad_()
    y = (torch.log_softmax if log else torch.softmax)(x, -1)
    dy = generate_input((5, 129), torch.float64, "normal", seed + 1)
    (dx,) = torch.autograd.grad(y, x, dy)
    backward = reference.log_softmax_backward if log else reference.softmax_backward
    np.testing.assert_allclose(backward(y.detach(), dy), dx.numpy(), rtol=1e-10, atol=1e-14)


def test_masked_rows_give_zero_probabilities_and_zero_gradients(seed):
    (x,) = make_inputs("softmax", 6, 50, torch.float32, "masked", seed)
    masked = torch.isinf(x).all(-1).numpy()
    assert masked.any() and not masked.all()
    y = reference.softmax(x)
    assert (y[masked] == 0).all()
    np.testing.assert_allclose(y[~masked].sum(-1), 1.0, rtol=1e-12)
    assert (reference.log_softmax(x)[masked] == -np.inf).all()
    for op in ("softmax_backward", "log_softmax_backward"):
        y_, dy = make_inputs(op, 6, 50, torch.float32, "masked", seed)
        assert (reference.reference(op, (y_, dy))[masked] == 0).all()


@pytest.mark.parametrize("kind", ["nan"])
def test_nan_rows_are_nan_everywhere_like_torch(seed, kind):
    x = generate_input((6, 40), torch.float64, kind, seed)
    bad = torch.isnan(x).any(-1).numpy()
    y = reference.softmax(x)
    assert np.isnan(y[bad]).all() and not np.isnan(y[~bad]).any()
    assert np.isnan(torch.softmax(x, -1).numpy()[bad]).all()


def test_plus_inf_row_is_nan_like_torch():
    x = torch.tensor([[1.0, float("inf"), 2.0]], dtype=torch.float64)
    assert np.isnan(reference.softmax(x)).all()
    assert torch.isnan(torch.softmax(x, -1)).all()


def test_one_finite_value_gives_one_and_log_zero(seed):
    x = generate_input((5, 33), torch.float32, "one_finite", seed)
    finite = torch.isfinite(x).numpy()
    assert (finite.sum(-1) == 1).all()
    assert (reference.softmax(x)[finite] == 1.0).all()
    assert (reference.log_softmax(x)[finite] == 0.0).all()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_huge_values_do_not_overflow(seed, dtype):
    x = generate_input((4, 64), dtype, "huge", seed)
    assert torch.isfinite(x).all() and x.abs().max() > 0.4 * torch.finfo(dtype).max
    y = reference.softmax(x)
    assert np.isfinite(y).all()
    np.testing.assert_allclose(y.sum(-1), 1.0, rtol=1e-12)


@pytest.mark.parametrize("kind", list(KINDS))
def test_inputs_are_seeded_fresh_and_never_zero(kind, seed):
    a = generate_input((4, 20), torch.float32, kind, seed)
    b = generate_input((4, 20), torch.float32, kind, seed)
    c = generate_input((4, 20), torch.float32, kind, seed + 1)
    assert torch.equal(a.nan_to_num(1.0), b.nan_to_num(1.0))
    assert not torch.equal(a.nan_to_num(1.0), c.nan_to_num(1.0))
    assert (a != 0).any()


def test_sum_reference():
    x = torch.arange(1, 101, dtype=torch.float32)[None, :]
    assert reference.total(x)[0] == 5050.0


@pytest.mark.parametrize("op", ["softmax", "log_softmax", "softmax_backward", "log_softmax_backward"])
def test_reference_along_a_dim(op):
    """reference(op, inputs, dim) is the last-dim answer of the inputs with dim moved last, moved back; a masked
    column along dim 1 (all -inf) gets the package's semantics there too."""
    g = torch.Generator().manual_seed(5)
    x = torch.randn(3, 6, 4, generator=g, dtype=torch.float64)
    x[1, :, 2] = float("-inf")
    y = torch.log_softmax(x, 1) if op.startswith("log") else torch.softmax(x, 1).nan_to_num()
    inputs = (x,) if not op.endswith("backward") else (y, torch.randn(x.shape, generator=g, dtype=torch.float64))
    want = np.moveaxis(reference.reference(op, tuple(t.movedim(1, -1) for t in inputs)), -1, 1)
    got = reference.reference(op, inputs, 1)
    np.testing.assert_array_equal(got, want)
    if op == "softmax":
        assert (got[1, :, 2] == 0).all()

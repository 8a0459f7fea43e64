"""The public ops on the CPU (reference backend): values, gradients, dims, compile, errors."""

import numpy as np
import pytest
import torch

import onlinesoftmax as osm
from onlinesoftmax import reference
from onlinesoftmax.harness.check import compare
from onlinesoftmax.harness.inputs import generate_input


@pytest.mark.parametrize("log", [False, True])
@pytest.mark.parametrize("kind", ["normal", "masked", "nan", "one_finite", "huge", "offset"])
def test_values_match_the_float64_reference(seed, log, kind):
    x = generate_input((6, 37), torch.float32, kind, seed)
    y = (osm.log_softmax if log else osm.softmax)(x)
    want = (reference.log_softmax if log else reference.softmax)(x)
    assert y.dtype == x.dtype
    report = compare(y, want, torch.float32)
    assert report.ok, report.message


@pytest.mark.parametrize("dim", [0, 1, 2, -1])
def test_any_dim_and_non_contiguous(seed, dim):
    x = generate_input((4, 30), torch.float32, "normal", seed).reshape(4, 5, 6).transpose(0, 2)
    assert not x.is_contiguous()
    y = osm.softmax(x, dim=dim)
    np.testing.assert_allclose(y.numpy(), torch.softmax(x.double(), dim).numpy(), rtol=2e-6, atol=1e-7)


@pytest.mark.parametrize("log", [False, True])
def test_gradcheck_float64(seed, log):
    x = generate_input((3, 9), torch.float64, "normal", seed).requires_grad_()
    fn = osm.log_softmax if log else osm.softmax
    assert torch.autograd.gradcheck(lambda t: fn(t, 1), (x,))


@pytest.mark.parametrize("log", [False, True])
def test_masked_rows_have_zero_gradient(seed, log):
    x = generate_input((6, 11), torch.float32, "masked", seed).requires_grad_()
    y = (osm.log_softmax if log else osm.softmax)(x)
    dy = generate_input((6, 11), torch.float32, "normal", seed + 1)
    (dx,) = torch.autograd.grad(y, x, dy)
    masked = torch.isinf(x.detach()).all(-1)
    assert (dx[masked] == 0).all() and torch.isfinite(dx[~masked]).all()


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precisions(seed, dtype):
    x = generate_input((5, 300), dtype, "uniform", seed)
    y = osm.softmax(x)
    assert y.dtype == dtype
    np.testing.assert_allclose(y.double().numpy(), reference.softmax(x), rtol=1e-2, atol=1e-4)


def test_modules(seed):
    x = generate_input((2, 8), torch.float32, "normal", seed)
    assert torch.equal(osm.Softmax(dim=-1)(x), osm.softmax(x))
    assert torch.equal(osm.LogSoftmax(dim=0)(x), osm.log_softmax(x, 0))


def test_torch_compile_fullgraph_sees_the_custom_op(seed):
    x = generate_input((4, 16), torch.float32, "normal", seed).requires_grad_()

    @torch.compile(fullgraph=True, backend="aot_eager")
    def f(t):
        return osm.log_softmax(t * 2.0, dim=-1).sum() + osm.softmax(t, dim=0)[0, 0]

    loss = f(x)
    loss.backward()
    x2 = x.detach().clone().requires_grad_()
    (torch.log_softmax(x2 * 2.0, -1).sum() + torch.softmax(x2, 0)[0, 0]).backward()
    torch.testing.assert_close(loss, (torch.log_softmax(x2 * 2.0, -1).sum() + torch.softmax(x2, 0)[0, 0]))
    torch.testing.assert_close(x.grad, x2.grad)


def test_custom_op_fake_kernel():
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        x = torch.empty(3, 5)
        y = torch.ops.onlinesoftmax.softmax_forward(x, 1, False, "reference")
        assert y.shape == (3, 5) and y.dtype == torch.float32


@pytest.mark.parametrize("make, message", [
    (lambda: osm.softmax(torch.empty(0, 4)), "empty input"),
    (lambda: osm.softmax(torch.empty(3, 0)), "empty input"),
    (lambda: osm.softmax(torch.ones(3, 4, dtype=torch.int32)), "not supported"),
    (lambda: osm.softmax(torch.tensor(1.0)), "0-d tensor"),
    (lambda: osm.softmax(torch.ones(3, 4), dim=2), "out of range"),
    (lambda: osm.softmax(torch.ones(3, 4), backend="cuda"), "needs a CUDA tensor"),
    (lambda: osm.softmax(torch.ones(3, 4), backend="magic"), "unknown backend"),
    (lambda: osm.softmax([1.0, 2.0]), "expected a torch.Tensor"),
])
def test_bad_input_gives_a_clear_error(make, message):
    with pytest.raises(osm.OnlineSoftmaxError, match=message):
        make()

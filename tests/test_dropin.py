"""onlinesoftmax.enable() / disable() / enabled() on the CPU: the dispatcher's CUDA kernels of the four aten ops
are ours while enabled and torch's again after; CPU tensors are never affected; the kernels themselves (device
agnostic: they route by the tensor's device) follow the aten schemas. tests/test_gpu_dropin.py runs them on CUDA."""

import pytest
import torch
import torch.nn.functional as F

import onlinesoftmax as osm
from onlinesoftmax.ops import dropin

OPS = ("_softmax", "_log_softmax", "_softmax_backward_data", "_log_softmax_backward_data")
NEG_INF = float("-inf")


def _table(op: str) -> str:
    return torch._C._dispatch_dump_table(f"aten::{op}")


def _cuda_kernel(op: str) -> str:
    """Where the kernel the dispatcher computed for the CUDA key was registered."""
    (line,) = [ln for ln in _table(op).splitlines() if ln.startswith("CUDA:")]
    return line


@pytest.fixture(autouse=True)
def routing_off():
    assert not osm.is_enabled()
    yield
    osm.disable()


def test_the_kernels_cover_the_four_ops_with_their_schemas():
    assert tuple(dropin.KERNELS) == OPS
    for op in OPS:
        (schema,) = [str(s) for s in torch._C._jit_get_schemas_for_operator(f"aten::{op}")
                     if not s.overload_name]
        want = ("(Tensor self, int dim, bool half_to_float)" if "backward" not in op
                else "(Tensor grad_output, Tensor output, int dim, ScalarType input_dtype)")
        assert schema == f"aten::{op}{want} -> Tensor", schema


def test_enable_takes_the_cuda_key_and_disable_gives_it_back():
    before = {op: _table(op) for op in OPS}
    assert not any("dropin.py" in _cuda_kernel(op) for op in OPS)
    osm.enable()
    osm.enable()  # idempotent
    assert osm.is_enabled()
    for op in OPS:
        assert "onlinesoftmax/ops/dropin.py" in _cuda_kernel(op), _cuda_kernel(op)
        others = [ln for ln in _table(op).splitlines() if not ln.startswith("CUDA:")]
        assert others == [ln for ln in before[op].splitlines() if not ln.startswith("CUDA:")]
    osm.disable()
    osm.disable()  # a no-op
    assert not osm.is_enabled()
    assert {op: _table(op) for op in OPS} == before


def test_enabled_context_restores_the_state_it_found():
    before = _table("_softmax")
    with osm.enabled():
        assert osm.is_enabled() and "dropin.py" in _cuda_kernel("_softmax")
    assert not osm.is_enabled() and _table("_softmax") == before
    with pytest.raises(RuntimeError, match="inside"):
        with osm.enabled():
            raise RuntimeError("inside")
    assert not osm.is_enabled()
    osm.enable()
    with osm.enabled():
        pass
    assert osm.is_enabled()  # it was on before the block: still on


def _every_entry_point(x):
    """Outputs and input gradients of every way into softmax / log_softmax."""
    calls = [lambda t: torch.softmax(t, 1), lambda t: torch.log_softmax(t, 1), lambda t: F.softmax(t, 1),
             lambda t: F.log_softmax(t, 1), lambda t: t.softmax(1), lambda t: t.log_softmax(1),
             lambda t: torch.nn.Softmax(1)(t), lambda t: F.cross_entropy(t[1:], torch.tensor([0, 2, 1]))]
    results = []
    for call in calls:
        t = x.clone().requires_grad_()
        y = call(t)
        (dx,) = torch.autograd.grad(y, t, torch.ones_like(y))
        results += [y, dx]
    return results


def test_cpu_tensors_are_untouched():
    """Routing is for CUDA tensors: on the CPU torch's own answers, NaN on the masked row included."""
    x = torch.randn(4, 7)
    x[0] = NEG_INF
    before = _every_entry_point(x)
    assert before[0][0].isnan().all()
    with osm.enabled():
        during = _every_entry_point(x)
    for a, b in zip(before, during):
        torch.testing.assert_close(a, b, rtol=0, atol=0, equal_nan=True)


# The kernels on CPU tensors: the same code that runs on CUDA tensors when routed ("cpu" backend here).
@pytest.mark.parametrize("log", [False, True])
def test_forward_kernel_follows_the_schema(log):
    kernel = dropin.KERNELS["_log_softmax" if log else "_softmax"]
    fn = torch.log_softmax if log else torch.softmax
    x = torch.randn(5, 9, dtype=torch.float16)
    for dim in (1, -1, 0, -2):
        torch.testing.assert_close(kernel(x, dim, False), fn(x, dim), rtol=0, atol=0)
    y = kernel(x, 1, True)  # half_to_float: 16 bits in, fp32 out
    assert y.dtype == torch.float32
    torch.testing.assert_close(y, fn(x.float(), 1), rtol=0, atol=0)
    assert kernel(torch.tensor(3.0), -1, False).item() == (0.0 if log else 1.0)
    assert kernel(torch.empty(0, 3), 1, False).shape == (0, 3)
    masked = kernel(torch.full((2, 3), NEG_INF), 1, False)
    assert (masked == (NEG_INF if log else 0.0)).all()


@pytest.mark.parametrize("log", [False, True])
def test_backward_kernel_follows_the_schema(log):
    kernel = dropin.KERNELS["_log_softmax_backward_data" if log else "_softmax_backward_data"]
    aten = torch.ops.aten._log_softmax_backward_data if log else torch.ops.aten._softmax_backward_data
    x = torch.randn(5, 9)
    x[0] = NEG_INF
    y = (osm.log_softmax if log else osm.softmax)(x, 1)
    dy = torch.randn(5, 9)
    dx = kernel(dy, y, 1, torch.float32)
    torch.testing.assert_close(dx[1:], aten(dy, y, 1, torch.float32)[1:], rtol=0, atol=0)
    assert (dx[0] == 0).all()
    half = kernel(dy, y, -1, torch.float16)  # half_to_float's backward: fp32 gradients in, 16 bits out
    assert half.dtype == torch.float16
    torch.testing.assert_close(half, dx.half(), rtol=0, atol=0)
    assert kernel(torch.tensor(2.0), torch.tensor(1.0 if not log else 0.0), 0, torch.float32).item() == 0.0
    assert kernel(torch.empty(3, 0), torch.empty(3, 0), 1, torch.float32).shape == (3, 0)

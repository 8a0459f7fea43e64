"""The CUDA cross-entropy engine without a GPU: the plans of ce_row (pure Python) and what engines/cuda/run.py
launches (kernel, grid, every pointer and scalar of the parameter block), read from a fake cuLaunchKernel."""

import ctypes

import numpy as np
import pytest
import torch

pytest.importorskip("cuda.bindings", reason="cuda-bindings not installed")

from fakes import FakeLoadedKernel  # noqa: E402
from onlinesoftmax.engines.cuda import plan as P  # noqa: E402
from onlinesoftmax.engines.cuda import run as E  # noqa: E402
from onlinesoftmax.runtime import launch  # noqa: E402
from onlinesoftmax.runtime.bounded import BoundedCache  # noqa: E402

SMS = 132
BF16, F32 = torch.bfloat16, torch.float32


# ---- plans ------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("M,N,dtype,regime,cluster", [
    (8192, 32000, BF16, "block", 1), (8192, 32000, F32, "block", 1), (8192, 1000, F32, "block", 1),
    (8192, 128256, BF16, "cluster", 2), (8192, 256000, F32, "cluster", 8), (4, 50257, BF16, "cluster", 8)])
def test_plan_is_softmax_forward_on_the_row_kernel(M, N, dtype, regime, cluster):
    """ce_row takes softmax's forward plan (short rows: one CTA each, not the warp kernels), renamed."""
    V = P.vec_width(dtype)
    p = P.cross_entropy_plan(M, N, dtype, vec=N % V == 0, window=1, sms=SMS)
    (l,) = p.launches
    assert (p.regime, l.cluster, l.sig, p.op) == (regime, cluster, "ce", "cross_entropy")
    soft = P.plan(M, N, dtype, "softmax", vec=N % V == 0, window=1, sms=SMS,
                  regime="block" if regime == "block" else None)
    assert l.kernel == soft.launches[0].kernel.replace("fwd_row<0,", "ce_row<")
    assert l.kernel in P.instantiations()


@pytest.mark.parametrize("M,N,dtype", [(2, 600000, BF16), (64, 300007, F32)])
def test_plan_refuses_rows_beyond_a_cluster(M, N, dtype):
    with pytest.raises(P.Unsupported, match="do not stay on chip"):
        P.cross_entropy_plan(M, N, dtype, vec=False, window=1, sms=SMS)


def test_helpers_are_instantiated():
    inst = P.instantiations()
    for name in P.cross_entropy_helpers():
        assert inst[name] == {"ce"}
    assert {"ce_targets", "ce_loss<2>", "ce_scale<2,8>", "ce_scale<0,1>"} <= set(P.cross_entropy_helpers())


# ---- launches ----------------------------------------------------------------------------------------------------

class _Kernel:
    """A kernel for E.kernel whose prepared launches record (name, grid, pointers, scalars) per launch."""

    def __init__(self, name, log, types):
        self.name, self.log, self.types, self.fits, self.resident = name, log, types, True, None

    def bind(self, grid, tail, pointers, pdl=False, coop=False):
        p = launch.PreparedLaunch(FakeLoadedKernel(), grid, (128,), tail, 0, pointers)
        name, log, types = self.name, self.log, self.types

        def fake(handle, gx, gy, gz, bx, by, bz, smem, stream, params, extra):
            addrs = (ctypes.c_void_p * (pointers + len(types))).from_address(params)
            ptrs = [ctypes.c_uint64.from_address(a).value for a in addrs[:pointers]]
            vals = [t.from_address(a).value for t, a in zip(types, addrs[pointers:])]
            log.append((name, gx, ptrs, vals, pdl))
            return 0

        p._launch = fake
        return p


I64, I32, FL = ctypes.c_int64, ctypes.c_int32, ctypes.c_float
TYPES = {"ce_row": (I64, I32, I64, I64, I64, FL, FL, FL), "ce_targets": (I64, I32, I64, I32),
         "ce_loss": (I64, I32), "ce_scale": (I64, I32, I64, I64)}


@pytest.fixture
def log(monkeypatch):
    records = []
    monkeypatch.setattr(E, "kernel", lambda name, *a: _Kernel(name, records, TYPES[name.split("<")[0]]))
    monkeypatch.setattr(E, "_device_index", lambda x, op: 0)
    monkeypatch.setattr(E, "sms", lambda device: SMS)
    monkeypatch.setattr(E, "_stable", {-1: P.stable_rows(SMS), 0: P.stable_rows(SMS)})
    monkeypatch.setattr(E, "_ce_entries", BoundedCache(E.ENTRY_CACHE))
    monkeypatch.setattr(E, "_ce_small", BoundedCache(E.ENTRY_CACHE))
    monkeypatch.setattr(launch, "_CU_LAUNCH", False)
    monkeypatch.setattr(launch, "_current_device", lambda: 0)
    monkeypatch.setattr(launch, "stream_handle", lambda device: 0)
    monkeypatch.setattr(launch.PreparedLaunch, "__call__", lambda self, *p: self._go(self.dims[1], self._first, p))
    monkeypatch.setattr(launch.PreparedLaunch, "rows", lambda self, g, f, *p: self._go(g, f, p))
    return records


def _ptr(t):
    return t.data_ptr()


@pytest.mark.parametrize("layout", ("contiguous", "offset", "inplace"))
def test_ce_row_launch_carries_every_argument(log, layout):
    M, V = 40, 32001
    wide = torch.zeros(M, V + 1, dtype=BF16)
    x = wide[:, 1:] if layout == "offset" else wide[:, :V].contiguous()
    grad = x if layout == "inplace" else torch.empty(M, V, dtype=BF16)
    t = torch.zeros(M, dtype=torch.int64)
    loss, lse, info = torch.empty(M), torch.empty(M), torch.empty(4)
    assert E.cross_entropy(x, t, grad, loss, lse, info, -7, 0.25, 1e-3)
    assert E.cross_entropy(x, t, grad, loss, lse, info, -7, 0.25, 1e-3, after_targets=True)  # the op's forward
    want = P.cross_entropy_plan(M, V, BF16, vec=False, window=1 if layout != "offset" else 2, sms=SMS)
    sg = x.stride(0) if layout == "inplace" else V
    for (name, grid, ptrs, vals, pdl), programmatic in zip(log, (False, True)):
        assert name == want.launches[0].kernel and grid == want.launches[0].grid
        assert ptrs == [_ptr(x), _ptr(t), _ptr(grad), _ptr(loss), _ptr(lse), _ptr(info)]
        assert vals[:5] == [M, V, x.stride(0), sg, -7] and pdl == programmatic
        np.testing.assert_allclose(vals[5:], [0.25, 1e-3, 1.0 / V], rtol=1e-7)


def test_ce_row_declines_what_it_has_no_plan_for(log):
    x = torch.zeros(2, 600000, dtype=BF16)
    t = torch.zeros(2, dtype=torch.int64)
    assert not E.cross_entropy(x, t, torch.empty_like(x), torch.empty(2), torch.empty(2), torch.empty(4),
                               -100, 0.0, 0.0)
    assert log == []


def test_small_launches(log):
    M = 5000
    t = torch.zeros(M, dtype=torch.int64)
    info = E.cross_entropy_targets(t, 32000, -100, True)
    assert log[-1][0] == "ce_targets" and log[-1][1] == 1
    assert log[-1][2] == [_ptr(t), _ptr(info), 0] and log[-1][3] == [M, 32000, -100, 1]
    host = torch.empty(3)
    info = E.cross_entropy_targets(t, 32000, -100, False, host.data_ptr())  # the pinned copy, written by the kernel
    assert log[-1][2] == [_ptr(t), _ptr(info), _ptr(host)] and log[-1][3] == [M, 32000, -100, 0]
    rows, out = torch.empty(M), torch.empty((), dtype=BF16)
    for after_rows in (False, True):
        E.cross_entropy_loss(rows, info, out, False, after_rows)
        assert log[-1][0] == "ce_loss<2>" and log[-1][2] == [_ptr(rows), _ptr(info), _ptr(out)]
        assert log[-1][3] == [M, 0] and log[-1][4] == after_rows
    for N, go, W, sgo in ((32000, torch.ones((), dtype=BF16), 8, 0), (32001, torch.ones(M, dtype=BF16), 1, 1),
                          (32000, torch.ones((), dtype=BF16).expand(M), 8, 0)):
        g = torch.empty(M, N, dtype=BF16)
        E.cross_entropy_scale(g, go)
        name, grid, ptrs, vals, _ = log[-1]
        assert name == f"ce_scale<2,{W}>" and grid == min(M, P.stable_rows(SMS))
        assert ptrs[0] == _ptr(g) and vals == [M, N, N, sgo]

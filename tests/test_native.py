"""runtime/native.py's C++ helper (the eager hot path's lookup, allocation and launch in one call), built with
torch's extension builder and checked without a GPU: a fake cuLaunchKernel and cuCtxGetCurrent (ctypes callbacks)
stand in for libcuda, the first records every launch, and the public ops, forward_new and backward_new through the
helper must launch exactly what the Python path launches for the same call (kernel, grid, block, shared memory,
stream, pointers, every scalar), into the tensor they return; its table must hold what the engine's shape caches
hold, no more. Skipped where there is no C++ compiler or ninja; the build takes about a minute once."""

import ctypes
import json
import math
import os
import pathlib
import shutil
import subprocess
import sys

import numpy as np
import pytest
import torch

pytest.importorskip("cuda.bindings", reason="cuda-bindings not installed")
from torch.utils.cpp_extension import is_ninja_available  # noqa: E402

if not (is_ninja_available() and shutil.which("c++")):
    pytest.skip("no C++ compiler or ninja: the native helper cannot be built here", allow_module_level=True)

from fakes import FakeLoadedKernel, stub_device  # noqa: E402
from onlinesoftmax.engines.cuda import plan as P  # noqa: E402
from onlinesoftmax.engines.cuda import run as E  # noqa: E402
import onlinesoftmax as osm  # noqa: E402
from onlinesoftmax.errors import DimError, OnlineSoftmaxError  # noqa: E402
from onlinesoftmax.runtime import launch, native  # noqa: E402
from onlinesoftmax.runtime.bounded import BoundedCache  # noqa: E402

HERE = pathlib.Path(__file__).parent
SMS = 132
FAIL = {0: 0}  # what the fake cuLaunchKernel returns (0: CUDA_SUCCESS)
STREAM = 0x7F0000005000
CTX = {0: 0x7F0000009000}  # the context the fake cuCtxGetCurrent gives; the launches' device's primary is CTX_0
CTX_0 = 0x7F0000009000
ENTRY = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, *([ctypes.c_uint] * 7), ctypes.c_void_p, ctypes.c_void_p,
                         ctypes.c_void_p)


@ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_void_p))
def _fake_ctx_current(out):
    out[0] = CTX[0]
    return 0


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """The helper built into a fresh cache and loaded, bound to the fake cuCtxGetCurrent where libcuda is not here
    (on a GPU machine: to libcuda's)."""
    cache = str(tmp_path_factory.mktemp("cache"))
    old = {k: os.environ.get(k) for k in ("ONLINESOFTMAX_CACHE", native.ENV)}
    os.environ["ONLINESOFTMAX_CACHE"] = cache
    os.environ.pop(native.ENV, None)
    real_entry = launch.ctx_current_entry
    if real_entry() is None:
        launch.ctx_current_entry = lambda: _fake_ctx_current
    native.reset()
    try:
        native.build()
        yield cache
    finally:
        native.reset()
        launch.ctx_current_entry = real_entry
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def test_a_new_process_loads_the_built_helper_unless_told_not_to(built):
    code = ("import ctypes; from onlinesoftmax.runtime import launch, native; "
            "f = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p)(lambda p: 0); "
            "launch.ctx_current_entry = launch.ctx_current_entry() and launch.ctx_current_entry or (lambda: f); "
            "print(native.module() is not None)")
    for switch, want in (("1", "True"), (None, "True"), ("0", "False")):
        env = dict(os.environ, ONLINESOFTMAX_CACHE=built)
        env.pop(native.ENV, None)
        if switch is not None:
            env[native.ENV] = switch
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
        assert out.stdout.strip() == want, (switch, out.stdout, out.stderr)


class _Kernel:
    """A loaded kernel for E.kernel: its prepared launches go through libcuda's entry (here the fake)."""

    def __init__(self, name):
        self.name, self.fits, self.resident = name, True, None

    def bind(self, grid, tail, pointers, pdl=False, coop=False):
        lk = FakeLoadedKernel()
        lk.kernel = type("kernel", (), {"handle": 0x7F0000000000 + 0x100 * (hash(self.name) % 4096)})
        return launch.PreparedLaunch(lk, grid, (128, 2), tail, 4096, pointers)


@pytest.fixture
def recorded(monkeypatch, built):
    log, types = [], {}

    def entry(handle, gx, gy, gz, bx, by, bz, smem, stream, params, extra):
        npointers, tail = types[handle]
        addrs = (ctypes.c_void_p * (npointers + len(tail))).from_address(params)
        ptrs = tuple(ctypes.c_uint64.from_address(addrs[i]).value for i in range(npointers))
        vals = tuple(t.from_address(addrs[npointers + i]).value for i, t in enumerate(tail))
        log.append((handle, gx, gy, gz, bx, by, bz, smem, stream, ptrs, vals, extra))
        return FAIL[0]

    fake = ENTRY(entry)
    real_init = launch.PreparedLaunch.__init__

    def init(self, lk, grid, block, tail, smem=0, npointers=3, pdl=False):
        real_init(self, lk, grid, block, tail, smem, npointers, pdl)
        types[self.dims[0]] = (npointers, [type(v) for v in self._vals])

    monkeypatch.setattr(launch.PreparedLaunch, "__init__", init)
    monkeypatch.setattr(launch, "_CU_LAUNCH", fake)
    monkeypatch.setattr(launch, "_current_device", lambda: 0)
    monkeypatch.setattr(launch, "stream_handle", lambda device: STREAM)
    monkeypatch.setattr(launch, "context", lambda device: CTX_0)
    monkeypatch.setitem(CTX, 0, CTX_0)
    stub_device(monkeypatch, SMS)
    monkeypatch.setattr(E, "kernel", lambda name, *a: _Kernel(name))
    monkeypatch.setattr(E, "_stable", {-1: P.stable_rows(SMS)})
    for cache in ("_fwd_shapes", "_bwd_shapes", "_fwd_rows", "_bwd_rows", "_geometries", "_plans"):
        monkeypatch.setattr(E, cache, BoundedCache(getattr(E, cache).limit, getattr(E, cache).on_drop))
    monkeypatch.setattr(launch._state, "bound", True, raising=False)
    mod = native.module()
    assert mod is not None
    mod.clear()
    mod.test_stream(STREAM)  # the CPU tensors here launch (on the fake) as CUDA tensors would
    mod.bind(ctypes.cast(_fake_ctx_current, ctypes.c_void_p).value, OnlineSoftmaxError)  # also where libcuda is
    yield log
    native._bound(mod)  # back to what the module was bound to (libcuda's, or the fake where there is none)
    mod.test_stream(0)
    mod.clear()


def _launches(log):
    return [(handle, *rest, vals) for handle, *rest, ptrs, vals, extra in log]


@pytest.mark.parametrize("dtype,M,N", [(torch.float32, 3, 1001), (torch.bfloat16, 700, 1024), (torch.float16, 1, 63),
                                       (torch.bfloat16, 40001, 63), (torch.float32, 2, 4097)])
def test_native_launches_what_the_python_path_launches(recorded, dtype, M, N):
    """Three calls of each op: the first through Python (which puts the shape into the native table), the second
    straight into C++ (which must take it where the plan is one prepared launch; the split regime's two stay in
    Python), the third through the public op (forward) or the engine (backward). Every call must launch the same
    kernels, grids, blocks, shared memory, stream and scalars, with its own tensors' pointers."""
    from onlinesoftmax.ops import softmax as ops

    log = recorded
    mod = native.module()
    for log_op in (False, True):
        x = torch.zeros(M * N + 1, dtype=dtype)[1:].view(M, N)  # rows one element off a 16-byte boundary
        dy = torch.zeros(M * N, dtype=dtype).view(M, N)
        public = ops.log_softmax if log_op else ops.softmax
        for calls, args in (((E.forward_new, mod.forward, lambda a, d, l: public(a, d)), (x,)),
                            ((E.backward_new, mod.backward, E.backward_new), (x, dy))):
            first = None
            for call in calls:
                log.clear()
                out = call(*args, 1, log_op)
                if out is None:  # only C++ says None: the shape was not put
                    assert call is calls[1] and len(first) > 1, len(first)
                    continue
                assert out.shape == x.shape and out.dtype == dtype and out.is_contiguous()
                first = first or _launches(log)
                assert _launches(log) == first and all(l[8] == STREAM and l[-1][0] == M for l in first)
                assert log[-1][9][0] == x.data_ptr() and log[-1][9][-1] == out.data_ptr()
                if len(log) == 1:
                    assert log[0][9][1] == (dy.data_ptr() if len(args) > 1 else 0) and log[0][-1] is None
            key = (log_op, x.shape, dtype, -1, x.data_ptr() & 15) + ((dy.data_ptr() & 15,) if len(args) > 1 else ())
            shaped = (E._bwd_shapes if len(args) > 1 else E._fwd_shapes).get(key + (0,))
            assert (shaped.key is not None) == (len(first) == 1), (len(args), len(first))
    keys = [v.key for c in (E._fwd_shapes, E._bwd_shapes) for v in c._d.values() if v.key is not None]
    assert native.module().size() == len(keys) == len(set(keys))


def test_the_table_holds_what_the_shape_caches_hold(recorded, monkeypatch):
    """An entry leaves native.cpp's table when the engine's cache drops its shape (evicted, cleared), and only the
    entry that shape put; two _Shaped of one shape put by racing threads, in either order, leave the table with the
    entry of the one the cache holds."""
    mod = native.module()
    x = torch.zeros(3, 1001)
    E.forward_new(x, 1, False)
    E.backward_new(x, x, 1, True)
    assert mod.size() == 2
    E._fwd_shapes.clear()  # the fixture's fresh caches take the engine's on_drop
    E._bwd_shapes.clear()
    assert mod.size() == 0 and mod.forward(x, 1, False) is None
    monkeypatch.setattr(E, "_fwd_shapes", BoundedCache(2, E._drop_native))
    xs = [torch.zeros(3 + i, 1001) for i in range(3)]
    for x in xs:
        E.forward_new(x, 1, False)
    assert mod.size() == 2 and mod.forward(xs[0], 1, False) is None and mod.forward(xs[2], 1, False) is not None
    key = (False, xs[2].shape, torch.float32, -1, 0, 0)
    out = torch.empty_like(xs[2])
    for _ in range(2):
        s1, s2 = (E._shaped("softmax", (xs[2],), out, 1, E._fwd_rows, False) for _ in range(2))
        E._put_shaped(E._fwd_shapes, key, s1, "softmax", (xs[2],), out)
        E._put_shaped(E._fwd_shapes, key, s2, "softmax", (xs[2],), out)
        assert E._fwd_shapes.get(key) is s2 and s1.key == s2.key and mod.size() == 2
        assert mod.forward(xs[2], 1, False) is not None
        mod.remove(s2.key, s1)  # not its entry: stays
        assert mod.forward(xs[2], 1, False) is not None
    E._fwd_shapes.clear()
    assert mod.size() == 0 and mod.forward(xs[2], 1, False) is None


def test_an_entry_removed_while_the_output_is_allocated_still_launches_its_own_kernel(recorded):
    """empty_like may run Python (here a dispatch mode) that clears the table and fills it with other shapes: the call
    launches what it looked up (its kernel, grid, block), not what lies where its entry was."""
    from torch.utils._python_dispatch import TorchDispatchMode

    mod = native.module()
    x = torch.zeros(700, 1024, dtype=torch.bfloat16)
    others = [torch.zeros(3 + i, 4096) for i in range(32)]
    E.forward_new(x, 1, False)
    recorded.clear()
    assert mod.forward(x, 1, False) is not None
    want = _launches(recorded)

    class Refill(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            if func is torch.ops.aten.empty_like.default:
                E._fwd_shapes.clear()
                for o in others:
                    E.forward_new(o, 1, True)
            return out
    recorded.clear()
    with Refill():
        assert mod.forward(x, 1, False) is not None
    assert _launches(recorded)[-1] == want[0]


def test_what_the_table_does_not_take_goes_through_python(recorded, monkeypatch):
    """Calls the table must not answer: another dim (also one beyond 64 bits: the public op's own error), a view that
    is not contiguous, dy of another dtype or shape, a forward that autograd records, another context current on the
    thread (none: Python binds it). Each returns None from C++ (the caller's Python path then launches or raises)."""
    mod = native.module()
    x = torch.zeros(4, 1001)
    dy = torch.zeros(4, 1001)
    E.forward_new(x, 1, False)
    E.backward_new(x, dy, 1, False)
    assert mod.forward(x, 1, False) is not None and mod.forward(x, -1, False) is not None
    assert mod.backward(x, dy, -1, False) is not None
    assert mod.forward(x, 0, False) is None and mod.forward(x, 2, False) is None and mod.forward(x, -3, False) is None
    assert mod.forward(x, 2**63, False) is None and mod.forward(x, -2**70, False) is None
    with pytest.raises(DimError):
        osm.softmax(x, 2**63)
    assert mod.forward(x, 1, True) is None  # log_softmax: not put
    assert mod.forward(torch.zeros(8, 1001)[::2], 1, False) is None
    assert mod.forward(x.to(torch.bfloat16), 1, False) is None
    assert mod.backward(x, dy.to(torch.bfloat16), 1, False) is None
    assert mod.backward(x, torch.zeros(4, 1002)[:, :1001], 1, False) is None
    assert mod.backward(x, dy.view(2, 2, 1001), 1, False) is None
    g = x.clone().requires_grad_()
    assert mod.forward(g, 1, False) is None
    with torch.no_grad():
        assert mod.forward(g, 1, False) is not None
    monkeypatch.setitem(CTX, 0, CTX_0 + 0x1000)
    assert mod.forward(x, 1, False) is None
    monkeypatch.setitem(CTX, 0, CTX_0)
    mod.test_stream(0)  # a CPU tensor with no test stream: never launched
    assert mod.forward(x, 1, False) is None
    mod.test_stream(STREAM)


def test_a_failed_native_launch_is_the_packages_error(recorded, monkeypatch):
    """The driver's error through C++ reaches the caller as the ctypes path's does: an OnlineSoftmaxError naming the
    kernel and the CUresult, from the engine and from the public op."""
    from onlinesoftmax.errors import OnlineSoftmaxError
    from onlinesoftmax.ops import softmax as ops

    x = torch.zeros(3, 1001)
    E.forward_new(x, 1, False)  # through Python: puts the shape
    monkeypatch.setitem(FAIL, 0, 700)
    for call in (lambda: E.forward_new(x, 1, False), lambda: ops.softmax(x)):
        with pytest.raises(OnlineSoftmaxError, match=r"launch of fwd_\w+<.*\(native\).*CUresult 700"):
            call()


def test_asked_for_but_not_built_says_so_once(monkeypatch, tmp_path):
    monkeypatch.setenv("ONLINESOFTMAX_CACHE", str(tmp_path))
    monkeypatch.setenv(native.ENV, "1")
    native.reset()
    try:
        with pytest.warns(UserWarning, match="build-native"):
            assert native.module() is None
        assert native.module() is None  # decided once: no second warning, no second look
    finally:
        native.reset()


def test_native_put_refuses_what_it_cannot_take(recorded):
    """A launch through cuda.bindings' entry, or whose first scalar is not a 64-bit row count, or not three
    pointers, or a 2-D grid, is not put; nor a device whose context is not known."""
    mod = native.module()
    lk = FakeLoadedKernel()
    lk.kernel = type("kernel", (), {"handle": 0x7F0000001000})
    x = torch.zeros(2, 8)

    def put(*args):
        return launch.PreparedLaunch(lk, *args).native_put(mod, 0, x, None, 1, 2, object())
    assert put(1, (128,), (np.int64(5),)) is not None
    assert put(1, (128,), (np.int32(5),)) is None
    assert put(1, (128,), (np.int64(5),), 0, 4) is None
    assert put((1, 2), (128,), (np.int64(5),)) is None
    launch.context = lambda device: None  # restored by the fixture's monkeypatch
    assert put(1, (128,), (np.int64(5),)) is None
    launch.context = lambda device: CTX_0
    launch._CU_LAUNCH = False  # restored by the fixture's monkeypatch
    assert put(1, (128,), (np.int64(5),)) is None


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=str)
def test_gpu_native_calls_match_float64(built, monkeypatch, dtype):
    """On the GPU: the public ops through the helper (the second call of a shape on) against float64, outputs left
    NaN in the allocator's block first; forward and backward; aligned, unaligned, flat, few and many rows; then
    calls captured in CUDA graphs (a launch on any other stream than the capturing one breaks the capture), the
    helper's and a cluster launch's from Python, and replayed on new inputs."""
    from onlinesoftmax.harness.check import compare
    from onlinesoftmax.ops import softmax as ops
    from onlinesoftmax import reference as R

    for cache in ("_fwd_shapes", "_bwd_shapes"):  # shapes made before the helper was loaded have no native call
        monkeypatch.setattr(E, cache, BoundedCache(getattr(E, cache).limit, E._drop_native))
    g = torch.Generator(device="cuda").manual_seed(5)
    natives = 0
    for M, N, off in ((1, 1024, 0), (3, 1001, 1), (700, 4096, 0), (40001, 63, 0), (64, 32000, 0)):
        x = (torch.randn(M * N + off, generator=g, device="cuda") * 4).to(dtype)[off:].view(M, N)
        x[0, :] = float("-inf")
        if N > 1:
            x[-1, 1:] = float("-inf")
        ref = {log: (R.log_softmax if log else R.softmax)(x.double().cpu().numpy()) for log in (False, True)}
        for log in (False, True):
            for call in range(3):
                torch.full((x.numel() * x.element_size(),), 255, dtype=torch.uint8, device="cuda")  # NaN bits, freed
                y = (ops.log_softmax if log else ops.softmax)(x, -1)
                torch.cuda.synchronize()
                rep = compare(y, ref[log], dtype)
                assert rep.ok, (M, N, off, log, call, rep.message)
            shaped = E._fwd_shapes.get((log, x.shape, dtype, x.get_device(), x.data_ptr() & 15, 0))
            # a cluster launch (64 x 32000) is prepared too, but through cuLaunchKernelEx: it stays in Python
            assert (shaped.key is not None) == (shaped.launch is not None and shaped.launch.cluster == 1), (M, N, log)
            natives += shaped.key is not None
            dy = torch.randn(x.shape, generator=g, device="cuda").to(dtype)
            want = (R.log_softmax_backward if log else R.softmax_backward)(y.double().cpu().numpy(),
                                                                          dy.double().cpu().numpy())
            for call in range(3):
                torch.full((x.numel() * x.element_size(),), 255, dtype=torch.uint8, device="cuda")
                dx = E.backward_new(y, dy, 1, log)
                torch.cuda.synchronize()
                scale = torch.maximum(dy.double().abs().amax(), torch.from_numpy(want).abs().nan_to_num().amax())
                rep = compare(dx, want, dtype, np.full(want.shape, float(scale)))
                assert rep.ok, (M, N, off, log, "backward", call, rep.message)
            back = E._bwd_shapes.get((log, y.shape, dtype, y.get_device(), y.data_ptr() & 15, dy.data_ptr() & 15, 0))
            assert (native.module().backward(y, dy, -1, log) is not None) == (back.key is not None), (M, N, log)
            natives += back.key is not None
    assert natives >= 12  # the single-launch shapes went through C++, forward and backward
    for N in (1001, 32000):  # the helper's launch; a cluster launch (cuLaunchKernelEx) from Python
        x = torch.randn(64, N, generator=g, device="cuda").to(dtype)
        ops.softmax(x)  # put
        assert (native.module().forward(x, -1, False) is not None) == (N == 1001)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            y = ops.softmax(x)
        x.copy_(torch.randn(x.shape, generator=g, device="cuda").to(dtype))
        y.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        rep = compare(y, R.softmax(x.double().cpu().numpy()), dtype)
        assert rep.ok, (N, rep.message)


# The Triton backend's entries (engines/triton/softmax.py put_native), in a process of its own: Triton's driver stubbed
# (kernels compile for sm_90, what each launch hands its launcher recorded), the helper bound to a fake cuLaunchKernel
# that records the parameters native.cpp hands it (up to the first null slot of its parameter array).
TRITON_SCRIPT = r'''
import ctypes, json, os, sys
sys.path.insert(0, sys.argv[1])
import fakes
import torch
from triton.compiler.compiler import CompiledKernel

STREAM, CTX = 0x7F0000005000, 0x7F0000009000
handed = []
fakes.stub_triton_driver(handed, [STREAM])
stubbed = CompiledKernel._init_handles


def init_handles(self):  # a CUfunction handle (an int), as libcuda's loader gives one
    stubbed(self)
    if not isinstance(self.function, int):
        self.function = 0x7F0000100000 + 0x100 * (int(self.hash[:6], 16) % 4096)


CompiledKernel._init_handles = init_handles
from onlinesoftmax.engines.triton import softmax as K
from onlinesoftmax.engines.triton import softmax_rules as R
from onlinesoftmax.errors import OnlineSoftmaxError
from onlinesoftmax.ops import softmax as ops
from onlinesoftmax.runtime import launch, native

os.environ["TRITON_INTERPRET"] = "1"  # the public op's check for CPU tensors (the kernels stay compiled)
K._learn_occupancy = lambda key, compiled, warps, device: key is not None and K.OCCUPANCY.setdefault(key, 1)
launched, fail = [], [0]


@ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, *([ctypes.c_uint] * 7), ctypes.c_void_p, ctypes.c_void_p,
                  ctypes.c_void_p)
def entry(handle, gx, gy, gz, bx, by, bz, smem, stream, params, extra):
    addrs = (ctypes.c_void_p * 15).from_address(params)  # native.cpp's array: 3 + MAX_SCALARS slots, unused null
    values = [ctypes.c_uint64.from_address(a).value for a in addrs[:addrs[:].index(None)]]
    launched.append([handle, gx, gy, gz, bx, by, bz, smem, stream, values])
    return fail[0]


@ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_void_p))
def ctx_current(out):
    out[0] = CTX
    return 0


launch.ctx_current_entry = lambda: ctx_current
K.context = lambda device: CTX
K.cu_launch_address = lambda: ctypes.cast(entry, ctypes.c_void_p).value
mod = native.module()
mod.test_stream(STREAM)


def case(shape, dtype, backward, log):
    x, dy = torch.randn(*shape).to(dtype), torch.randn(*shape).to(dtype)
    calls = []
    for i in range(4):
        before = len(handed), len(launched)
        if backward:
            out = ops.backward(x, dy, len(shape) - 1, log, "triton")
        else:
            out = (ops.log_softmax if log else ops.softmax)(x, -1, backend="triton")
        call = {"triton": len(handed) - before[0], "native": len(launched) - before[1], "in": x.data_ptr(),
                "dy": dy.data_ptr(), "out": out.data_ptr()}
        if call["triton"]:  # what Triton's launcher was handed, as native.cpp must hand it to cuLaunchKernel
            gx, gy, gz, stream, function, _packed, _meta, _enter, _exit, *args = handed[-1]
            ready = [r for r in K._READY._d.values() if r.compiled.function == function]
            if ready:
                c = ready[0].compiled
                params = [a.data_ptr() if isinstance(a, torch.Tensor) else a
                          for name, a in zip(ready[0].kernel.arg_names, args) if c.src.signature[name] != "constexpr"]
                call["want"] = [function, gx, gy, gz, 32 * c.metadata.num_warps, 1, 1, c.metadata.shared, stream,
                                params + [0, 0]]
        if call["native"]:
            call["got"] = launched[-1]
        calls.append(call)
    return calls


out = {}
out["fwd"] = case((6, 40), torch.float32, False, False)
out["log_fwd_one_row"] = case((1, 1000), torch.bfloat16, False, True)  # M = 1: a constant to Triton, no parameter
out["fwd_3d"] = case((2, 3, 40), torch.float32, False, False)
out["log_bwd"] = case((5, 33), torch.bfloat16, True, True)
out["bwd"] = case((6, 40), torch.float32, True, False)
out["split"] = case((2, 40000), torch.float32, False, False)
out["size"] = mod.size()
x = torch.randn(6, 40)
out["other_backend"] = [mod.forward(x, -1, False, 0) is None, mod.forward(x, -1, False, 1) is not None]


def counts(fn, n):  # (Triton's launches, native.cpp's) of n calls
    before = len(handed), len(launched)
    for _ in range(n):
        fn()
    return [len(handed) - before[0], len(launched) - before[1]]


from triton import knobs

hook = lambda *a, **kw: None  # noqa: E731
knobs.runtime.launch_enter_hook.add(hook)  # a profiler's hook: Triton's launcher must call it, so no native launch
out["hooked"] = counts(lambda: ops.softmax(x, -1, backend="triton"), 2) + [
    handed[-1][7] is knobs.runtime.launch_enter_hook, mod.size()]  # the stubbed launcher is handed it
knobs.runtime.launch_enter_hook.remove(hook)
out["unhooked"] = counts(lambda: ops.softmax(x, -1, backend="triton"), 3)  # put again by the first
knobs.runtime.debug = True  # another kernel (device asserts): the entries go, Triton compiles, launches and readies it
out["debug"] = counts(lambda: ops.softmax(x, -1, backend="triton"), 1) + [mod.size()]
knobs.runtime.debug = False
out["debug_off"] = counts(lambda: ops.softmax(x, -1, backend="triton"), 3)
fail[0] = 700
try:
    ops.softmax(x, -1, backend="triton")
    out["error"] = None
except OnlineSoftmaxError as e:
    out["error"] = str(e)
fail[0] = 0
R.ROWS_TILE_BYTES = R.ROWS_TILE_BYTES  # any assignment to the rules: the ready launches and their entries go
out["after_rules"] = [mod.size(), len(K._READY), mod.forward(x, -1, False, 1) is None]
print(json.dumps(out))
'''


def test_triton_ready_launches_go_native(built):
    """The Triton backend's shapes launched ready (one launch, no workspace: the rows and online regimes) go into the
    table: from a shape's third call on (the second plans it again and makes it ready) the public op and the backward
    launch through C++ exactly what Triton's launcher was handed for that shape (function, grid, block, shared memory,
    stream, every parameter: the pointers, the scalars Triton did not make constants, its two null scratch pointers),
    with the call's own tensors; the split regime (a workspace a call) never goes there; the key is per backend; a
    failed launch is the package's error naming the kernel; an assignment to the rules removes every entry."""
    pytest.importorskip("triton")
    env = {**os.environ, "ONLINESOFTMAX_CACHE": built,
           "PYTHONPATH": os.pathsep.join([str(HERE.parent / "src"), os.environ.get("PYTHONPATH", "")])}
    env.pop("TRITON_INTERPRET", None)
    env.pop(native.ENV, None)
    run = subprocess.run([sys.executable, "-c", TRITON_SCRIPT, str(HERE)], env=env, capture_output=True, text=True,
                         timeout=900)
    if run.returncode:
        pytest.fail(f"the stubbed-driver script failed:\n{run.stderr[-3000:]}")
    out = json.loads(run.stdout.strip().splitlines()[-1])
    # fwd_3d: fwd's rows (6 x 40) as a 3-d tensor, whose ready launch its first call finds (and puts under its key)
    for case, made in (("fwd", 2), ("log_fwd_one_row", 2), ("fwd_3d", 1), ("log_bwd", 2), ("bwd", 2)):
        calls = out[case]
        assert [(c["triton"], c["native"]) for c in calls] == [(1, 0)] * made + [(0, 1)] * (4 - made), case
        want = calls[made - 1]["want"]
        pointers = 3 if case.endswith("bwd") else 2
        for c in calls[made:]:
            got = c["got"]
            assert got[:9] == want[:9], case
            own = [c["in"], c["dy"], c["out"]] if pointers == 3 else [c["in"], c["out"]]
            assert got[9][:pointers] == own and got[9][pointers:] == want[9][pointers:], (case, got[9], want[9])
        assert calls[2]["out"] != calls[3]["out"]
    assert [(c["triton"], c["native"]) for c in out["split"]] == [(1, 0)] * 4
    assert out["size"] == 5 and out["other_backend"] == [True, True]
    # Triton's hooks and settings: while a launch hook is set every call goes through Triton's launcher (which calls
    # it) and the entries leave the table; then a shape is put again at its next call; under debug the old entry goes
    # and the debug kernel's, made ready by that call, is the table's one
    assert out["hooked"] == [2, 0, True, 0] and out["unhooked"] == [1, 2] and out["debug"] == [1, 0, 1]
    assert out["debug_off"][1] >= 1
    assert out["error"] and "rows_kernel" in out["error"] and "(native)" in out["error"] and "700" in out["error"]
    assert out["after_rules"] == [0, 0, True]


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_gpu_triton_native_calls_match_float64(built, dtype):
    """On the GPU, backend="triton": the public op and the backward through the helper (a shape's third call on)
    against float64, outputs left NaN in the allocator's block first; rows (aligned, unaligned, one row, 2-d and 3-d),
    the online regime (bf16 past 32768, rows at least the SMs) and the split regime (fp32 there, and few rows: never
    in the table)."""
    pytest.importorskip("triton")
    from onlinesoftmax.harness.check import compare
    from onlinesoftmax.ops import softmax as ops
    from onlinesoftmax import reference as R

    from onlinesoftmax.engines.triton import softmax as K

    mod = native.module()
    g = torch.Generator(device="cuda").manual_seed(7)
    natives = 0
    for shape, off in (((1, 1024), 0), ((3, 1001), 1), ((700, 4096), 0), ((2, 5, 3000), 0), ((160, 40001), 0),
                       ((16, 100003), 0)):
        n = math.prod(shape)
        x = (torch.randn(n + off, generator=g, device="cuda") * 4).to(dtype)[off:].view(shape)
        x.view(-1, shape[-1])[0] = float("-inf")  # a fully masked row
        dy = torch.randn(shape, generator=g, device="cuda").to(dtype)
        for log in (False, True):
            ref = (R.log_softmax if log else R.softmax)(x.double().cpu().numpy())
            for call in range(4):
                torch.full((n * x.element_size(),), 255, dtype=torch.uint8, device="cuda")  # NaN bits, freed
                y = (ops.log_softmax if log else ops.softmax)(x, -1, backend="triton")
                torch.cuda.synchronize()
                rep = compare(y, ref, dtype)
                assert rep.ok, (shape, off, log, call, rep.message)
            put = mod.forward(x, -1, log, 1) is not None
            regime = K.pick_regime(n // shape[-1], shape[-1], dtype, False, K.sm_count(x.device))
            assert put == (regime != "split"), (shape, log, regime)  # split: a workspace a call, never put
            natives += put
            want = (R.log_softmax_backward if log else R.softmax_backward)(y.double().cpu().numpy(),
                                                                          dy.double().cpu().numpy())
            scale = np.full(want.shape, float(max(dy.double().abs().amax(), np.abs(np.nan_to_num(want)).max())))
            for call in range(4):
                torch.full((n * x.element_size(),), 255, dtype=torch.uint8, device="cuda")
                dx = ops.backward(y, dy, y.dim() - 1, log, "triton")
                torch.cuda.synchronize()
                rep = compare(dx, want, dtype, scale)
                assert rep.ok, (shape, off, log, "backward", call, rep.message)
            natives += mod.backward(y, dy, -1, log, 1) is not None
    assert natives >= 16

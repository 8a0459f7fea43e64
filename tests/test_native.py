"""runtime/native.py's C++ helper (the eager hot path's allocation and launch in one call), built with torch's
extension builder and checked without a GPU: a fake cuLaunchKernel (a ctypes callback) records every launch, and
forward_new / backward_new through the helper must launch exactly what the Python path launches for the same call
(kernel, grid, block, shared memory, stream, pointers, every scalar), into the tensor they return. Skipped where
there is no C++ compiler or ninja; the build takes about a minute once."""

import ctypes
import os
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

from fakes import FakeLoadedKernel  # noqa: E402
from onlinesoftmax.engines.cuda import plan as P  # noqa: E402
from onlinesoftmax.engines.cuda import run as E  # noqa: E402
from onlinesoftmax.runtime import launch, native  # noqa: E402
from onlinesoftmax.runtime.bounded import BoundedCache  # noqa: E402

SMS = 132
FAIL = {0: 0}  # what the fake cuLaunchKernel returns (0: CUDA_SUCCESS)
STREAM = 0x7F0000005000
ENTRY = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, *([ctypes.c_uint] * 7), ctypes.c_void_p, ctypes.c_void_p,
                         ctypes.c_void_p)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    cache = str(tmp_path_factory.mktemp("cache"))
    old = {k: os.environ.get(k) for k in ("ONLINESOFTMAX_CACHE", native.ENV)}
    os.environ.update({"ONLINESOFTMAX_CACHE": cache, native.ENV: "1"})
    native.reset()
    try:
        native.build()
        yield cache
    finally:
        native.reset()
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def test_a_new_process_loads_the_built_helper_only_when_asked(built):
    code = "from onlinesoftmax.runtime import native; print(native.module() is not None)"
    for switch, want in (("1", "True"), (None, "False"), ("0", "False")):
        env = dict(os.environ, ONLINESOFTMAX_CACHE=built)
        env.pop(native.ENV, None)
        if switch is not None:
            env[native.ENV] = switch
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
        assert out.stdout.strip() == want, (switch, out.stdout, out.stderr)


class _Kernel:
    """A loaded kernel for E.kernel: its prepared launches go through libcuda's entry (here the fake)."""

    def __init__(self, name):
        self.name, self.fits = name, True

    def bind(self, grid, tail, pointers):
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
    monkeypatch.setattr(E, "stream_handle", lambda device: STREAM)
    monkeypatch.setattr(E, "available", lambda: None)
    monkeypatch.setattr(E, "_device_index", lambda x, op: 0)
    monkeypatch.setattr(E, "sms", lambda device: SMS)
    monkeypatch.setattr(E, "kernel", lambda name, *a: _Kernel(name))
    monkeypatch.setattr(E, "_stable", {-1: P.stable_rows(SMS)})
    for cache in ("_fwd_shapes", "_bwd_shapes", "_fwd_rows", "_bwd_rows", "_geometries", "_plans"):
        monkeypatch.setattr(E, cache, BoundedCache(getattr(E, cache).limit))
    monkeypatch.setattr(launch._state, "bound", True, raising=False)
    assert native.module() is not None
    return log


def _launches(log):
    return [(handle, *rest, vals) for handle, *rest, ptrs, vals, extra in log]


@pytest.mark.parametrize("dtype,M,N", [(torch.float32, 3, 1001), (torch.bfloat16, 700, 1024), (torch.float16, 1, 63),
                                       (torch.bfloat16, 40001, 63), (torch.float32, 2, 4097)])
def test_native_launches_what_the_python_path_launches(recorded, dtype, M, N):
    """Three calls of each op: the first through Python (which makes the shape's native call), the others through
    C++ where the plan is one prepared launch (the split regime's two stay in Python). Every call must launch the
    same kernels, grids, blocks, shared memory, stream and scalars, with its own tensors' pointers last written."""
    log = recorded
    for log_op in (False, True):
        x = torch.zeros(M * N + 1, dtype=dtype)[1:].view(M, N)  # rows one element off a 16-byte boundary
        dy = torch.zeros(M * N, dtype=dtype).view(M, N)
        for call, args in ((E.forward_new, (x,)), (E.backward_new, (x, dy))):
            first = None
            for _ in range(3):
                log.clear()
                out = call(*args, 1, log_op)
                assert out.shape == x.shape and out.dtype == dtype and out.is_contiguous()
                first = first or _launches(log)
                assert _launches(log) == first and all(l[8] == STREAM and l[-1][0] == M for l in first)
                assert log[-1][9][0] == x.data_ptr() and log[-1][9][-1] == out.data_ptr()
                if len(log) == 1:
                    assert log[0][9][1] == (dy.data_ptr() if len(args) > 1 else 0) and log[0][-1] is None
            key = (log_op, x.shape, dtype, -1, x.data_ptr() & 15) + ((dy.data_ptr() & 15,) if len(args) > 1 else ())
            shaped = (E._bwd_shapes if len(args) > 1 else E._fwd_shapes).get(key + (0,))
            assert (shaped.native is not None) == (len(first) == 1), (call.__name__, len(first))


def test_a_failed_native_launch_is_the_packages_error(recorded, monkeypatch):
    """The driver's error through C++ reaches the caller as the ctypes path's does: an OnlineSoftmaxError naming the
    kernel and the CUresult."""
    from onlinesoftmax.errors import OnlineSoftmaxError

    x = torch.zeros(3, 1001)
    E.forward_new(x, 1, False)  # through Python: makes the shape's native call
    monkeypatch.setitem(FAIL, 0, 700)
    with pytest.raises(OnlineSoftmaxError, match=r"launch of fwd_\w+<.*\(native\).*CUresult 700"):
        E.forward_new(x, 1, False)


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


def test_native_call_refuses_what_it_cannot_take(recorded):
    """A launch through cuda.bindings' entry, or whose first scalar is not a 64-bit row count, gets no native call."""
    mod = native.module()
    lk = FakeLoadedKernel()
    lk.kernel = type("kernel", (), {"handle": 0x7F0000001000})
    assert launch.PreparedLaunch(lk, 1, (128,), (np.int64(5),)).native_call(mod, 1, 5) is not None
    assert launch.PreparedLaunch(lk, 1, (128,), (np.int32(5),)).native_call(mod, 1, 5) is None
    assert launch.PreparedLaunch(lk, 1, (128,), (np.int64(5),), 0, 4).native_call(mod, 1, 5) is None
    assert launch.PreparedLaunch(lk, (1, 2), (128,), (np.int64(5),)).native_call(mod, 1, 5) is None
    launch._CU_LAUNCH = False  # restored by the fixture's monkeypatch
    assert launch.PreparedLaunch(lk, 1, (128,), (np.int64(5),)).native_call(mod, 1, 5) is None


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=str)
def test_gpu_native_calls_match_float64(built, monkeypatch, dtype):
    """On the GPU: the public ops through the helper (the second call of a shape on) against float64, outputs left
    NaN in the allocator's block first; forward and backward; aligned, unaligned, flat, few and many rows."""
    from onlinesoftmax.harness.check import compare
    from onlinesoftmax.ops import softmax as ops
    from onlinesoftmax import reference as R

    for cache in ("_fwd_shapes", "_bwd_shapes"):  # shapes made before the helper was loaded have no native call
        monkeypatch.setattr(E, cache, BoundedCache(getattr(E, cache).limit))
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
            assert (shaped.native is not None) == (shaped.launch is not None), (M, N, off, log)  # cluster: Python
            natives += shaped.native is not None
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
    assert natives >= 6  # the single-launch shapes went through C++

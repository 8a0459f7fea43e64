"""The eager hot path's parameter block (runtime.launch.PreparedLaunch), checked without a GPU: every kernel
parameter pointer addresses the right value, the three leading pointers are per call, scalars keep their widths."""

import ctypes
import threading
import time

import numpy as np
import pytest

pytest.importorskip("cuda.bindings", reason="cuda-bindings not installed")

from onlinesoftmax.errors import OnlineSoftmaxError  # noqa: E402
from fakes import FakeLoadedKernel as _Loaded, run_threads  # noqa: E402
from onlinesoftmax.runtime import launch  # noqa: E402
from onlinesoftmax.runtime.launch import PreparedLaunch  # noqa: E402


@pytest.fixture(autouse=True)
def _bindings_entry(monkeypatch):
    """cuda.bindings' cuLaunchKernel (kernel handles as objects), whether or not libcuda is on this machine."""
    monkeypatch.setattr(launch, "_CU_LAUNCH", False)


def test_parameter_block_points_at_each_argument():
    lk = _Loaded()
    tail = (np.int64(2**40 + 3), np.int32(-7), np.int64(123), np.int64(0), np.int64(-(2**35)), np.int32(5),
            np.float32(0.1))
    p = PreparedLaunch(lk, 9, (4, 128), tail, smem=1024)
    assert lk.smem == [1024]  # the kernel's dynamic shared memory limit is raised when needed
    assert p.dims == ("handle", 9, 1, 1, 4, 128, 1, 1024)
    params = list(p._params)
    assert len(params) == 3 + len(tail)
    p._ptrs[:] = (0x7F0000001000, 0, 0x7F0000002000)  # what a call writes before cuLaunchKernel
    assert [ctypes.c_uint64.from_address(a).value for a in params[:3]] == [0x7F0000001000, 0, 0x7F0000002000]
    kinds = {np.dtype(np.int64): ctypes.c_int64, np.dtype(np.int32): ctypes.c_int32,
             np.dtype(np.float32): ctypes.c_float}
    got = [kinds[np.asarray(v).dtype].from_address(a).value for v, a in zip(tail, params[3:])]
    assert got == [v.item() for v in tail]  # the float32 exactly: c_float holds np.float32(0.1)'s bits
    assert p._addr == ctypes.addressof(p._params)


def test_other_scalar_types_are_refused():
    with pytest.raises(OnlineSoftmaxError, match="np.int32 / np.int64 / np.float32"):
        PreparedLaunch(_Loaded(), 1, (32,), (np.float64(1.0),))


def test_launch_passes_what_both_driver_entries_take(monkeypatch):
    """cuda.bindings' entry: `extra` as the int 0 (it rejects None), the stream as its CUstream."""
    seen = []
    monkeypatch.setattr(launch, "stream_handle", lambda device: 0)
    p = PreparedLaunch(_Loaded(), 2, (64,), (np.int64(5),), 0, 3)
    p._launch = lambda *args: seen.append(args) or 0
    p._go(p.dims[1], 7, (1, 2, 3))
    (args,) = seen
    assert args[-1] == 0 and type(args[-1]) is int and args[-2] == p._addr


class _FakeLibcuda:
    """libcuda as ctypes.CDLL opens it: entries by attribute and by item; every launch recorded as called."""

    def __init__(self, seen):
        self.seen = seen
        self.cuLaunchKernelEx = lambda cfg, *args: seen.append(("ex", cfg._obj, args)) or 0

    def __getitem__(self, name):
        return self.cuLaunchKernelEx if name == "cuLaunchKernelEx" else _FakeEntry(self.seen)


class _FakeEntry:
    restype = None

    def __init__(self, seen):
        self.seen = seen

    def __call__(self, *args):  # the types and the values at the call (a launch reuses its C values)
        self.seen.append(("plain", [type(a) for a in args], [getattr(a, "value", a) for a in args]))
        return 0


def _libcuda_entry(monkeypatch, seen):
    monkeypatch.setattr(launch, "_CU_LAUNCH", None)
    monkeypatch.setattr(launch, "_LIBCUDA", [])  # opened once: an earlier test may have found none here
    monkeypatch.setattr(ctypes, "CDLL", lambda name: _FakeLibcuda(seen))
    monkeypatch.setattr(launch, "stream_handle", lambda device: 0x7F0000005000)
    lk = _Loaded()
    lk.kernel = type("kernel", (), {"handle": 0x7F0000001234})
    return lk


def test_libcuda_entry_gets_c_values_only(monkeypatch):
    """libcuda's cuLaunchKernel is called without argtypes, so every argument must be a ctypes value of its C type:
    a Python int would go as a 32-bit int and cut the handle, the stream or the parameter block's address. A call
    sets the grid (rows() another) and the stream; `extra` is NULL (None)."""
    seen = []
    p = PreparedLaunch(_libcuda_entry(monkeypatch, seen), 3, (256, 2), (np.int64(5),), 4096, 3)
    p._go(p.dims[1], 9, (1, 2, 3))
    p._go(11, 4, (5, 6, 7))
    for (kind, types, values), grid in zip(seen, (3, 11)):
        assert kind == "plain" and types == [ctypes.c_void_p] + [ctypes.c_uint] * 7 + [ctypes.c_void_p] * 2 + [
            type(None)]
        assert values == [0x7F0000001234, grid, 1, 1, 256, 2, 1, 4096, 0x7F0000005000, p._addr, None]
    assert p._vals[0].value == 4 and list(p._ptrs) == [5, 6, 7]


def test_programmatic_launch_fills_cuLaunchKernelEx_config(monkeypatch):
    """pdl=True goes through cuLaunchKernelEx with CUlaunchConfig laid out as cuda.h has it (56 bytes: 7 dims,
    the stream at 32, the attributes at 40, their count at 48) and one CUlaunchAttribute (72 bytes: the id, then
    the value at 8) saying programmatic stream serialization (6) = 1; the grid of rows() reaches it."""
    assert ctypes.sizeof(launch._LaunchConfig) == 56 and launch._LaunchConfig.stream.offset == 32
    assert launch._LaunchConfig.attrs.offset == 40 and launch._LaunchConfig.num_attrs.offset == 48
    assert ctypes.sizeof(launch._LaunchAttribute) == 72 and launch._LaunchAttribute.value.offset == 8
    seen = []
    lk = _libcuda_entry(monkeypatch, seen)
    p = PreparedLaunch(lk, 1, (512,), (np.int64(5),), 2048, 3, pdl=True)
    p._go(77, 9, (1, 2, 3))
    (kind, c, (handle, params, extra)), = seen
    assert kind == "ex" and list(c.dims) == [77, 1, 1, 512, 1, 1, 2048] and c.stream == 0x7F0000005000
    assert (c.num_attrs, c.attrs[0].id, c.attrs[0].value[0]) == (1, 6, 1)
    assert handle.value == 0x7F0000001234 and params.value == p._addr and extra is None
    plain = PreparedLaunch(lk, 1, (512,), (np.int64(5),), 2048, 3)
    assert plain._launch is not p._launch and len(seen) == 1


@pytest.mark.parametrize("pdl", [False, True])
def test_cluster_launch_counts_blocks_and_sets_the_cluster_dimension(monkeypatch, pdl):
    """A cluster kernel's launch (the cluster regime's, 2-16 CTAs a cluster) is a PreparedLaunch too: its grid counts
    clusters, cuLaunchKernelEx gets blocks (clusters x cluster) and the cluster dimension attribute (4: {x, y, z}),
    beside PDL's when asked; the kernel is allowed the cluster size first. Without libcuda's cuLaunchKernelEx there
    is no plain fallback: a cluster kernel launched without clusters would compute wrong rows."""
    seen, allowed = [], []
    lk = _libcuda_entry(monkeypatch, seen)
    lk.allow_cluster = allowed.append
    p = PreparedLaunch(lk, 7, (256,), (np.int64(7),), 0, 3, pdl=pdl, cluster=16)
    assert allowed == [16]
    p._go(p.dims[1], 7, (1, 2, 3))
    (_, c, _), = seen
    assert list(c.dims) == [7 * 16, 1, 1, 256, 1, 1, 0]
    p._go(3, 3, (4, 5, 6))  # rows(): another grid, in clusters
    assert seen[1][1] is c and list(c.dims) == [3 * 16, 1, 1, 256, 1, 1, 0]  # the launch's one config, refilled
    attrs = [(c.attrs[i].id, tuple(c.attrs[i].value)) for i in range(c.num_attrs)]
    assert attrs == ([(6, (1, 0, 0))] if pdl else []) + [(4, (16, 1, 1))]
    monkeypatch.setattr(launch, "_libcuda_entry", lambda name: None)
    with pytest.raises(OnlineSoftmaxError, match="cuLaunchKernelEx"):
        PreparedLaunch(lk, 7, (256,), (np.int64(7),), 0, 3, cluster=2)


class _UnlockedDriverValues(PreparedLaunch):
    """Known wrong: sets the shared C values (pointers, grid, stream) and launches without the lock."""

    __slots__ = ()

    def _go(self, grid, first, ptrs) -> None:
        self._ptrs[:] = ptrs
        self._vals[0].value = first
        self._gx.value = grid
        self._stream.value = launch.stream_handle(self.device)
        self._launch(*self._args)


def _race_driver_values(cls, monkeypatch, threads=4, calls=3):
    """Threads share one prepared launch on libcuda's entry, each with its own stream, grid, row count and pointers;
    the fake entry reads what it was handed, sleeps (ctypes releases the GIL in the real call), and reads it again.
    Returns the launches that saw another thread's values."""
    seen, bad, tls = [], [], threading.local()
    lk = _libcuda_entry(monkeypatch, seen)
    monkeypatch.setattr(launch, "stream_handle", lambda device: tls.stream)
    monkeypatch.setattr(launch, "_current_device", lambda: 0)
    p = cls(lk, 1, (128,), (np.int64(5),), 0, 3)

    def entry(*args):
        block = (ctypes.c_void_p * 4).from_address(args[9].value)

        def read():
            return (args[1].value, args[8].value, tuple(ctypes.c_uint64.from_address(a).value for a in block[:3]),
                    ctypes.c_int64.from_address(block[3]).value)
        first = read()
        time.sleep(0.005)
        if first != tls.want or read() != tls.want:
            bad.append((tls.want, first))
        return 0
    p._launch = entry

    def worker(i):
        launch._state.bound = True
        tls.stream = 0x7F0000010000 + 0x100 * i
        for c in range(calls):
            tls.want = (10 + i, tls.stream, (1000 * i + c, 7, 1000 * i + c + 1), 100 * i + c)
            p.rows(10 + i, 100 * i + c, *tls.want[2])

    run_threads(worker, [(i + 1,) for i in range(threads)])
    return bad


def test_libcuda_entry_values_are_per_call(monkeypatch):
    """The grid, the stream and the row count live in C values shared by every call of a prepared launch, as the
    pointers do: each launch must see its own, from any number of threads."""
    assert _race_driver_values(PreparedLaunch, monkeypatch) == []


def test_race_check_catches_unlocked_driver_values(monkeypatch):
    assert _race_driver_values(_UnlockedDriverValues, monkeypatch) != []


def test_no_cluster_kernel_fits_without_cuLaunchKernelEx(monkeypatch):
    """Where libcuda's cuLaunchKernelEx cannot be opened, a cluster kernel has no launch: ShapedKernel says it does
    not fit (the plans then fall back to regimes without clusters, cross-entropy to its other path) without asking
    the driver for the cluster attribute or the occupancy; a kernel without clusters is unaffected."""
    from onlinesoftmax.engines.cuda import compiled as K

    asked = []
    lk = _Loaded()
    lk.allow_cluster = lambda c: asked.append(("allow", c))
    lk.max_active_clusters = lambda *a: asked.append(("occupancy",) + a) or 3
    monkeypatch.setattr(K, "module", lambda name, arch: None)
    monkeypatch.setattr(K, "_arch_of", lambda device: "sm_90")
    monkeypatch.setattr(launch, "kernel", lambda module, name, device: lk)
    monkeypatch.setattr(launch, "_libcuda_entry", lambda name: None)
    assert K.ShapedKernel("fwd_row<...>", 0, (512,), 0, 4).fits is False and asked == []
    assert K.ShapedKernel("fwd_row<...>", 0, (512,), 0, 1).fits is True
    monkeypatch.setattr(launch, "_libcuda_entry", lambda name: object())
    monkeypatch.setattr(launch, "_CU_LAUNCH", object())
    assert K.ShapedKernel("fwd_row<...>", 0, (512,), 0, 4).fits is True and ("allow", 4) in asked


def test_resident_ctas_from_the_occupancy_query(monkeypatch):
    """ShapedKernel.resident_ctas (the group regime's residency check, run._group_runs): the occupancy query's CTAs an
    SM for the launch's threads and dynamic shared memory, times the SMs, asked once on first use; None for a
    cluster kernel (its count is `resident`, in clusters) and where the query fails."""
    from onlinesoftmax.engines.cuda import compiled as K

    asked = []
    lk = _Loaded()
    lk.allow_cluster = lambda c: None
    lk.max_active_blocks = lambda threads, smem: asked.append((threads, smem)) or 2
    monkeypatch.setattr(K, "module", lambda name, arch: None)
    monkeypatch.setattr(K, "_arch_of", lambda device: "sm_90")
    monkeypatch.setattr(launch, "kernel", lambda module, name, device: lk)
    monkeypatch.setattr(launch, "on_device", lambda device, fn, *a: fn(*a))
    monkeypatch.setattr(launch, "sm_count", lambda device: 132)
    k = K.ShapedKernel("fwd_grp<...>", 0, (512,), 73728, 1)
    assert asked == [] and k.resident_ctas == 264 and k.resident_ctas == 264 and asked == [(512, 73728)]
    lk.max_active_blocks = lambda threads, smem: None
    assert K.ShapedKernel("fwd_grp<...>", 0, (512,), 0, 1).resident_ctas is None
    monkeypatch.setattr(launch, "_libcuda_entry", lambda name: object())
    monkeypatch.setattr(launch, "_CU_LAUNCH", object())
    lk.max_active_clusters = lambda *a: 3
    assert K.ShapedKernel("fwd_row<...>", 0, (512,), 0, 4).resident_ctas is None

"""Loading compiled kernels (through `cuda.core`) and launching them on torch's current stream: the production
engines' launches through libcuda's cuLaunchKernel / cuLaunchKernelEx with parameter blocks built once
(PreparedLaunch), the ladder's through cuda.core's launch (LoadedKernel.launch).

    k = kernel(mod, "online_v3<4>", device=x.device.index)   # loads the cubin once per device
    k.launch(grid, block, (x.data_ptr(), y.data_ptr(), np.int32(M), np.int32(N)))

Argument convention (cuda.core's): a Python int is passed as a pointer (intptr_t) -- use
`tensor.data_ptr()` for pointers and np.int32 / np.int64 / np.float32 for scalars, matching
the kernel signature exactly.

Every driver call of the package is here: loading kernels, their attributes, occupancy queries,
launches (with and without clusters). Importing this module, compiling and inspecting work without
a GPU. No GPU or no driver
raises `errors.Unavailable`; a failed launch raises `errors.OnlineSoftmaxError` naming the kernel.
Asynchronous faults (illegal address, ...) surface at the next synchronisation, as with any
CUDA launch.

Threads. Every launch is safe from any number of threads and streams at once: it goes to the
calling thread's current torch stream of the kernel's device, with that device's primary context
current (under torch's device guard when torch's current device is another one; a thread's first
launch binds it to a context, since a fresh thread may have none). The only state shared between
calls is read-only after it is built (loaded kernels, launch configs) or a PreparedLaunch's
parameter block and its driver arguments (grid, stream; the cuLaunchKernelEx config), which are filled and launched
under its lock (the driver copies them at the call).
The stream caches are bounded.
"""

from __future__ import annotations

import ctypes
import threading
from typing import Optional, Sequence

import numpy as np

from ..errors import OnlineSoftmaxError, Unavailable
from ..install import pip_line
from .bounded import BoundedCache
from .nvrtc import CompiledModule

PORTABLE_CLUSTER = 8  # larger clusters need the non-portable-cluster attribute

_state = threading.local()  # per thread: .bound = a launch from this thread has made a primary context current
_device_lock = threading.Lock()
_devices: dict[int, object] = {}  # index -> cuda.core Device
_streams = BoundedCache(256)  # raw stream handle -> cuda.core Stream
_cu_streams = BoundedCache(256)  # raw stream handle -> driver.CUstream
_sm_counts: dict[int, int] = {}
_cc_launch = None  # cuda.core.launch (LoadedKernel.launch), imported on its first call
try:  # the raw cudaStream_t of torch's current stream without building a torch.cuda.Stream (inductor uses it)
    from torch._C import _cuda_getCurrentRawStream as _raw_stream
except ImportError:  # CPU-only torch builds, or a future torch without it
    _raw_stream = None
try:  # torch's current device (cudaGetDevice) without torch.cuda's lazy-init check
    from torch._C import _cuda_getDevice as _current_device
except ImportError:
    _current_device = None


def available() -> Optional[str]:
    """None if kernels can be launched here (torch sees a GPU and cuda.core imports), else why not."""
    try:
        import torch
    except Exception as e:  # pragma: no cover - torch is a dependency
        return f"torch is not importable: {e}"
    if not torch.cuda.is_available():
        return "no CUDA GPU visible to torch (torch.cuda.is_available() is False)"
    try:
        import cuda.core  # noqa: F401
        from cuda.core import Device, LaunchConfig, Stream, launch  # noqa: F401
    except Exception as e:
        return f"cuda.core is not importable ({type(e).__name__}: {e}); install it with {pip_line('cuda')}"
    return None


def ensure_device(index: Optional[int] = None):
    """The cuda.core Device for torch device `index` (torch's current device if None), its primary
    context made current on the calling thread (torch and cuda.core share it)."""
    reason = available()
    if reason:
        raise Unavailable(reason)
    import torch

    if index is None:
        index = torch.cuda.current_device()
    try:
        from cuda.core import Device

        with _device_lock:
            dev = _devices.get(index)
            if dev is None:
                torch.cuda.init()  # torch creates/retains the primary context first
                dev = _devices[index] = Device(index)
        dev.set_current()
    except Exception as e:
        raise Unavailable(f"cannot use CUDA device {index} through cuda.core ({type(e).__name__}: {e})") from None
    _state.bound = True
    return dev


def on_device(device: int, fn, *args):
    """fn(*args) -- a launch on `device` -- with that device's primary context current on this thread. The hot
    path is one check: this thread is bound and torch's current device is `device` (torch switches the primary
    context with its device, so the two agree). Else: bind the thread once, and run under torch's device guard
    when torch's current device is another one."""
    if getattr(_state, "bound", False) and _current_device() == device:
        return fn(*args)
    import torch

    if not getattr(_state, "bound", False):
        ensure_device(torch.cuda.current_device())
    if torch.cuda.current_device() == device:
        return fn(*args)
    with torch.cuda.device(device):
        return fn(*args)


def sm_count(index: Optional[int] = None) -> int:
    """Multiprocessor count of torch device `index` (cached)."""
    import torch

    if index is None:
        index = torch.cuda.current_device()
    n = _sm_counts.get(index)
    if n is None:
        if not torch.cuda.is_available():
            raise Unavailable("no CUDA GPU visible to torch")
        n = _sm_counts[index] = int(torch.cuda.get_device_properties(index).multi_processor_count)
    return n


def stream_handle(index: int) -> int:
    """The raw cudaStream_t of torch's current stream on device `index`."""
    if _raw_stream is not None:
        return int(_raw_stream(index))
    import torch

    return int(torch.cuda.current_stream(index).cuda_stream)


def host_mapped(device: int, ptr: int) -> bool:
    """Whether kernels on `device` address the pinned host memory at `ptr` by that same address (unified addressing:
    memory from cudaHostAlloc, as torch's pinned tensors are; not so for memory registered without mapping)."""
    from cuda.bindings import driver

    def query():
        err, dptr = driver.cuPointerGetAttribute(
            driver.CUpointer_attribute.CU_POINTER_ATTRIBUTE_DEVICE_POINTER, ptr)
        return err == driver.CUresult.CUDA_SUCCESS and int(dptr) == ptr
    return on_device(device, query)


def current_stream(index: Optional[int] = None):
    """torch's current stream on device `index` as a cuda.core Stream (cached per handle)."""
    import torch

    if index is None:
        index = torch.cuda.current_device()
    handle = stream_handle(index)
    s = _streams.get(handle)
    if s is None:
        s = _streams.get_or_make(handle, lambda: _wrap_stream(handle))
    return s


def _wrap_stream(handle: int):
    from cuda.core import Stream

    try:
        return Stream.from_handle(handle)
    except Exception as e:
        raise OnlineSoftmaxError(f"cannot wrap torch stream {handle:#x} for cuda.core: {e}") from None


def _cu_stream(handle: int):
    s = _cu_streams.get(handle)
    if s is None:
        from cuda.bindings import driver

        s = _cu_streams.get_or_make(handle, lambda: driver.CUstream(handle))
    return s


def set_max_dynamic_smem(kern, nbytes: int, device_index: int) -> None:
    """Allow `nbytes` of dynamic shared memory for `kern` (a cuda.core Kernel) on a device; needed once dynamic +
    static smem pass 48 KiB. Uses cuKernelSetAttribute (cuda.core 1.x kernels are CUkernel handles)."""
    from cuda.bindings import driver

    attr = driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
    (err,) = driver.cuKernelSetAttribute(attr, int(nbytes), kern.handle, driver.CUdevice(device_index))
    if err != driver.CUresult.CUDA_SUCCESS:
        raise OnlineSoftmaxError(f"cuKernelSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES={nbytes}) failed: {err}")


class LoadedKernel:
    """One kernel of a compiled module on one device, with its launch configs cached (bounded)."""

    __slots__ = ("name", "module", "device", "kernel", "_configs", "_smem_ok", "_cluster_ok", "_lock")

    def __init__(self, module: CompiledModule, name: str, device: int):
        self.name, self.module, self.device = name, module, device
        try:
            self.kernel = module.object_code().get_kernel(name)
        except Exception as e:
            raise OnlineSoftmaxError(
                f"cannot load kernel {name} from {module.filename} ({module.arch}) on device {device}: "
                f"{type(e).__name__}: {e}"
            ) from None
        self._configs = BoundedCache(64)
        self._smem_ok = 0
        self._cluster_ok = PORTABLE_CLUSTER
        self._lock = threading.Lock()

    def allow_smem(self, smem: int) -> None:
        """Raise the kernel's dynamic shared memory limit to at least `smem` bytes: for any dynamic smem, since
        without the attribute the limit is 48 KiB less the kernel's static smem (a cluster row kernel with 48 KiB of slots
        beside its reduction arrays could not be resident, so its plan fell back to the split regime, at a third of
        the speed)."""
        if smem > self._smem_ok:
            with self._lock:
                if smem > self._smem_ok:
                    set_max_dynamic_smem(self.kernel, smem, self.device)
                    self._smem_ok = smem

    def allow_cluster(self, cluster: int) -> None:
        """Allow clusters of `cluster` CTAs (above the portable 8 the kernel needs an attribute; set once)."""
        if cluster > self._cluster_ok:
            from cuda.bindings import driver

            with self._lock:
                attr = driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED
                (err,) = driver.cuKernelSetAttribute(attr, 1, self.kernel.handle, driver.CUdevice(self.device))
                if err != driver.CUresult.CUDA_SUCCESS:
                    raise OnlineSoftmaxError(f"{self.name}: cuKernelSetAttribute(NON_PORTABLE_CLUSTER_SIZE_ALLOWED) "
                                             f"failed: {err}")
                self._cluster_ok = max(self._cluster_ok, cluster)

    def cluster_config(self, grid: int, block, cluster: int, smem: int = 0):
        """cuda.core's LaunchConfig for `grid` clusters of `cluster` CTAs (max_active_clusters asks with one; launches
        go through PreparedLaunch). cuda.core 1.2 counts a cluster launch's grid in clusters; an older one passes it
        through as blocks (checked on the driver struct it builds)."""
        from cuda.core import LaunchConfig

        opts = dict(cluster=cluster, block=block, shmem_size=smem)
        cfg = LaunchConfig(grid=grid, **opts)
        if _grid_counts_blocks(cfg, grid):
            cfg = LaunchConfig(grid=grid * cluster, **opts)
        return cfg

    def max_active_clusters(self, block, cluster: int, smem: int = 0) -> Optional[int]:
        """How many clusters of this shape can be resident at once (cuOccupancyMaxActiveClusters through
        cuda.core); None when the query is not available."""
        try:
            cfg = self.cluster_config(1, block, cluster, smem)
            return int(self.kernel.occupancy.max_active_clusters(cfg, stream=current_stream(self.device)))
        except Exception:
            return None

    def max_active_blocks(self, threads: int, smem: int = 0) -> Optional[int]:
        """How many CTAs of `threads` threads with `smem` bytes of dynamic shared memory an SM holds at once
        (cuOccupancyMaxActiveBlocksPerMultiprocessor through cuda.core); None when the query is not available."""
        try:
            return int(self.kernel.occupancy.max_active_blocks_per_multiprocessor(threads, smem))
        except Exception:
            return None

    def config(self, grid, block, smem: int = 0):
        key = (grid, block, smem)
        cfg = self._configs.get(key)
        if cfg is None:
            from cuda.core import LaunchConfig

            self.allow_smem(smem)
            cfg = self._configs.get_or_make(key, lambda: LaunchConfig(grid=grid, block=block, shmem_size=smem))
        return cfg

    def launch(self, grid, block, args: Sequence, smem: int = 0, stream=None) -> None:
        """Launch on `stream` (a cuda.core Stream; torch's current stream by default)."""
        on_device(self.device, self._launch, grid, block, args, smem, stream)

    def _launch(self, grid, block, args: Sequence, smem: int, stream) -> None:
        global _cc_launch
        if _cc_launch is None:
            from cuda.core import launch as _cc_launch
        s = stream if stream is not None else current_stream(self.device)
        try:
            cfg = self.config(grid, block, smem)
            _cc_launch(s, cfg, self.kernel, *args)
        except OnlineSoftmaxError:
            raise
        except Exception as e:
            raise OnlineSoftmaxError(
                f"launch of {self.name} ({self.module.filename}, grid={grid}, block={block}, smem={smem}) "
                f"failed: {type(e).__name__}: {e}"
            ) from None


_LIBCUDA: list = []  # [libcuda through ctypes, or None where it cannot be opened by name], once tried
_CU_LAUNCH = None  # libcuda's cuLaunchKernel through ctypes (False: not loadable so)


def _libcuda():
    """libcuda.so.1 through ctypes (opened once), or None."""
    if not _LIBCUDA:
        try:
            _LIBCUDA.append(ctypes.CDLL("libcuda.so.1"))
        except OSError:
            _LIBCUDA.append(None)
    return _LIBCUDA[0]


_CONTEXTS: dict = {}  # device index -> its primary context (CUcontext as an int)


def _libcuda_entry(name: str):
    """libcuda's function `name` through ctypes as a function object of its own (the by-attribute one is shared:
    its restype and argtypes would be every caller's), or None."""
    lib = _libcuda()
    try:
        return lib[name] if lib is not None else None
    except AttributeError:
        return None


def ctx_current_entry():
    """libcuda's cuCtxGetCurrent through ctypes, or None."""
    return _libcuda_entry("cuCtxGetCurrent")


def context(device: int) -> Optional[int]:
    """The primary context of `device` (what a launch's thread must have current), as an int; None where libcuda
    is not reached through ctypes."""
    ctx = _CONTEXTS.get(device)
    if ctx is None:
        get = ctx_current_entry()
        if get is None:
            return None

        def current() -> int:
            c = ctypes.c_void_p()
            return c.value if get(ctypes.byref(c)) == 0 else 0
        ctx = _CONTEXTS[device] = on_device(device, current)
    return ctx


def cu_launch_address() -> Optional[int]:
    """The address of libcuda's cuLaunchKernel where it is reached through ctypes (what native.cpp calls), else
    None."""
    f, plain = _driver_launch()
    return ctypes.cast(f, ctypes.c_void_p).value if plain else None


def _driver_launch():
    """(cuLaunchKernel, takes C values): libcuda's through ctypes with no argtypes, called with prebuilt ctypes
    values only (a plain C call: nothing converted per call, ~0.8 us against ~1.5 us with argtypes), or
    cuda.bindings' (which converts every argument to its wrapper types) where libcuda cannot be opened by name."""
    global _CU_LAUNCH
    if _CU_LAUNCH is None:
        f = _libcuda_entry("cuLaunchKernel")
        if f is not None:
            f.restype = ctypes.c_int
        _CU_LAUNCH = f or False
    if _CU_LAUNCH:
        return _CU_LAUNCH, True
    from cuda.bindings import driver

    return (lambda *args: driver.cuLaunchKernel(*args)[0]), False


class _LaunchAttribute(ctypes.Structure):  # CUlaunchAttribute: an id, then a 64-byte value union at offset 8
    _fields_ = [("id", ctypes.c_int), ("pad", ctypes.c_char * 4), ("value", ctypes.c_uint * 3), ("rest", ctypes.c_char * 52)]


class _LaunchConfig(ctypes.Structure):  # CUlaunchConfig
    _fields_ = [("dims", ctypes.c_uint * 7), ("stream", ctypes.c_void_p), ("attrs", ctypes.POINTER(_LaunchAttribute)),
                ("num_attrs", ctypes.c_uint)]


_COOPERATIVE = 2  # CU_LAUNCH_ATTRIBUTE_COOPERATIVE: value 1
_CLUSTER_DIMENSION = 4  # CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION: value {x, y, z} CTAs
_PROGRAMMATIC_STREAM_SERIALIZATION = 6  # CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION: value 1


def _launch_ex(pdl: bool, cluster: int, coop: bool = False):
    """A cuLaunchKernel-shaped entry taking C values, as _driver_launch's, that launches through libcuda's
    cuLaunchKernelEx (ctypes) with programmatic stream serialization (pdl), clusters of `cluster` CTAs along x
    (> 1) and as a cooperative launch (coop: every CTA resident at once, or the launch fails), or None where that
    cannot be opened. Its config is its own: one per PreparedLaunch, filled under that launch's lock."""
    ex = _libcuda_entry("cuLaunchKernelEx")
    if ex is None:
        return None
    ex.argtypes = [ctypes.POINTER(_LaunchConfig), ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
    ex.restype = ctypes.c_int
    attrs = (_LaunchAttribute * 3)()
    n = 0
    for on, id_, value in ((pdl, _PROGRAMMATIC_STREAM_SERIALIZATION, (1, 0, 0)),
                           (cluster > 1, _CLUSTER_DIMENSION, (cluster, 1, 1)), (coop, _COOPERATIVE, (1, 0, 0))):
        if on:
            attrs[n].id, attrs[n].value[:] = id_, value
            n += 1
    cfg = _LaunchConfig(attrs=ctypes.cast(attrs, ctypes.POINTER(_LaunchAttribute)), num_attrs=n)
    cfg_ref = ctypes.byref(cfg)

    def launch(handle, gx, gy, gz, bx, by, bz, smem, stream, params, extra):  # called under its launch's lock
        cfg.dims[:] = (gx.value, gy.value, gz.value, bx.value, by.value, bz.value, smem.value)
        cfg.stream = stream.value
        return ex(cfg_ref, handle, params, extra)
    launch.keep = attrs  # the attributes the config points to live as long as the entry
    return launch


def cluster_launches() -> bool:
    """Whether cluster kernels can be launched here: through libcuda's cuLaunchKernelEx, opened by ctypes (where it
    cannot be, the plans fall back to regimes without clusters: compiled.ShapedKernel.fits)."""
    return _driver_launch()[1] and _libcuda_entry("cuLaunchKernelEx") is not None


_MEMSET = []  # [libcuda's cuMemsetD32Async through ctypes, or None], once tried


def memset32(device: int, ptr: int, value: int, count: int) -> None:
    """`count` 32-bit words at device pointer ptr set to `value` on torch's current stream of `device`
    (cuMemsetD32Async, in the device's context: a memset node when the stream is captured)."""
    on_device(device, _memset32, device, ptr, value, count)


def _memset32(device: int, ptr: int, value: int, count: int) -> None:
    if not _MEMSET:
        f = _libcuda_entry("cuMemsetD32Async")
        if f is not None:
            f.argtypes = [ctypes.c_uint64, ctypes.c_uint, ctypes.c_size_t, ctypes.c_void_p]
            f.restype = ctypes.c_int
        _MEMSET.append(f)
    s = stream_handle(device)
    if _MEMSET[0] is not None:
        err = _MEMSET[0](ptr, value, count, s)
    else:
        from cuda.bindings import driver

        (err,) = driver.cuMemsetD32Async(ptr, value, count, _cu_stream(s))
    if err != 0:
        raise OnlineSoftmaxError(f"cuMemsetD32Async({count} words) failed: {err}")


class PreparedLaunch:
    """One launch of a LoadedKernel with everything but its leading pointer arguments fixed, straight through
    cuLaunchKernel with a parameter block built once: the eager hot path (cuda.core's launch packs every argument
    on each call, ~7 us on the H200). `tail`: the scalar arguments after the pointers, np.int32 / np.int64 /
    np.float32 exactly as the kernel signature. Call it with the pointers (ints); it launches on torch's current
    stream. rows(grid, first, *pointers) launches with another x-grid and first scalar (a row count), so one
    prepared launch serves every row count of a geometry. `pdl`: launched with programmatic stream serialization
    (cuLaunchKernelEx), so that it may start while the kernel before it runs (the kernel waits with os_grid_wait
    for what that one writes); a plain launch where libcuda is not reached through ctypes. `cluster` > 1: the grid
    counts clusters of that many CTAs along x, launched through cuLaunchKernelEx with the cluster dimension (there
    is no plain launch of a cluster kernel: without libcuda through ctypes it raises). `coop`: a cooperative launch
    (the period kernels' grid barriers: every CTA resident at once, or the launch fails), as a cluster's.

    Through libcuda's ctypes entry every driver argument is a C value built here (`_args`); a call only sets the
    x-grid and the stream in them. Through cuda.bindings (`_args` None) they go as Python values."""

    __slots__ = ("lk", "device", "dims", "cluster", "_first", "_ptrs", "_vals", "_params", "_addr", "_lock", "_launch",
                 "_args", "_gx", "_stream")

    def __init__(self, lk: LoadedKernel, grid, block, tail: Sequence, smem: int = 0, npointers: int = 3,
                 pdl: bool = False, cluster: int = 1, coop: bool = False):
        lk.allow_smem(smem)
        g = (grid,) if isinstance(grid, int) else tuple(grid)
        b = (block,) if isinstance(block, int) else tuple(block)
        self.lk, self.device, self.cluster = lk, lk.device, cluster
        self._launch, raw = _driver_launch()
        ex = _launch_ex(pdl, cluster, coop) if raw and (pdl or cluster > 1 or coop) else None
        if (cluster > 1 or coop) and ex is None:
            raise Unavailable(f"{lk.name}: a cluster or cooperative launch goes through libcuda's cuLaunchKernelEx, "
                              "which ctypes cannot open here (libcuda.so.1)")
        if cluster > 1:
            lk.allow_cluster(cluster)
        self._launch = ex or self._launch
        handle = int(lk.kernel.handle) if raw else lk.kernel.handle  # a CUkernel serves as a CUfunction
        self.dims = (handle,) + (g + (1, 1))[:3] + (b + (1, 1))[:3] + (smem,)
        self._ptrs = (ctypes.c_uint64 * npointers)()
        kinds = {np.dtype(np.int64): (ctypes.c_int64, int), np.dtype(np.int32): (ctypes.c_int32, int),
                 np.dtype(np.float32): (ctypes.c_float, float)}
        self._vals = []
        try:
            for v in tail:
                ctype, conv = kinds[np.asarray(v).dtype]
                self._vals.append(ctype(conv(v)))
        except KeyError:
            raise OnlineSoftmaxError(f"{lk.name}: prepared launches take np.int32 / np.int64 / np.float32 "
                                     "scalars") from None
        addrs = [ctypes.addressof(self._ptrs) + 8 * i for i in range(npointers)]
        addrs += [ctypes.addressof(v) for v in self._vals]
        self._first = int(tail[0]) if len(tail) else None
        self._params = (ctypes.c_void_p * len(addrs))(*addrs)
        self._addr = ctypes.addressof(self._params)
        self._gx = ctypes.c_uint(self.dims[1])
        self._stream = ctypes.c_void_p(0)
        self._args = None
        if raw:
            self._args = ((ctypes.c_void_p(handle), self._gx) + tuple(ctypes.c_uint(d) for d in self.dims[2:])
                          + (self._stream, ctypes.c_void_p(self._addr), None))
        self._lock = threading.Lock()  # the block is shared: fill and launch as one step

    def __call__(self, *ptrs: int) -> None:
        if getattr(_state, "bound", False) and _current_device() == self.device:
            self._go(self.dims[1], self._first, ptrs)
        else:
            on_device(self.device, self._go, self.dims[1], self._first, ptrs)

    def rows(self, grid: int, first: int, *ptrs: int) -> None:
        if getattr(_state, "bound", False) and _current_device() == self.device:
            self._go(grid, first, ptrs)
        else:
            on_device(self.device, self._go, grid, first, ptrs)

    def native_put(self, mod, op: int, a, b, grid: int, rows: int, owner):
        """Put this launch, with the grid and row count of one shape, into runtime/native.cpp's table for the shape
        of the tensors a (and b: dy, or None), owned by `owner` (its key there for mod.remove; None where it is not
        put). Only a launch through libcuda's plain cuLaunchKernel (not cuda.bindings' entry; not a programmatic or a
        cluster launch, which go through cuLaunchKernelEx) of the shape native.cpp launches: three pointers, a row
        count first, a 1-D grid, a 2-D block."""
        d = self.dims
        if (self._args is None or self._launch is not _CU_LAUNCH or len(self._ptrs) != 3 or not self._vals
                or not isinstance(self._vals[0], ctypes.c_int64) or d[2] != 1 or d[3] != 1 or d[6] != 1):
            return None
        ctx = context(self.device)
        if not ctx:
            return None
        fn = ctypes.cast(self._launch, ctypes.c_void_p).value
        scalars = [bytes(ctypes.c_int64(rows))] + [bytes(v) for v in self._vals[1:]]
        return mod.put(op, 0, a, b, True, fn, ctx, d[0], grid, d[4], d[5], d[7], scalars, owner)

    def _go(self, grid, first, ptrs) -> None:
        s = stream_handle(self.device)
        with self._lock:
            self._ptrs[:] = ptrs
            if first is not None:
                self._vals[0].value = first
            if self._args is not None:
                self._gx.value = grid * self.cluster
                self._stream.value = s
                err = self._launch(*self._args)
            else:  # extra: 0, not None (cuda.bindings takes an int)
                err = self._launch(self.dims[0], grid, *self.dims[2:], _cu_stream(s), self._addr, 0)
        if err != 0:  # CUDA_SUCCESS
            raise OnlineSoftmaxError(f"launch of {self.lk.name} ({self.lk.module.filename}, "
                                     f"dims={(grid,) + self.dims[2:]}, cluster={self.cluster}) failed: {err}")


def _grid_counts_blocks(cfg, grid: int) -> bool:
    """True if this cuda.core passes a cluster launch's grid through as blocks (gridDimX == grid); False if it
    counts clusters, as 1.2 does, or if that cannot be read."""
    try:
        from cuda.core._launch_config import _to_native_launch_config

        return int(_to_native_launch_config(cfg).gridDimX) == grid
    except Exception:
        return False


_kernels: dict = {}  # (module key, name, device) -> LoadedKernel: bounded by the kernels compiled
_kernels_lock = threading.Lock()


def kernel(module: CompiledModule, name: str, device: Optional[int] = None) -> LoadedKernel:
    """The LoadedKernel for `name` in `module` on torch device `device` (loaded once, cached).
    Raises Unavailable without a GPU; nothing is loaded before the first call for a device."""
    if device is None:
        import torch

        if not torch.cuda.is_available():
            raise Unavailable(available() or "no CUDA GPU")
        device = torch.cuda.current_device()
    key = (module.key, name, device)
    k = _kernels.get(key)
    if k is None:
        with _kernels_lock:
            k = _kernels.get(key)
            if k is None:
                k = _kernels[key] = on_device(device, LoadedKernel, module, name, device)
    return k

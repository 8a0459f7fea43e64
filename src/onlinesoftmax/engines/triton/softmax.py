"""The Triton softmax engine's launchers: softmax / log_softmax, forward and backward, on 2-D
tensors (M, N) with column stride 1 and any row stride, in fp32, fp16 or bf16, into a
preallocated `out`.

A call asks rules.py for a regime and its configuration (`plan`), launches the regime's kernel of
softmax_kernels.py with the op as compile-time flags (BACKWARD, LOG), and learns from the compiled
kernel how many of its programs an SM holds, for the next persistent grid. A shape launched before is
launched again as Triton last launched it, without the plan or Triton's binder (`_Ready`).

Import this module only after TRITON_INTERPRET is set (if it is to be set): it imports the kernels.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, replace
from typing import Optional

import torch
import triton
from triton import knobs
from triton.compiler.compiler import CompiledKernel
from triton.runtime.driver import driver

from ...errors import OnlineSoftmaxError
from ...intmath import cdiv
from ...runtime import native
from ...runtime.bounded import BoundedCache
from ...runtime.launch import context, cu_launch_address
from . import softmax_rules as rules
from .softmax_rules import pick_regime
from .softmax_kernels import cols_kernel, cols_stream_kernel, interpreting, online_kernel, rows_kernel, split_kernel

_SMS: dict = {}


def sm_count(device: torch.device) -> int:
    """The device's SM count (cached), or the H200's 132 for CPU tensors in the interpreter."""
    if device.type != "cuda":
        return rules.INTERPRETER_SMS
    index = device.index if device.index is not None else torch.cuda.current_device()
    if index not in _SMS:
        _SMS[index] = torch.cuda.get_device_properties(index).multi_processor_count
    return _SMS[index]


# Programs per SM of each compiled configuration, learnt from its first launch (registers, shared
# memory, threads); before that, rules.estimated_occupancy. benchmarks/tune_triton.py clears it.
OCCUPANCY: dict = {}


def _learn_occupancy(key, compiled, num_warps: int, device: torch.device) -> None:
    if key is None or key in OCCUPANCY or compiled is None or device.type != "cuda":
        return
    try:
        props = torch.cuda.get_device_properties(device)
        regs = getattr(props, "regs_per_multiprocessor", 65536)
        smem = getattr(props, "shared_memory_per_multiprocessor", 228 * 1024)
        threads = getattr(props, "max_threads_per_multi_processor", 2048)
        n_regs = int(compiled.n_regs)
        shared = int(compiled.metadata.shared)
    except Exception:  # noqa: BLE001 - occupancy is a performance hint only
        return
    OCCUPANCY[key] = rules.occupancy(n_regs, shared, num_warps, regs, smem, threads)


def _programs(key, num_warps: int, sms: int, tasks: int) -> int:
    return rules.persistent_programs(OCCUPANCY.get(key, rules.estimated_occupancy(num_warps)), sms, tasks)


_UNPIPELINED: set = set()  # configurations whose pipelined build did not fit: launch with 1 stage


def _launch(kernel, grid, args, meta, key, device):
    """Launch, retrying without software pipelining if the pipelined kernel does not fit. Returns the compiled
    kernel that ran (None in the interpreter) and the meta-parameters it ran with."""
    pipelined = meta.get("num_stages", 1) > 1 or meta.get("NUM_STAGES", 1) > 1
    if pipelined and key in _UNPIPELINED:
        meta = {**meta, "num_stages": 1, **({"NUM_STAGES": 1} if "NUM_STAGES" in meta else {})}
    try:
        compiled = kernel[grid](*args, **meta)
    except triton.runtime.OutOfResources:
        if not pipelined or key is None or key in _UNPIPELINED:
            raise
        _UNPIPELINED.add(key)
        return _launch(kernel, grid, args, meta, key, device)
    _learn_occupancy(key, compiled, meta["num_warps"], device)
    return compiled, meta


def _check_2d(name: str, t: torch.Tensor, shape=None) -> None:
    if t.dim() != 2:
        raise OnlineSoftmaxError(f"{name} must be 2-D (M, N), got shape {tuple(t.shape)}")
    if shape is not None and tuple(t.shape) != tuple(shape):
        raise OnlineSoftmaxError(f"{name} has shape {tuple(t.shape)}, expected {tuple(shape)}")
    if t.shape[1] > 1 and t.stride(1) != 1:
        raise OnlineSoftmaxError(f"{name} must have column stride 1, got strides {t.stride()}")


@dataclass
class Plan:
    """One launch: kernel, grid, arguments and meta-parameters (and the occupancy-cache key)."""

    kernel: object
    grid: tuple
    args: tuple
    meta: dict
    key: object
    config: object
    tail: Optional["Plan"] = None  # a second launch: the rows kernel's last row, where its window would pass the end


def plan(backward: bool, log: bool, regime: str, M: int, N: int, dtype: torch.dtype, sms: int,
         tensors: tuple, strides: tuple, workspace) -> Optional[Plan]:
    """The launch of `regime` for an (M, N) problem, None if it is empty. tensors: (x, out) or
    (y, dy, out), or their dtypes for a warmup compile; strides: their row strides;
    workspace(n, dtype, zero) -> a buffer (or its dtype). Raises OnlineSoftmaxError for what
    rules.unsupported refuses, empty or not."""
    reason = rules.unsupported(regime, N, dtype, backward)
    if reason:
        raise OnlineSoftmaxError(reason)
    if M == 0 or N == 0:
        return None
    if not backward:  # the kernels take (in, dy, out) and their row strides: no dy forward
        tensors, strides = (tensors[0], None, tensors[1]), (strides[0], None, strides[1])
    op = dict(BACKWARD=backward, LOG=log)
    aligned = all(t.data_ptr() % 16 == 0 for t in tensors if isinstance(t, torch.Tensor))  # warmup: dtypes
    if regime == "rows":
        unit = rules.rows_unit(N, strides, dtype.itemsize, aligned)
        if unit > 1:  # whole vectors, told so
            return _rows_plan(op, M, N, dtype, sms, tensors, strides, 1, False, unit)
        v = rules.rows_window(N, strides, dtype.itemsize, aligned)
        tail = ((M - 1) * strides[0] + N) % v != 0  # the last row's window would pass the tensor's end
        if tail and not rules.rows_window_tail(M, N, dtype.itemsize):
            v = 1
        if v == 1:
            return _rows_plan(op, M, N, dtype, sms, tensors, strides, 1, rules.rows_scalar(N, strides, aligned))
        if not tail:  # the last row's window ends where the row does
            return _rows_plan(op, M, N, dtype, sms, tensors, strides, v, False)
        last = _rows_plan(op, 1, N, dtype, sms, tuple(t[M - 1:] if isinstance(t, torch.Tensor) else t
                                                      for t in tensors), strides, 1, True)
        return replace(_rows_plan(op, M - 1, N, dtype, sms, tensors, strides, v, False), tail=last) if M > 1 else last
    if regime == "online":
        cfg = rules.online_config(N, dtype, backward)
        v = rules.chunk_window(N, strides, dtype.itemsize, aligned, cfg.CHUNK)
        key = ("online", backward, cfg, log, dtype, v)
        grid = (min(M, rules.online_programs(sms)),)
        return Plan(online_kernel, grid, (*tensors, M, N, *strides),
                    dict(CHUNK=cfg.CHUNK, **op, NUM_STAGES=cfg.num_stages, V=v,
                         num_warps=cfg.num_warps, num_stages=cfg.num_stages), key, cfg)
    v = rules.chunk_window(N, strides, dtype.itemsize, aligned)
    cfg = rules.split_config(M, N, sms, dtype.itemsize, backward, v)
    programs = min(rules.split_programs(sms), 2 * M * cfg.C)  # never more than the tickets
    lag = rules.split_lag(cfg.C, M, programs)
    ws = workspace(2 * M * cfg.C, torch.float32, False)
    sync = workspace(M + 1, torch.int32, True)
    return Plan(split_kernel, (programs,), (*tensors, ws, sync, M, N, *strides, cfg.C, lag),
                dict(CHUNK=cfg.CHUNK, PBLOCK=cfg.PBLOCK, **op, V=v, num_warps=cfg.num_warps, num_stages=1), None,
                cfg)


def _rows_plan(op: dict, M: int, N: int, dtype: torch.dtype, sms: int, tensors: tuple, strides: tuple, v: int,
               scalar: bool, unit: int = 1) -> Plan:
    """The rows kernel over M rows, through windows of v elements (rules.rows_window; 1: none), or told that N and the
    strides are multiples of `unit` (rules.rows_unit; 1: nothing told)."""
    cfg = rules.rows_config(M, N, dtype, op["BACKWARD"], scalar, v, op["LOG"])
    key = ("rows", op["BACKWARD"], cfg, op["LOG"], dtype, v, unit)
    tiles = cdiv(M, cfg.BLOCK_M)
    grid = (_programs(key, cfg.num_warps, sms, tiles) if rules.rows_persistent() else tiles,)
    return Plan(rows_kernel, grid, (*tensors, M, N, *strides),
                dict(BLOCK_M=cfg.BLOCK_M, BLOCK_N=cfg.BLOCK_N, **op, NUM_STAGES=cfg.num_stages, V=v, TAIL=cfg.TAIL,
                     UNIT=unit, num_warps=cfg.num_warps, num_stages=cfg.num_stages), key, cfg)


def _run(backward: bool, log: bool, regime: Optional[str], tensors: tuple) -> None:
    out = tensors[-1]
    M, N = out.shape
    strides = tuple([t.stride(0) for t in tensors])
    shape = (backward, log, regime, M, N, out.dtype, out.get_device(), strides,
             tuple([t.data_ptr() & 15 for t in tensors]))
    ready = _READY.get(shape)
    if ready is not None and ready.holds():
        device = driver.active.get_current_device()
        if device == shape[6]:
            ready.launch(tensors if backward else (tensors[0], None, tensors[1]), device)
            return
    sms = sm_count(out.device)
    regime = regime or pick_regime(M, N, out.dtype, backward, sms, log)
    fresh = []

    def workspace(n, dtype, zero):
        fresh.append(((torch.zeros if zero else torch.empty)(n, dtype=dtype, device=out.device), zero))
        return fresh[-1][0]

    # made ready at a shape's second plan: a shape seen once (a new M each call) pays no more
    again = _SEEN.get(shape) is not None
    if not again:
        _SEEN.put(shape, True)
    settings = _settings() if again else None
    p = plan(backward, log, regime, M, N, out.dtype, sms, tensors, strides, workspace)
    # one launch whose grid is the one later calls would get (its occupancy learnt); a plan with a tail is two
    keep = again and p is not None and p.tail is None and (p.key is None or p.key in OCCUPANCY)
    while p is not None:
        ran = _launch_on(out.device, p.kernel, p.grid, p.args, p.meta, p.key)
        if keep and ran is not None:
            _make_ready(shape, p, ran, fresh, settings)
        p = p.tail


def _launch_on(device: torch.device, kernel, grid, args, meta, key):
    if device.type == "cuda" and device.index != torch.cuda.current_device():
        # Triton launches on the current device's context and stream: make them the tensors' device
        with torch.cuda.device(device):
            return _launch(kernel, grid, args, meta, key, device)
    return _launch(kernel, grid, args, meta, key, device)


# A shape planned twice (its op, regime, M, N, dtype, device, row strides and pointers' offsets in 16 bytes: Triton
# specialises a kernel on its integer arguments and on its pointers' 16-byte alignment, all in that key) is launched
# again as JITFunction.run launched it, the compiled kernel's launcher handed the same values, without the plan and
# Triton's binder: only a plan of one launch (not the window's with its last row's own), only while everything the
# plan and the compiled kernel were chosen by is unchanged (`settings`: no name of rules.py assigned since, as tests
# and benchmarks/tune_triton.py assign them, and the debug and instrumentation knobs Triton compiles with) and while
# no pre-run hook is set on the kernel. Host time, Triton's driver stubbed on this project's CPU machine
# (benchmarks/results/cpu-host-triton-ready-s55.txt): the launcher 17-22 -> 6-9 us a call; the Triton backend's few-row
# sweep cells had timed 3-19x their kernels' queued time on the H200 (h200-session53/triton/sweep.csv).
READY_CACHE = 256  # shapes kept ready ...
SEEN_CACHE = 1024  # ... and shapes planned once (the oldest dropped first)


def _drop_native(ready: "_Ready") -> None:
    """The ready cache's on_drop: the native helper's entries of a ready launch go with it."""
    mod = native.module() if ready.native_keys else None
    if mod is not None:
        for key in ready.native_keys.values():
            mod.remove(key, ready)
    ready.native_keys.clear()


_READY = BoundedCache(READY_CACHE, _drop_native)
_SEEN = BoundedCache(SEEN_CACHE)
# an assignment to a name of rules.py may change any plan: the ready launches (and their native entries) go
rules.on_change.append(lambda: _READY.clear())


def _settings() -> tuple:
    """What a ready launch was made under: Triton's knobs above, and the rules' generation (every assignment to a name
    of softmax_rules counts)."""
    return (knobs.runtime.debug, knobs.compilation.instrumentation_mode, rules.generation)


def _make_ready(shape: tuple, p: Plan, ran: tuple, fresh: list, settings: tuple) -> None:
    """Keep the launch p made (`ran`: the compiled kernel and the meta-parameters it ran with) for `shape`, unless it
    cannot be made again this way: the interpreter, a workspace not among the arguments after the tensors, a
    parameter neither in the plan's arguments nor in its meta."""
    compiled, meta = ran
    k = len(fresh)
    if not isinstance(compiled, CompiledKernel) or any(a is not w for a, (w, _) in zip(p.args[3:3 + k], fresh)):
        return
    names = p.kernel.arg_names[len(p.args):]
    if any(name not in meta for name in names):
        return
    _READY.put(shape, _Ready(p.kernel, compiled, p.grid, tuple((w.numel(), w.dtype, zero) for w, zero in fresh),
                             p.args[3 + k:] + tuple(meta[name] for name in names), settings))


class _Ready:
    __slots__ = ("kernel", "compiled", "grid", "dims", "fresh", "rest", "settings", "native", "native_keys")

    def __init__(self, kernel, compiled: CompiledKernel, grid: tuple, fresh: tuple, rest: tuple, settings: tuple):
        self.kernel = kernel  # the JITFunction
        self.compiled = compiled
        self.grid = grid  # the plan's
        self.dims = tuple(grid) + (1,) * (3 - len(grid))  # the grid's (x, y, z)
        self.fresh = fresh  # per call, after the op's three tensors: a workspace (n, dtype, zeroed) each
        self.rest = rest  # then the plan's other arguments and the kernel's constexprs, in its parameters' order
        self.settings = settings
        self.native = None  # native.cpp's launch of it (_native_launch), once asked: a tuple, or False
        self.native_keys = {}  # its entries in native.cpp's table: the callers' shapes (put_native) -> their keys

    @property
    def name(self) -> str:
        """The kernel's name (native.cpp's error for a failed launch)."""
        return self.compiled.name

    def holds(self) -> bool:
        return not self.kernel.pre_run_hooks and self.settings == _settings()

    def launch(self, tensors3: tuple, device: int) -> None:
        """What JITFunction.run does for this shape once it has found the compiled kernel."""
        ws = tuple([(torch.zeros if zero else torch.empty)(n, dtype=dtype, device=tensors3[2].device)
                    for n, dtype, zero in self.fresh])
        args = (*tensors3, *ws, *self.rest)
        stream = driver.active.get_current_stream(device)
        c, (gx, gy, gz) = self.compiled, self.dims
        c.run(gx, gy, gz, stream, c.function, c.packed_metadata, c.launch_metadata(self.grid, stream, *args),
              knobs.runtime.launch_enter_hook, knobs.runtime.launch_exit_hook, *args)


# The native helper (runtime/native.cpp, where built): a shape launched ready, called again on contiguous rows over the
# last dim into a fresh output, is launched by one C++ call (the lookup, the allocation, cuLaunchKernel) with the
# values the ready launch hands Triton's launcher: the public call's host time is then the CUDA backend's (Triton's
# launcher alone costs more than torch's whole call, issue 12). Only what native.cpp launches as Triton's launcher
# would: one kernel, no workspace, a 1-D grid, no cluster, programmatic or cooperative launch, no scratch memory, the
# op's pointers as its only pointers, libcuda reached through ctypes; and only while Triton would call nothing of
# ours around the launch (native_holds). An entry goes with its ready launch (evicted, replaced, or any assignment to
# a name of rules.py), and every entry goes when Triton's settings or hooks change (native_holds, asked by the ops
# before the table).
_SCALARS = {"i32": "<i", "u32": "<I", "i64": "<q", "u64": "<Q", "fp32": "<f"}
_NATIVE_SETTINGS: list = [None]  # _settings() when the entries in the table were put; None: none there


def _hooked() -> bool:
    """Whether Triton would call something around our launches that native.cpp does not: a launch hook (a chain of
    them, or one function), or a pre-run hook of the kernels it takes."""
    r = knobs.runtime
    enter, leave = r.launch_enter_hook, r.launch_exit_hook  # each a HookChain (called where it has calls) or None
    # written out, not any() over a generator: native_holds asks this on every eager call (~0.3 us less)
    return bool((enter is not None and getattr(enter, "calls", True))
                or (leave is not None and getattr(leave, "calls", True))
                or rows_kernel.pre_run_hooks or online_kernel.pre_run_hooks)


def native_holds() -> bool:
    """Whether the table's entries of this engine launch what its ready launches would now: Triton's settings
    (_settings: its debug and instrumentation knobs, the rules' generation) as when they were put, and no hook. Where
    not, the entries go (the ready launches stay: Triton's launcher takes them, hooks and all) and False."""
    if _NATIVE_SETTINGS[0] is not None and _settings() == _NATIVE_SETTINGS[0] and not _hooked():
        return True
    _forget_native()
    return False


def _forget_native() -> None:
    """Every entry this engine put leaves the table (its ready launches stay)."""
    if _NATIVE_SETTINGS[0] is not None:
        _NATIVE_SETTINGS[0] = None
        for ready in _READY.values():
            _drop_native(ready)


def _native_launch(ready: _Ready, backward: bool):
    """(function, grid, block, shared memory, the parameters' bytes after the pointers) of a ready launch, or False
    where native.cpp cannot launch it as Triton's launcher does."""
    c, md = ready.compiled, ready.compiled.metadata
    if (ready.fresh or ready.dims[1:] != (1, 1) or getattr(md, "num_ctas", 1) != 1 or md.launch_pdl
            or md.launch_cooperative_grid or md.global_scratch_size or md.profile_scratch_size
            or not isinstance(c.function, int)):
        return False
    sig = c.src.signature
    pointers = ("in_ptr", "dy_ptr", "out_ptr") if backward else ("in_ptr", "out_ptr")
    names = ready.kernel.arg_names
    scalars = []
    for name, value in zip(names[3:], ready.rest):
        ty = sig[name]
        if ty == "constexpr":
            continue
        if ty not in _SCALARS:  # a pointer or a type native.cpp is not handed
            return False
        scalars.append(struct.pack(_SCALARS[ty], value))
    if tuple(n for n in names[:3] if sig[n] != "constexpr") != pointers or len(names) != 3 + len(ready.rest):
        return False
    scratch = bytes(8)  # Triton's launcher passes its two scratch pointers last: none (null) here
    return c.function, ready.dims[0], 32 * md.num_warps, md.shared, scalars + [scratch, scratch]


def put_native(mod, ins: tuple, out: torch.Tensor, log: bool) -> None:
    """Put the ready launch of a call just made, on contiguous rows over the last dim of ins ((x,) forward, (y, dy)
    backward: the caller's tensors, any number of dims) into the fresh output `out`, into native.cpp's table under
    their key (backend 1), if this engine holds one for its shape and native.cpp can launch it."""
    backward = len(ins) == 2
    N = out.shape[-1] if out.dim() else 1
    tensors = (*ins, out)
    offsets = tuple([t.data_ptr() & 15 for t in tensors])
    shape = (backward, log, None, out.numel() // N, N, out.dtype, out.get_device(), (N,) * len(tensors), offsets)
    ready = _READY.get(shape)
    caller = (tuple(out.shape), offsets)  # native.cpp's key, less what shape holds
    if ready is None or ready.native is False or caller in ready.native_keys or offsets[-1]:
        return  # nothing to put, or put already (a call the table does not take: one lookup, no put a call)

    def put(ready: _Ready) -> None:
        if ready.native is None:
            ready.native = _native_launch(ready, backward)
        ctx = context(shape[6])
        fn = cu_launch_address()
        if not ready.native or not ready.holds() or _hooked() or not ctx or fn is None:
            return
        if _NATIVE_SETTINGS[0] != ready.settings:  # entries put under other settings go first
            _forget_native()
            _NATIVE_SETTINGS[0] = ready.settings
        function, grid, block, shared, scalars = ready.native
        op = (2 if backward else 0) + log
        key = mod.put(op, 1, ins[0], ins[1] if backward else None, backward, fn, ctx, function, grid, block, 1,
                      shared, scalars, ready)
        if key is not None:
            ready.native_keys[caller] = key
    _READY.under_lock(shape, put)


def softmax_columns(tensors: tuple, out: torch.Tensor, backward: bool, log: bool = False) -> bool:
    """out <- the op along dim 1 of contiguous 3-D (outer, N, inner) tensors: (x,) forward, (y, dy) backward,
    read where they lie: the streamed columns kernel for a short dim (rules.cols_stream_config), else the tile
    columns kernel (rules.cols_config). False, launching nothing, where neither takes N (or the grid would pass
    2^31 programs): the caller moves the dim last instead."""
    outer, N, inner = out.shape
    stream = rules.cols_stream_config(N, out.dtype, backward)
    cfg = stream or rules.cols_config(N, inner, out.dtype, backward)
    strips = cdiv(inner, cfg.BLOCK_I) if cfg else 0
    if cfg is None or outer * strips >= 2**31:
        return False
    for name, t in zip(("y", "dy") if backward else ("x",), tensors):
        if t.shape != out.shape or t.dtype != out.dtype or not t.is_contiguous():
            raise OnlineSoftmaxError(f"{name} must be contiguous with out's shape and dtype {tuple(out.shape)}, "
                                     f"{out.dtype}; got {tuple(t.shape)}, {t.dtype}, strides {t.stride()}")
    if not out.is_contiguous():
        raise OnlineSoftmaxError(f"out must be contiguous, got strides {out.stride()}")
    if not out.numel():
        return True
    a, b = (tensors[0], tensors[1]) if backward else (tensors[0], None)
    op = dict(BACKWARD=backward, LOG=log, num_warps=cfg.num_warps)
    if stream is None:
        _launch_on(out.device, cols_kernel, (outer * strips,), (a, b, out, N, inner, strips),
                   dict(BLOCK_N=cfg.BLOCK_N, BLOCK_I=cfg.BLOCK_I, **op), None)
        return True
    tasks = outer * strips
    key = ("cols_stream", backward, cfg, log, out.dtype)
    programs = min(_programs(key, cfg.num_warps, sm_count(out.device), tasks),
                   rules.cols_stream_programs(N, cfg, out.element_size(), backward))
    _launch_on(out.device, cols_stream_kernel, (programs,), (a, b, out, N, inner, strips, tasks),
               dict(BLOCK_N=cfg.BLOCK_N, BLOCK_I=cfg.BLOCK_I, WHOLE=cfg.WHOLE, **op), key)
    return True


def softmax_forward(x: torch.Tensor, out: torch.Tensor, log: bool = False, regime: Optional[str] = None) -> torch.Tensor:
    """out <- softmax(x) (log_softmax with log=True) along the last dim of a 2-D x. `regime`
    forces "rows", "online" or "split"; None picks by `pick_regime`."""
    _check_2d("x", x)
    _check_2d("out", out, x.shape)
    if out.dtype != x.dtype:
        raise OnlineSoftmaxError(f"out has dtype {out.dtype}, expected {x.dtype}")
    _run(False, log, regime, (x, out))
    return out


def softmax_backward(y: torch.Tensor, dy: torch.Tensor, out: torch.Tensor, log: bool = False,
                     regime: Optional[str] = None) -> torch.Tensor:
    """out <- the gradient of softmax (log_softmax with log=True) given its output y and the
    upstream gradient dy, along the last dim of 2-D tensors."""
    _check_2d("y", y)
    _check_2d("dy", dy, y.shape)
    _check_2d("out", out, y.shape)
    if dy.dtype != y.dtype or out.dtype != y.dtype:
        raise OnlineSoftmaxError(f"y, dy, out must share a dtype, got {y.dtype}, {dy.dtype}, {out.dtype}")
    _run(True, log, regime, (y, dy, out))
    return out


def kernel_resources(M: int, N: int, dtype: torch.dtype, backward: bool, log: bool, regime: str) -> Optional[dict]:
    """Registers, local memory (spills) and shared memory of the kernel that would run for
    (M, N, dtype) on this CUDA device, from a warmup compile; None without a CUDA device."""
    if interpreting() or not torch.cuda.is_available():
        return None
    device = torch.device("cuda", torch.cuda.current_device())
    n = 3 if backward else 2
    p = plan(backward, log, regime, M, N, dtype, sm_count(device), (dtype,) * n, (N,) * n, lambda _n, dt, _zero: dt)
    compiled = p.kernel.warmup(*p.args, grid=p.grid, **p.meta)
    compiled._init_handles()
    return {
        "registers": int(compiled.n_regs),
        "stack": int(compiled.n_spills) * 4,  # local memory bytes per thread (spills)
        "shared": int(compiled.metadata.shared),
        "num_warps": p.meta["num_warps"],
        "programs": p.grid[0],
        "config": repr(p.config),
    }

"""The production CUDA engine per call: the tensors' layout, the plan (cached), the bound launches (cached), the
launch on the current stream. What ops/ calls (x, y, dy: CUDA tensors of fp32 / fp16 / bf16, any shape and
strides; `dim` in [0, ndim); `out` contiguous with the input's shape and dtype, completely written):

    forward(x, out, dim, log)           out = softmax(x, dim), or log_softmax when log
    backward(y, dy, out, dim, log)      out = dx from the forward output y (probabilities, or log-probabilities)
    cross_entropy(x, t, grad, loss, lse, scale, ...)   the loss, lse and gradient of rows of logits (ce_row)
    cross_entropy_targets / _loss / _scale             the small launches around it (targets' check, sum, dloss)
    cross_entropy_step(x, grad, ...)    the op's forward: its three launches prepared for one layout (hot path)
    host_mapped(device, ptr)            whether that device's kernels address pinned host memory at ptr as is
    plan_for(op, *tensors, dim=...)     the plan a call would use (inspection)

Kernel sources are compiled per instantiation on first use (compiled.py); nothing here needs a GPU to import.

Threads: safe from any number of threads and streams at once. Every cache below is read without a lock and filled
under one, and what it holds is immutable once built, except a prepared launch's parameter block, which is filled
and launched under its own lock. Nothing per call (pointers, the split workspace) is shared between calls.
"""

from __future__ import annotations

import functools
import math
from typing import Optional

import numpy as np
import torch

from ...errors import OnlineSoftmaxError, Unavailable
from ...opdefs import GPU_DTYPES
from ...runtime import available
from ...runtime.bounded import BoundedCache
from ...runtime import native
from ...runtime.launch import host_mapped  # noqa: F401 (ops/ reaches it through the engine: TargetCheck's slots)
from ...runtime.launch import memset32
from .compiled import kernel, sms
from .plan import (COLUMN_REGIMES, DT_CODE, Plan, Unsupported, cross_entropy_plan, flat_from, grid_for, plan,
                   stable_rows, vec_width)

ENTRY_CACHE = 256  # per cache (forward, backward, forced regime): exact tensor metadata -> _Entry
PLAN_CACHE = 4096  # fitted plans by geometry; rows >= stable_rows share one (Plan.at moves it to the call's M)
_plans = BoundedCache(PLAN_CACHE)


# ---- layouts ----------------------------------------------------------------------------------------------


def _row_layout(shape, stride, dim) -> Optional[tuple[int, int, int]]:
    """(M, N, row_stride) when the reduced dim is last with stride 1 (or size 1) and the leading dims collapse
    to one row stride; else None."""
    nd = len(shape)
    if dim != nd - 1:
        return None
    N = shape[-1]
    if N != 1 and stride[-1] != 1:
        return None
    rs = expect = None
    for i in range(nd - 2, -1, -1):
        if shape[i] == 1:
            continue
        if rs is None:
            rs = stride[i]
        elif stride[i] != expect:
            return None
        expect = stride[i] * shape[i]
    M = math.prod(shape[:-1])
    return M, N, (N if rs is None else rs)


def _is_contiguous(shape, stride) -> bool:
    expect = 1
    for n, s in zip(reversed(shape), reversed(stride)):
        if n != 1 and s != expect:
            return False
        expect *= n
    return True


# ---- running a plan ---------------------------------------------------------------------------------------


def _fitted_plan(M: int, N: int, dtype, op: str, vec: bool, window: int, inner: int, layout: str, sms: int,
                 regime: Optional[str], device: int, fallback: str, out_dtype=None, flat: bool = False) -> Plan:
    """plan(...) with an automatic plan whose clusters (cluster, columns) cannot be resident on this device, or
    whose cluster attributes are refused, or whose groups of CTAs (group) could wait on one another for want of room
    (_group_runs), replaced by the `fallback` regime (split, strided); a few-row cluster plan
    narrowed (plan's `widest`) until its M clusters are resident at once (_one_round); cached by geometry, one
    entry for every M >= stable_rows(sms) (two where the flat regime takes the rows from flat_from on)."""
    stable = M >= stable_rows(sms)
    automatic_flat = flat and layout == "rows" and regime is None and out_dtype is None  # where use_flat decides
    key = (op, N, dtype, vec, window, inner, layout, sms, regime, device,
           _row_class(M, op, dtype, N, sms, automatic_flat), out_dtype, flat)

    def planned(**kw) -> Plan:
        return plan(M, N, dtype, op, vec=vec, window=window, inner=inner, layout=layout, sms=sms,
                    out_dtype=out_dtype, **kw)

    def make() -> Plan:
        p = planned(regime=regime, flat=flat)
        if regime is None and p.regime in ("group", "bands") and not _group_runs(p, device):
            return planned(regime=fallback)
        if regime is not None or all(l.cluster == 1 for l in p.launches):
            return p
        try:
            if all(kernel(l.kernel, device, l.block, l.smem, l.cluster).fits is not False for l in p.launches):
                return _one_round(p, lambda widest: planned(flat=flat, widest=widest), device)
        except OnlineSoftmaxError:
            pass
        return planned(regime=fallback)

    p = _plans.get(key) or _plans.get_or_make(key, make)
    return p.at(M) if stable else p


def _group_runs(p: Plan, device: int) -> bool:
    """Whether this device holds twice a group plan's G CTAs at once (the occupancy query): a group's CTAs wait for
    one another, so G of them must fit, with room to spare for other streams' kernels (softmax.cu's grp_body).
    False where they do not, or where that cannot be told."""
    l = p.launches[0]
    try:
        ctas = kernel(l.kernel, device, l.block, l.smem, 1).resident_ctas
    except OnlineSoftmaxError:
        return False
    return ctas is not None and ctas >= 2 * p.parts


def _one_round(p: Plan, narrower, device: int) -> Plan:
    """A cluster plan whose clusters the device cannot hold at once (its resident count, from the occupancy
    query) replaced by narrower(widest) at half the width, while that narrows it and fits: the few-row rule
    widens clusters to about two CTAs an SM, but clusters are placed whole within a GPC, and on the H200 only 14
    clusters of 16 are resident, so that 16 rows of 262144 ran in two rounds (fp32 forward 22.7 us against 12.3 us
    at 7 rows, h200-few-rows-1f0abb3.txt). A narrower plan that fails to load or plan leaves p as it is."""
    while p.regime == "cluster":
        l = p.launches[0]
        resident = kernel(l.kernel, device, l.block, l.smem, l.cluster).resident
        if resident is None or l.grid <= resident:
            break
        try:
            q = narrower(l.cluster // 2)
            n = q.launches[0]
            if n.cluster >= l.cluster or kernel(n.kernel, device, n.block, n.smem, n.cluster).fits is False:
                break
        except OnlineSoftmaxError:
            break
        p = q
    return p


_GROUPED = ("group", "bands", "period")  # regimes whose launches share a workspace a call (_grouped)


class _Entry:
    """Everything one (op, shape, strides, dim, dtype, device, alignment) needs per call: the plan, whether the
    inputs are made contiguous first, and one bound launch per kernel (the pointers come per call). Immutable;
    the split and group regimes' workspace is allocated per call. rows(M, ...) runs the plan moved to M rows
    (Plan.at) without building anything: only the grids, the row count and the workspace change."""

    __slots__ = ("plan", "contig", "calls", "single", "M", "pers", "steps", "device")

    def __init__(self, p: Optional[Plan], device: int, contig: bool, strides: tuple, so: int):
        self.plan, self.contig, self.device = p, contig, device
        self.calls, self.single, self.M, self.pers, self.steps = (), None, 0, (), (0, 0, 0)
        if p is None:  # an empty tensor: nothing to launch
            return
        self.M, self.pers = p.M, tuple(l.per for l in p.launches)
        i64, i32 = np.int64, np.int32
        sa = strides[0]
        sb = strides[1] if len(strides) > 1 else 0
        size = p.dtype.itemsize  # (the split regime's out rows are the inputs' dtype)
        self.steps = (sa * size, sb * size, so * size)  # bytes from one row to the next: a, b, out
        calls = []
        for l in p.launches:
            pointers = 3  # (a, b, out); stats: (a, b, workspace); apply: (a, b, workspace, out)
            if l.sig in ("rows", "warp"):
                tail = (i64(p.M), i32(p.N), i64(sa), i64(sb), i64(so))
                if l.sig == "warp":
                    tail += (i32(p.lg),)
            elif l.sig == "flat":
                tail = (i64(p.M), i32(p.N), i32(p.rows))
            elif l.sig == "stats":
                tail = (i64(p.M), i32(p.N), i64(sa), i64(sb), i32(p.parts), i32(p.chunk))
            elif l.sig == "apply":
                tail = (i64(p.M), i32(p.N), i64(sa), i64(sb), i64(so), i32(p.parts), i32(p.chunk))
                pointers = 4
            elif l.sig in ("group", "fix"):
                tail = (i64(p.M), i32(p.N), i64(sa), i64(sb), i64(so), i32(p.parts))
                tail += (i32(p.wait),) if l.sig == "group" else ()
                pointers = 4
            elif l.sig == "period":
                tail = (i64(p.M), i32(p.N), i64(p.inner), i32(p.parts), i32(p.strips), i32(p.chunk), i32(p.keep))
                pointers = 4
            elif l.sig in ("bands", "bandsfix"):
                tail = (i64(p.M), i32(p.N), i64(p.inner), i64(p.strips), i32(p.parts), i32(p.chunk))
                tail += (i32(p.wait),) if l.sig == "bands" else ()
                pointers = 4
            else:  # strided
                tail = (i64(p.M), i32(p.N), i64(p.inner), i64(p.strips), i64(p.items))
            pdl = l.sig in ("apply", "fix", "bandsfix")
            calls.append(kernel(l.kernel, device, l.block, l.smem, l.cluster).bind(l.grid, tail, pointers, pdl,
                                                                                  coop=l.sig == "period"))
        self.calls = tuple(calls)
        if len(calls) == 1 and p.regime not in _GROUPED:
            self.single = calls[0]

    def __call__(self, a: int, b: int, out: int, x: torch.Tensor) -> None:
        """The launches on pointers a, b, out; x: a tensor on their device (x.device is read only where a workspace is
        allocated: it costs more than the launch's Python)."""
        if self.single is not None:
            self.single(a, b, out)
        else:
            self._with_workspace(self.M, a, b, out, x)

    def rows(self, M: int, a: int, b: int, out: int, x: torch.Tensor) -> None:
        """The call for M rows, for any M whose plan has this entry's geometry (_rows_entry keys it so)."""
        if self.single is None:
            self._with_workspace(M, a, b, out, x)
        elif M == self.M:
            self.single(a, b, out)
        else:
            self.single.rows(grid_for(M, self.pers[0]), M, a, b, out)

    def _with_workspace(self, M: int, a: int, b: int, out: int, x: torch.Tensor) -> None:
        regime = self.plan.regime
        (self._grouped if regime in _GROUPED else self._split)(M, a, b, out, x)

    def _grouped(self, M: int, a: int, b: int, out: int, x: torch.Tensor) -> None:
        # group and bands: the CTAs' ticket and each row's (strip's) arrival word, pairs and abandoned ranks
        # (Plan.workspace_for) in a workspace of this call, its counters zeroed on the current stream before the
        # launch (as the split's, from torch's caching allocator: see _split); then the kernel that writes what a
        # CTA abandoned (grp_fix, bands_fix: a programmatic launch, it starts as the first one ends). period: its
        # stats' pairs and the merge's column pairs, nothing zeroed (its grid barriers are the driver's); one
        # cooperative launch.
        n, zeroed = self.plan.workspace_for(M)
        ws = torch.empty(n, dtype=torch.float32, device=x.device)
        if zeroed:
            memset32(self.device, ws.data_ptr(), 0, zeroed)
        w = ws.data_ptr()
        for call, per in zip(self.calls, self.pers):
            call.rows(grid_for(M, per), M, a, b, w, out)

    def _split(self, M: int, a: int, b: int, out: int, x: torch.Tensor) -> None:
        # the partial states go to a workspace of this call (2 floats per chunk of a wave), from torch's caching
        # allocator on the current stream: calls from other threads never share it, its reuse is ordered after
        # these kernels (each wave's stats after the wave before's apply), and a CUDA graph captures it in its own
        # pool. Wave by wave (plan.split_wave): each apply re-reads from L2 what its stats read just before. The
        # tensor is held until every launch is queued: let go sooner, another thread's call would get the block.
        wave = self.plan.wave or M
        ws = torch.empty(self.plan.workspace_for(M)[0], dtype=torch.float32, device=x.device)
        (stats, apply), (ps, pa), (sa, sb, so), w = self.calls, self.pers, self.steps, ws.data_ptr()
        for r in range(0, M, wave):
            g = min(wave, M - r)
            stats.rows(grid_for(g, ps), g, a + r * sa, b + r * sb, w)
            apply.rows(grid_for(g, pa), g, a + r * sa, b + r * sb, w, out + r * so)


class KeptWorkspaces:
    """Diagnostics (benchmarks/group_waits.py, the GPU tests): within `with KeptWorkspaces() as keep:`, the fp32
    vectors this module allocates (the split and group workspaces) are kept in keep.kept, to be read after the calls
    (plan.group_abandoned). The module's `torch` is a proxy meanwhile, whose `empty` keeps them; nothing is added to
    a call outside such a block."""

    def __init__(self):
        self.kept = []

    def __getattr__(self, name):
        return getattr(_torch, name)

    def empty(self, *a, **k):
        t = _torch.empty(*a, **k)
        if t.dim() == 1 and t.dtype == _torch.float32:
            self.kept.append(t)
        return t

    def __enter__(self) -> "KeptWorkspaces":
        globals()["torch"] = self
        return self

    def __exit__(self, *exc) -> None:
        globals()["torch"] = _torch


_torch = torch


def _device_index(x: torch.Tensor, op: str) -> int:
    if not x.is_cuda:
        raise OnlineSoftmaxError(f"{op}: CUDA tensors expected (got {x.device})")
    return x.device.index if x.device.index is not None else torch.cuda.current_device()


def _prepare(op: str, ins: tuple, out: torch.Tensor, dim: int, regime: Optional[str]) -> _Entry:
    call = _plan_call(op, ins, out, dim, regime)
    return _Entry(*call) if call else _Entry(None, -1, False, (), 0)


def _plan_call(op: str, ins: tuple, out: torch.Tensor, dim: int, regime: Optional[str],
               out_dtype=None) -> Optional[tuple]:
    """(plan, device, contig, row strides, out row stride) for these tensors, after checking them; None when empty.
    out_dtype: out's dtype when it is not the inputs' (the fused cast; Unsupported where no plan fuses it)."""
    x = ins[0]
    if x.dtype not in GPU_DTYPES:
        raise OnlineSoftmaxError(f"{op}: dtype {x.dtype} not supported (float32, float16, bfloat16)")
    for t in ins[1:] + (out,):
        if t.dtype != (out_dtype or x.dtype if t is out else x.dtype) or t.shape != x.shape or t.device != x.device:
            raise OnlineSoftmaxError(f"{op}: inputs and out must share shape, dtype and device "
                                     f"(got {[(tuple(u.shape), u.dtype, str(u.device)) for u in ins + (out,)]})")
    shape = tuple(x.shape)
    if x.numel() == 0:
        return None
    if not _is_contiguous(shape, out.stride()):
        raise OnlineSoftmaxError(f"{op}: out must be contiguous (torch.empty_like(x, memory_format="
                                 "torch.contiguous_format))")
    reason = available()
    if reason:
        raise Unavailable(f"{op}: CUDA kernels cannot run here: {reason}")
    device = _device_index(x, op)
    n_sms = sms(device)
    V = vec_width(x.dtype)
    al = _alignment(x.data_ptr(), ins[1].data_ptr() if len(ins) > 1 else 0, out.data_ptr())
    N = shape[dim] if shape else 1
    strides = [tuple(t.stride()) for t in ins]
    rows = [_row_layout(shape, s, dim) for s in strides]
    column_kernels = regime in COLUMN_REGIMES
    if not column_kernels and all(r is not None for r in rows):
        M = rows[0][0]
        rss = tuple(r[2] for r in rows)
        if out_dtype is not None and al:
            raise Unsupported(f"{op}: the fused cast needs 16-byte aligned data and out")
        p = _fitted_plan(M, N, x.dtype, op, *_row_access(al, M, N, V, rss), 1, "rows", n_sms, regime, device,
                         "split", out_dtype, _flat(al, M, N, rss))
        return p, device, False, rss, N
    if out_dtype is not None:
        raise Unsupported(f"{op}: the fused cast takes rows along the last dim")
    # made contiguous per call (one copy per input that is not; the cache key records the original pointers' offsets,
    # which decide the kept inputs').
    contig = not all(_is_contiguous(shape, s) for s in strides)
    outer = math.prod(shape[:dim])
    inner = math.prod(shape[dim + 1:])
    if inner == 1 and not column_kernels:  # contiguous with the dim innermost: rows of N
        if contig:  # the pointers the kernels will see: a copy's is fresh (16-byte aligned; 16 stands for it)
            ptrs = [t.data_ptr() if _is_contiguous(shape, s) else 16 for t, s in zip(ins, strides)]
            al = _alignment(ptrs[0], ptrs[1] if len(ptrs) > 1 else 0, out.data_ptr())
        vec, window = _row_access(al, outer, N, V, (N,) * len(ins))
        p = _fitted_plan(outer, N, x.dtype, op, vec, window, 1, "rows", n_sms, regime, device, "split", None,
                         _flat(al, outer, N, (N,) * len(ins)))
        return p, device, contig, (N,) * len(ins), N
    p = _fitted_plan(outer, N, x.dtype, op, al & 15 == 0, 0, inner, "strided", n_sms, regime, device, "strided")
    return p, device, contig, (0,) * len(ins), 0


def _row_access(al: int, M: int, N: int, V: int, rss: tuple, so: Optional[int] = None) -> tuple[bool, int]:
    """(vec, window) for plan() of rows with these input row strides (out rows so apart, N by default), from the
    pointers' _alignment: vec, every pointer aligned and every stride a multiple of the vector; window 1, every row
    of every tensor starts as far from a 16-byte boundary as its out row; 2, the inputs' rows alike, the out rows
    otherwise; 3, a backward's y and out rows alike, dy's otherwise; 0, the inputs' rows start differently and the
    out rows unlike the first's."""
    one = M == 1
    so = N if so is None else so
    vec = al & 15 == 0 and (one or all(rs % V == 0 for rs in rss + (so,)))
    out_alike = al >> 4 & 15 == 0 and (one or (rss[0] - so) % V == 0)
    if al >> 8 or not (one or all((rs - rss[0]) % V == 0 for rs in rss)):
        return vec, 3 if len(rss) == 2 and out_alike else 0
    return vec, 1 if out_alike else 2


def _row_class(M: int, op: str, dtype, N: int, sms: int, flat: bool):
    """The plan-cache key of a row count: M itself below stable_rows; above, one class, or two where the flat regime
    takes contiguous aligned rows from flat_from rows on ("flat" and None)."""
    if M < stable_rows(sms):
        return M
    t = flat_from(op, dtype, N, sms) if flat else 0
    return "flat" if t and M >= t else None


def _flat(al: int, M: int, N: int, rss: tuple) -> bool:
    """Whether every tensor is one contiguous block of rows N apart starting on a 16-byte boundary (the flat
    regime's condition; out always is contiguous)."""
    return al & 15 == 0 and (M == 1 or all(rs == N for rs in rss))


def _alignment(pa: int, pb: int, po: int) -> int:
    """The pointers' part of a cache key, their offsets from 16-byte boundaries: bits 0-3 set when any pointer is
    not aligned, bits 4-7 a's offset from out's, bits 8-11 b's from a's (pb == 0: no b)."""
    return ((pa | pb | po) & 15) | (((pa - po) & 15) << 4) | ((((pb - pa) & 15) if pb else 0) << 8)


def _call(e: _Entry, ins: tuple, out: torch.Tensor, pa: int, pb: int, po: int) -> None:
    if e.contig:
        ins = tuple(t.contiguous() for t in ins)
        pa = ins[0].data_ptr()
        pb = ins[1].data_ptr() if len(ins) > 1 else 0
    if e.calls:
        e(pa, pb, po, ins[0])


_entries = BoundedCache(ENTRY_CACHE)  # forced regimes (the registry variants)


def run_regime(op: str, ins: tuple, out: torch.Tensor, dim: int, regime: Optional[str] = None) -> None:
    """Any op, optionally with a forced regime (the registry variants)."""
    pa = ins[0].data_ptr()
    pb = ins[1].data_ptr() if len(ins) > 1 else 0
    po = out.data_ptr()
    x = ins[0]
    key = (op, regime, x.shape, tuple(t.stride() for t in ins), dim, x.dtype, x.get_device(),
           _alignment(pa, pb, po))
    e = _entries.get(key) or _entries.get_or_make(key, lambda: _prepare(op, ins, out, dim, regime))
    _call(e, ins, out, pa, pb, po)


# ---- the contract with ops.py -----------------------------------------------------------------------------
# The hot path: one key of tensor metadata, one dict lookup, the launch. `out` must be contiguous (ops.py
# allocates it so); that is checked when a layout's entry is first made, not on every call. Contiguous rows over the
# last dim (nearly every call) are looked up by their exact shape first (_fwd_shapes, _bwd_shapes: the launch with
# its grid for that M, made once, so a call computes nothing but its key; made outside the cache's lock, so a new
# shape of a planned row length never waits behind another thread's first compile). Behind that, they are keyed
# without their row count M once M >= stable_rows (4 x SMs): those Ms share one entry, whose plan moves to the
# call's M (Plan.at), so a new batch size builds nothing (where the flat regime takes the rows from flat_from rows
# on, the entry holds the plans on both sides and picks one by M: _ByRows). Below it the few-rows rules depend on M:
# the first few-row call of a row length plans every few-row M at once (_rows_entry), each sharing the entry of the
# Ms whose plans have its geometry. Other layouts are keyed by their exact shape and strides.

ROWS_CACHE = 4096  # per direction: the few-row Ms (4 x SMs keys) of several row lengths, one key per length beyond
_NATIVE_OPS = {"softmax": 0, "log_softmax": 1, "softmax_backward": 2, "log_softmax_backward": 3}  # native.cpp's op


def _drop_native(shaped: "_Shaped") -> None:
    """The shapes' caches' on_drop: the table entry `shaped` put goes with it (not one another _Shaped of the same
    shape has put since)."""
    mod = native.module() if shaped.key is not None else None
    if mod is not None:
        mod.remove(shaped.key, shaped)


_fwd_shapes = BoundedCache(ENTRY_CACHE, _drop_native)  # exact row shapes -> _Shaped
_bwd_shapes = BoundedCache(ENTRY_CACHE, _drop_native)
_fwd_rows = BoundedCache(ROWS_CACHE)
_bwd_rows = BoundedCache(ROWS_CACHE)
_geometries = BoundedCache(ENTRY_CACHE)  # row entries by plan geometry
_fwd_entries = BoundedCache(ENTRY_CACHE)
_cast_entries = BoundedCache(ENTRY_CACHE)  # forward_cast: by exact layout
_bwd_entries = BoundedCache(ENTRY_CACHE)
_stable: dict = {}  # device index -> stable_rows(its SMs)


class _ByRows:
    """The stable row counts' entry where the flat regime takes them from `t` rows on: the entry below and the one
    from t on."""

    __slots__ = ("t", "low", "high")

    def __init__(self, t: int, low: _Entry, high: _Entry):
        self.t, self.low, self.high = t, low, high

    def rows(self, M: int, a: int, b: int, out: int, x: torch.Tensor) -> None:
        (self.high if M >= self.t else self.low).rows(M, a, b, out, x)


class _Shaped:
    """The call for one exact shape of contiguous rows: its entry's launch with the grid for its M made once (a
    single prepared launch, clusters included), or the entry (the split regime's two launches: its workspace is
    per call); nothing for no rows. `key`: where the native helper is loaded and the launch goes through libcuda's
    cuLaunchKernel, its key in native.cpp's table, which then launches the shape into fresh outputs without Python
    (put by _put_shaped, removed when the shapes' cache drops this: _drop_native)."""

    __slots__ = ("launch", "grid", "M", "entry", "key")

    def __init__(self, entry, M: int):
        if isinstance(entry, _ByRows):
            entry = entry.high if M >= entry.t else entry.low
        self.M, self.entry, self.launch, self.grid, self.key = M, entry, None, 0, None
        if entry is not None and entry.single is not None:  # the split regime's two launches go through the entry
            self.launch, self.grid = entry.single, grid_for(M, entry.pers[0])

    def __call__(self, a: int, b: int, out: int, x: torch.Tensor) -> None:
        if self.launch is not None:
            self.launch.rows(self.grid, self.M, a, b, out)
        elif self.entry is not None:
            self.entry.rows(self.M, a, b, out, x)

    @property
    def name(self) -> str:
        """The kernel's name (native.cpp's error for a failed launch)."""
        return self.launch.lk.name


def _shaped(op: str, ins: tuple, out: torch.Tensor, dim: int, cache: BoundedCache, log: bool) -> _Shaped:
    """The _Shaped call of contiguous rows over the last dim: through the row-count classes' cache (forward's or
    backward's) and their shared entries."""
    x = ins[0]
    n = x.numel()
    if not n:
        return _Shaped(None, 0)
    N = x.shape[dim]
    M, d = n // N, x.get_device()
    key = (log, N, x.dtype, d, _alignment(x.data_ptr(), ins[1].data_ptr() if len(ins) > 1 else 0, out.data_ptr()),
           M if M < _stable_rows_of(d) else 0)
    e = cache.get(key) or cache.get_or_make(key, lambda: _rows_entry(op, ins, out, dim, cache, key))
    return _Shaped(e, M)


def _put_shaped(shapes: BoundedCache, key: tuple, s: _Shaped, op: str, ins: tuple, out: torch.Tensor) -> None:
    """s into the shapes' cache, and into the native helper's table where it is loaded and out starts on a 16-byte
    boundary (the fresh outputs it allocates do), under the cache's lock: the table then follows the cache's own
    order of changes (a racing thread's put of the same shape drops the other's entry before it adds its own)."""
    mod = native.module()
    if mod is None or s.launch is None or out.data_ptr() % 16:
        shapes.put(key, s)
        return

    def put_native() -> None:
        s.key = s.launch.native_put(mod, _NATIVE_OPS[op], ins[0], ins[1] if len(ins) > 1 else None, s.grid, s.M, s)
    shapes.put(key, s, put_native)


def _rows_entry(op: str, ins: tuple, out: torch.Tensor, dim: int, cache: BoundedCache, key: tuple):
    """The entry for contiguous rows, shared by every row count whose plan has the same geometry. The first call of
    a row length with few rows (M < stable_rows) plans every few-row M of that length at once and keys them all in
    `cache` (pure Python, a few ms once), so a new row count later costs one lookup, as a cached call does. The
    stable class (key 0) is one entry, or two (_ByRows) where the flat regime takes its rows from flat_from on."""
    call = _plan_call(op, ins, out, dim, None)
    p, device, contig, rss, so = call
    n_sms, V, al = sms(device), vec_width(p.dtype), key[-2]

    def entry(M: int) -> _Entry:
        pm = _fitted_plan(M, p.N, p.dtype, op, *_row_access(al, M, p.N, V, rss), 1, "rows", n_sms, None, device,
                          "split", None, _flat(al, M, p.N, rss))
        return _shared_entry(op, (pm,) + call[1:])

    if key[-1] == 0:  # the stable class
        t = flat_from(op, p.dtype, p.N, n_sms) if _flat(al, p.M, p.N, rss) else 0
        return _ByRows(t, entry(stable_rows(n_sms)), entry(t)) if t else _shared_entry(op, call)
    for M in range(1, stable_rows(n_sms)):
        cache.put(key[:-1] + (M,), entry(M))
    return _shared_entry(op, call)


def _shared_entry(op: str, call: tuple) -> _Entry:
    p = call[0]
    key = (op, p.dtype, p.N, p.W, call[1:], p.lg, p.parts, p.chunk, p.wave, p.wait,
           tuple((l.kernel, l.block, l.smem, l.cluster, l.per) for l in p.launches))
    return _geometries.get(key) or _geometries.get_or_make(key, lambda: _Entry(*call))


def _stable_rows_of(device: int) -> int:
    st = _stable.get(device)
    if st is None:
        st = _stable[device] = stable_rows(sms(device)) if device >= 0 else 1  # CPU: _prepare refuses it
    return st


def forward(x: torch.Tensor, out: torch.Tensor, dim: int, log: bool) -> None:
    """out <- softmax(x, dim) (log_softmax when log). x: CUDA fp32/fp16/bf16, any shape and strides; dim in
    [0, x.ndim); out contiguous, x's shape and dtype. Accumulates in fp32. Safe from any thread and stream."""
    pa, po = x.data_ptr(), out.data_ptr()
    if dim == x.dim() - 1 and x.is_contiguous():
        key = (log, x.shape, x.dtype, x.get_device(), pa & 15, po & 15)
        go = _fwd_shapes.get(key)
        if go is None:
            op = "log_softmax" if log else "softmax"
            go = _shaped(op, (x,), out, dim, _fwd_rows, log)
            _put_shaped(_fwd_shapes, key, go, op, (x,), out)
        go(pa, 0, po, x)
        return
    key = (log, x.shape, x.stride(), dim, x.dtype, x.get_device(), ((pa | po) & 15) | (((pa - po) & 15) << 4))
    e = _fwd_entries.get(key)
    if e is None:
        e = _fwd_entries.get_or_make(key, lambda: _prepare("log_softmax" if log else "softmax", (x,), out, dim,
                                                           None))
    _call(e, (x,), out, pa, 0, po)


def forward_new(x: torch.Tensor, dim: int, log: bool, table: bool = True) -> torch.Tensor:
    """forward() into a fresh contiguous tensor: one C++ call where the native helper has the shape, else the
    allocation here and forward(). table=False: the caller has asked the helper already (ops.softmax's hot path)."""
    mod = native.module() if table else None
    out = mod.forward(x, dim, log) if mod is not None else None
    if out is None:
        out = torch.empty_like(x, memory_format=torch.contiguous_format)
        forward(x, out, dim, log)
    return out


def backward_new(y: torch.Tensor, dy: torch.Tensor, dim: int, log: bool) -> torch.Tensor:
    """backward() into a fresh contiguous tensor, as forward_new."""
    mod = native.module()
    out = mod.backward(y, dy, dim, log) if mod is not None else None
    if out is None:
        out = torch.empty_like(y, memory_format=torch.contiguous_format)
        backward(y, dy, out, dim, log)
    return out


def backward(y: torch.Tensor, dy: torch.Tensor, out: torch.Tensor, dim: int, log: bool) -> None:
    """out <- dx from y = the forward output (probabilities; log-probabilities when log) and dy:
    softmax: dx = y * (dy - sum(dy * y)); log_softmax: dx = dy - exp(y) * sum(dy), 0 for a row of y all -inf."""
    pa, pb, po = y.data_ptr(), dy.data_ptr(), out.data_ptr()
    if dim == y.dim() - 1 and y.is_contiguous() and dy.is_contiguous():
        key = (log, y.shape, y.dtype, y.get_device(), pa & 15, pb & 15, po & 15)
        go = _bwd_shapes.get(key)
        if go is None:
            op = "log_softmax_backward" if log else "softmax_backward"
            go = _shaped(op, (y, dy), out, dim, _bwd_rows, log)
            _put_shaped(_bwd_shapes, key, go, op, (y, dy), out)
        go(pa, pb, po, y)
        return
    key = (log, y.shape, y.stride(), dy.stride(), dim, y.dtype, y.get_device(), _alignment(pa, pb, po))
    e = _bwd_entries.get(key)
    if e is None:
        e = _bwd_entries.get_or_make(key, lambda: _prepare("log_softmax_backward" if log else "softmax_backward",
                                                           (y, dy), out, dim, None))
    _call(e, (y, dy), out, pa, pb, po)


def forward_cast(x: torch.Tensor, out: torch.Tensor, dim: int, log: bool) -> None:
    """out (float32, contiguous) <- softmax(x, dim) (log_softmax when log) of 16-bit x: the cast fused into the
    kernel's stores where a plan has it (rows along the last dim on chip, aligned data), else x cast first (one
    more pass over the data), as torch.softmax(x, dim, dtype=torch.float32) computes it."""
    pa, po = x.data_ptr(), out.data_ptr()
    key = (log, x.shape, x.stride(), dim, x.dtype, x.get_device(), _alignment(pa, 0, po))
    e = _cast_entries.get(key)
    if e is None:
        e = _cast_entries.get_or_make(key, lambda: _cast_entry("log_softmax" if log else "softmax", x, out, dim))
    if e is _CAST_FIRST:
        forward(x.float(), out, dim, log)
    else:
        _call(e, (x,), out, pa, 0, po)


_CAST_FIRST = object()  # forward_cast's entry where no plan fuses the cast


def _cast_entry(op: str, x: torch.Tensor, out: torch.Tensor, dim: int):
    try:
        call = _plan_call(op, (x,), out, dim, None, out.dtype)
    except Unsupported:
        return _CAST_FIRST
    return _Entry(*call) if call else _Entry(None, -1, False, (), 0)


def plan_for(op: str, *tensors: torch.Tensor, dim: int = -1, regime: Optional[str] = None,
             out: Optional[torch.Tensor] = None) -> Plan:
    """The plan forward/backward would use for these tensors (inspection; loads kernels on first use)."""
    if out is None:
        out = torch.empty_like(tensors[0], memory_format=torch.contiguous_format)
    return _prepare(op, tuple(tensors), out, dim % tensors[0].dim(), regime).plan


# ---- cross-entropy ------------------------------------------------------------------------------------------

_ce_entries = BoundedCache(ENTRY_CACHE)  # by exact layout and options
_NO_PLAN = object()  # a cross-entropy layout no ce_row plan takes


def cross_entropy(x: torch.Tensor, target: torch.Tensor, grad: torch.Tensor, loss: torch.Tensor, lse: torch.Tensor,
                  scale: torch.Tensor, ignore_index: int, label_smoothing: float, z_loss: float,
                  after_targets: bool = False) -> bool:
    """grad (M, V) <- the gradient of the reduced loss, loss and lse (M,) fp32 <- each row's, from one read of the
    logits x (M, V), fp32 / fp16 / bf16 with column stride 1 (grad x's dtype, rows of any stride, possibly x itself:
    in place); target (M,) int64 contiguous; scale a device fp32 whose first element multiplies every gradient
    (1 / counted rows for "mean"). A row whose target is out of range (and not ignore_index) gets a NaN loss and
    gradient. after_targets: cross_entropy_targets made `scale` in the launch just before this one on the stream,
    so ce_row may start while it runs (a programmatic launch: the kernel waits for the scale only). The formulas
    are softmax.cu's ce_grad. Returns False, launching nothing, where no plan holds the rows on chip
    (cross_entropy_plan): the caller's other kernels take those."""
    e = _row_launch(x, grad, ignore_index, label_smoothing, z_loss, after_targets)
    if e is _NO_PLAN:
        return False
    e(x.data_ptr(), target.data_ptr(), grad.data_ptr(), loss.data_ptr(), lse.data_ptr(), scale.data_ptr())
    return True


def _row_launch(x: torch.Tensor, grad: torch.Tensor, ignore_index: int, eps: float, z: float, pdl: bool):
    """ce_row's prepared launch for this layout and these options (cached), or _NO_PLAN."""
    key = (tuple(x.shape), x.stride(), grad.stride(), x.dtype, grad.dtype, tuple(grad.shape), x.get_device(),
           _alignment(x.data_ptr(), 0, grad.data_ptr()), ignore_index, eps, z, pdl)
    e = _ce_entries.get(key)
    if e is None:
        e = _ce_entries.get_or_make(key, lambda: _ce_entry(x, grad, ignore_index, eps, z, pdl))
    return e


def _ce_entry(x: torch.Tensor, grad: torch.Tensor, ignore_index: int, eps: float, z: float, pdl: bool):
    M, N = x.shape
    if N > 1 and (x.stride(1) != 1 or grad.stride(1) != 1):
        raise OnlineSoftmaxError(f"cross_entropy: logits and grad need column stride 1, got {x.stride()} and "
                                 f"{grad.stride()}")
    if x.dtype not in GPU_DTYPES or grad.dtype != x.dtype or grad.shape != x.shape or M == 0 or N == 0:
        return _NO_PLAN
    device = _device_index(x, "cross_entropy")
    n_sms = sms(device)
    sx, sg = (x.stride(0), grad.stride(0)) if M > 1 else (N, N)
    al = _alignment(x.data_ptr(), 0, grad.data_ptr())
    vec, window = _row_access(al, M, N, vec_width(x.dtype), (sx,), sg)
    try:
        p = cross_entropy_plan(M, N, x.dtype, vec=vec, window=window, sms=n_sms)
    except Unsupported:
        return _NO_PLAN
    (l,) = p.launches
    try:
        k = kernel(l.kernel, device, l.block, l.smem, l.cluster)
    except OnlineSoftmaxError:  # a cluster attribute refused, as _fitted_plan falls back for softmax
        return _NO_PLAN
    if k.fits is False:
        return _NO_PLAN
    tail = (np.int64(M), np.int32(N), np.int64(sx), np.int64(sg), np.int64(ignore_index), np.float32(eps),
            np.float32(z), np.float32(1.0 / N))
    return k.bind(l.grid, tail, 6, pdl)


class CrossEntropyStep:
    """The op's forward on the row kernel for one layout and option set, its three launches prepared once (the eager
    hot path: per call, only pointers): ce_targets (the targets' check and the reduction's scale, into the info
    floats and the pinned slot), ce_row (programmatic right after it) and ce_loss (programmatic after ce_row; none
    for reduction "none"). The per-row outputs live in one fp32 buffer of buffer_size(): the rows' lse, then their
    losses (unless the caller gives them a tensor of their own), then the 3 info floats."""

    __slots__ = ("M", "targets", "row", "loss")

    def __init__(self, row, x: torch.Tensor, ignore_index: int, reduction: str):
        M, V = x.shape
        device, mean = x.get_device(), int(reduction == "mean")
        self.M, self.row = M, row
        self.targets = _targets_launch(device, V, ignore_index, mean)
        self.loss = None if reduction == "none" else _loss_launch(device, x.dtype, mean, True)

    def buffer_size(self) -> int:
        return 2 * self.M + 3

    def __call__(self, px: int, pt: int, pg: int, pbuf: int, host: int, ploss: int, prows: int = 0) -> None:
        """The forward's launches: logits at px, targets (int64) at pt, the gradient to pg, the buffer at pbuf, the
        pinned slot at host (or 0), the reduced loss (0-d, x's dtype) to ploss (0: reduction "none"), the rows'
        losses to prows (0: in the buffer)."""
        M = self.M
        lse, rows, info = pbuf, prows or pbuf + 4 * M, pbuf + 8 * M
        self.targets.rows(1, M, pt, info, host)
        self.row(px, pt, pg, rows, lse, info)
        if ploss:
            self.loss.rows(1, M, rows, info, ploss)


_ce_steps = BoundedCache(ENTRY_CACHE)


def cross_entropy_step(x: torch.Tensor, grad: torch.Tensor, ignore_index: int, label_smoothing: float,
                       z_loss: float, reduction: str) -> Optional[CrossEntropyStep]:
    """The CrossEntropyStep of these logits x (M, V) and gradient (x's layout rules as cross_entropy's), or None
    where no ce_row plan takes them. Its ce_row follows ce_targets programmatically: the caller queues nothing
    between them (the targets' slot is one the kernel writes itself)."""
    key = (tuple(x.shape), x.stride(), grad.stride(), x.dtype, x.get_device(),
           _alignment(x.data_ptr(), 0, grad.data_ptr()), ignore_index, label_smoothing, z_loss, reduction)
    e = _ce_steps.get(key)
    if e is None:
        def make():
            row = _row_launch(x, grad, ignore_index, label_smoothing, z_loss, True)
            return _NO_PLAN if row is _NO_PLAN else CrossEntropyStep(row, x, ignore_index, reduction)
        e = _ce_steps.get_or_make(key, make)
    return None if e is _NO_PLAN else e


# ---- cross-entropy's small launches (softmax.cu: ce_targets, ce_loss, ce_scale), prepared once per geometry ------

_ce_small = BoundedCache(ENTRY_CACHE)


def _small(name: str, device: int, block: int, tail: tuple, pointers: int, pdl: bool = False):
    """A prepared launch of one of the small kernels; tail: (M, ...) as plain ints (the cache key), converted to the
    kernel's scalar types by _SMALL_TYPES; pdl: a programmatic launch (the kernel waits for the one before)."""
    key = (name, device, block, tail, pdl)
    e = _ce_small.get(key)
    if e is None:
        e = _ce_small.get_or_make(key, lambda: kernel(name, device, (block,), 0, 1).bind(
            1, tuple(np.asarray(v, t) for v, t in zip(tail, _SMALL_TYPES[name.split("<")[0]])), pointers, pdl))
    return e


_SMALL_TYPES = {"ce_targets": (np.int64, np.int32, np.int64, np.int32), "ce_loss": (np.int64, np.int32),
                "ce_scale": (np.int64, np.int32, np.int64, np.int64)}


def _targets_launch(device: int, V: int, ignore_index: int, mean: bool):
    """ce_targets' prepared launch (rows(1, M, target, info, host))."""
    return _small("ce_targets", device, 1024, (0, V, ignore_index, int(mean)), 3)


def _loss_launch(device: int, dtype, mean: bool, pdl: bool):
    """ce_loss's prepared launch into a 0-d `dtype` loss (rows(1, M, rows, info, out))."""
    return _small(f"ce_loss<{DT_CODE[dtype]}>", device, 1024, (0, int(mean)), 3, pdl)


def cross_entropy_targets(target: torch.Tensor, V: int, ignore_index: int, mean: bool, host: int = 0) -> torch.Tensor:
    """An fp32 buffer of 3 whose [0] is the gradient's scale (1 / rows whose target is not ignore_index when `mean`,
    else 1), [1] those rows, [2] 1.0 if one of their targets is out of [0, V): one launch, no sync. target (M,) int64
    contiguous on a CUDA device. host: the address of 3 floats of pinned memory the device addresses as is
    (launch.host_mapped) that get the same values, [2] last, or 0."""
    info = torch.empty(3, dtype=torch.float32, device=target.device)
    M = target.numel()
    _targets_launch(target.get_device(), V, ignore_index, mean).rows(1, M, target.data_ptr(), info.data_ptr(), host)
    return info


def cross_entropy_loss(rows: torch.Tensor, buf: torch.Tensor, out: torch.Tensor, mean: bool,
                       after_rows: bool = False) -> None:
    """out (a 0-d tensor, fp32 / fp16 / bf16) <- the sum of rows (M,) fp32, times buf[0] when `mean`. after_rows:
    ce_row wrote `rows` in the launch just before this one, so this one is queued as a programmatic launch that
    the GPU may schedule during ce_row's last CTAs (it waits for ce_row's grid before reading)."""
    _loss_launch(rows.get_device(), out.dtype, mean, after_rows).rows(1, rows.numel(), rows.data_ptr(), buf.data_ptr(),
                                                                      out.data_ptr())


def cross_entropy_scale(g: torch.Tensor, go: torch.Tensor) -> None:
    """g (M, N) *= go in place: one factor (go.numel() == 1) or one per row, in g's dtype; rows whose factor is 1
    are left untouched, decided on the device (loss.backward() passes 1: one launch, no pass over g)."""
    cross_entropy_scaler(g)(go)


def cross_entropy_scaler(g: torch.Tensor):
    """cross_entropy_scale(g, go) as a callable of go, everything about g prepared now: the op's forward makes it,
    so that its backward, on autograd's worker thread, does little more than the launch."""
    return functools.partial(_scale_launch(g), g.data_ptr())


class _ScaleLaunch:
    """ce_scale for one gradient layout (cached by _scale_launch): called with the gradient's address and go."""

    __slots__ = ("M", "grid", "dtype", "one", "name", "device", "tail")

    def __init__(self, M: int, N: int, sg: int, W: int, dtype, device: int):
        self.M, self.dtype, self.device = M, dtype, device
        self.name, self.tail = f"ce_scale<{DT_CODE[dtype]},{W}>", (0, N, sg)
        self.one = _small(self.name, device, 512, self.tail + (0,), 2)  # a single factor, the usual case
        self.grid = min(M, _stable.get(device) or _stable_rows_of(device))  # 4 CTAs per SM at most

    def __call__(self, pg: int, go: torch.Tensor) -> None:
        if go.dtype != self.dtype:
            go = go.to(self.dtype)
        launch = self.one if go.numel() == 1 else _small(self.name, self.device, 512, self.tail + (go.stride(-1),), 2)
        launch.rows(self.grid, self.M, pg, go.data_ptr())


_scales = BoundedCache(ENTRY_CACHE)


def _scale_launch(g: torch.Tensor):
    """The _ScaleLaunch of g (M, N) (rows of unit stride), or a no-op where g is empty."""
    M, N = g.shape
    if M == 0 or N == 0:
        return lambda pg, go: None
    if N > 1 and g.stride(1) != 1:
        raise OnlineSoftmaxError(f"cross_entropy_scale: rows of unit stride expected, got strides {g.stride()}")
    sg = g.stride(0) if M > 1 else N
    V = vec_width(g.dtype)
    W = V if (g.data_ptr() % 16 == 0 and N % V == 0 and sg % V == 0) else 1
    key = (M, N, sg, W, g.dtype, g.get_device())
    e = _scales.get(key)
    if e is None:
        e = _scales.get_or_make(key, lambda: _ScaleLaunch(*key))
    return e

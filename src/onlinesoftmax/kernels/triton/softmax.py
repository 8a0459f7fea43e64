"""Triton softmax / log-softmax, forward and backward: the kernels of the three regimes
(rules.py describes them and decides among them) and their launchers.

Everything here works on 2-D tensors (M, N) with column stride 1 and any row stride, in fp32, fp16
or bf16, accumulating in fp32 and writing the input dtype into a preallocated `out`. The semantics
are those of `onlinesoftmax.reference` (and `state.py` for the merge):

    softmax(x)      = exp(x - m) / d                      m = max x, d = sum exp(x - m)
    log_softmax(x)  = (x - m) - log d
    softmax_backward(y, dy)      dx = y * (dy - sum(dy * y))
    log_softmax_backward(y, dy)  dx = dy - exp(y) * sum(dy)     (0 for a row whose y is all -inf)

- a row of -inf: softmax 0, log_softmax -inf (the max is shifted by 0 instead of -inf: `_guard`);
- a row holding nan or +inf: nan across the row. We do NOT rely on `tl.max` propagating nan (on
  the GPU it lowers to maxnum, which drops nan; the interpreter differs again): a nan anywhere
  makes its exp nan, hence d nan, hence every output of the row nan. +inf gives m = +inf and
  exp(inf - inf) = nan in d the same way;
- exp is `exp2((x - m) * log2 e)` with x - m <= 0, so nothing overflows near the dtype max.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Optional

import torch
import triton
import triton.language as tl

from ...errors import OnlineSoftmaxError
from . import rules
from .rules import pick_regime

LOG2E = tl.constexpr(1.4426950408889634)

_SMS: dict = {}


def sm_count(device: torch.device) -> int:
    """The device's SM count (cached), or the H200's 132 for CPU tensors in the interpreter."""
    if device.type != "cuda":
        return rules.INTERPRETER_SMS
    index = device.index if device.index is not None else torch.cuda.current_device()
    if index not in _SMS:
        _SMS[index] = torch.cuda.get_device_properties(index).multi_processor_count
    return _SMS[index]


def interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


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
    """Launch, retrying without software pipelining if the pipelined kernel does not fit."""
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


def _check_2d(name: str, t: torch.Tensor, shape=None) -> None:
    if t.dim() != 2:
        raise OnlineSoftmaxError(f"{name} must be 2-D (M, N), got shape {tuple(t.shape)}")
    if shape is not None and tuple(t.shape) != tuple(shape):
        raise OnlineSoftmaxError(f"{name} has shape {tuple(t.shape)}, expected {tuple(shape)}")
    if t.shape[1] > 1 and t.stride(1) != 1:
        raise OnlineSoftmaxError(f"{name} must have column stride 1, got strides {t.stride()}")


# ---------------------------------------------------------------------------------------------
# Shared pieces of the kernels
# ---------------------------------------------------------------------------------------------
def _device_fn(fn):
    """@triton.jit for helpers called from the kernels. Under TRITON_INTERPRET=1 the helper stays a
    plain Python function: the interpreter re-patches triton.language on every call of a nested
    jit function (~10 ms each, most of the CPU test time), and the kernel has patched it already."""
    return fn if interpreting() else triton.jit(fn)


@_device_fn
def _guard(m):
    """The max to subtract: m, or 0 where m = -inf, so an empty state stays (-inf, 0) (state.safe_shift)."""
    return tl.where(m == float("-inf"), 0.0, m)


@_device_fn
def _fold(m, d, x):
    """Fold values x into per-lane states (m, d) with one exp per element:
    x > m:  (x, d * exp(m - x) + 1)      else:  (m, d + exp(x - m)).
    -inf adds nothing (and -inf - -inf would be nan); a nan x makes d nan for good; +inf makes
    m = +inf, and the final merge computes exp(inf - inf) = nan for that lane."""
    e = tl.exp2(-tl.abs(x - m) * LOG2E)
    e = tl.where(x == float("-inf"), 0.0, e)
    bigger = x > m
    d = tl.where(bigger, d * e + 1.0, d + e)
    m = tl.where(bigger, x, m)
    return m, d


@_device_fn
def _merge_lanes(m_vec, d_vec):
    """The guarded merge of a vector of states into one: (shift, sum d_i exp(m_i - shift)) with
    shift = max m_i, or 0 when that is -inf."""
    m = tl.max(m_vec, 0)
    shift = _guard(m)
    d = tl.sum(d_vec * tl.exp2((m_vec - shift) * LOG2E), 0)
    return shift, d


@_device_fn
def _normalise(x, shift, d, LOG: tl.constexpr):
    """softmax or log_softmax of values x of a row whose final state is (shift, d); 0 / -inf for
    an empty row (d = 0), nan for a row whose d is nan."""
    z = x - shift
    if LOG:
        return z - tl.log(tl.where(d == 0, 1.0, d))
    else:
        return tl.exp2(z * LOG2E) * (1.0 / tl.where(d == 0, float("inf"), d))


@_device_fn
def _grad(y, dy, s, live, LOG: tl.constexpr):
    """dx from y, dy and the row's reduction s (sum dy*y, or sum dy for log_softmax); `live` is 0
    for a log_softmax row whose y is all -inf, whose gradient is 0."""
    if LOG:
        return tl.where(live > 0, dy - tl.exp2(y * LOG2E) * s, 0.0)
    else:
        return y * (dy - s)


@_device_fn
def _wait_for(count_ptr, target):
    """Spin until *count_ptr >= target (acquire: the partials published before it are visible)."""
    n = tl.atomic_add(count_ptr, 0, sem="acquire")
    while n < target:
        n = tl.atomic_add(count_ptr, 0, sem="acquire")


# ---------------------------------------------------------------------------------------------
# Regime 1: rows in registers, several rows per tile, persistent grid
#   forward:  read x once, write y once            2*M*N*size bytes
#   backward: read y and dy once, write dx once    3*M*N*size bytes
# ---------------------------------------------------------------------------------------------
@triton.jit
def _rows_fwd_kernel(x_ptr, y_ptr, M, N, stride_x, stride_y,
                     BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, LOG: tl.constexpr,
                     NUM_STAGES: tl.constexpr):
    pid = tl.program_id(0)
    nprog = tl.num_programs(0)
    cols = tl.arange(0, BLOCK_N)
    col_ok = cols < N
    n_blocks = tl.cdiv(M, BLOCK_M)
    for rb in tl.range(pid, n_blocks, nprog, num_stages=NUM_STAGES):
        rows = (rb * BLOCK_M + tl.arange(0, BLOCK_M)).to(tl.int64)
        ok = (rows < M)[:, None] & col_ok[None, :]
        x = tl.load(x_ptr + rows[:, None] * stride_x + cols[None, :], mask=ok, other=float("-inf"))
        x = x.to(tl.float32)
        z = x - _guard(tl.max(x, axis=1))[:, None]
        e = tl.exp2(z * LOG2E)  # the one exp per element
        d = tl.sum(e, axis=1)[:, None]
        if LOG:
            y = z - tl.log(tl.where(d == 0, 1.0, d))
        else:
            y = e * (1.0 / tl.where(d == 0, float("inf"), d))
        tl.store(y_ptr + rows[:, None] * stride_y + cols[None, :], y.to(y_ptr.dtype.element_ty), mask=ok)


@triton.jit
def _rows_bwd_kernel(y_ptr, dy_ptr, dx_ptr, M, N, stride_y, stride_dy, stride_dx,
                     BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, LOG: tl.constexpr,
                     NUM_STAGES: tl.constexpr):
    pid = tl.program_id(0)
    nprog = tl.num_programs(0)
    cols = tl.arange(0, BLOCK_N)
    col_ok = cols < N
    n_blocks = tl.cdiv(M, BLOCK_M)
    for rb in tl.range(pid, n_blocks, nprog, num_stages=NUM_STAGES):
        rows = (rb * BLOCK_M + tl.arange(0, BLOCK_M)).to(tl.int64)
        ok = (rows < M)[:, None] & col_ok[None, :]
        dy = tl.load(dy_ptr + rows[:, None] * stride_dy + cols[None, :], mask=ok, other=0.0).to(tl.float32)
        if LOG:
            y = tl.load(y_ptr + rows[:, None] * stride_y + cols[None, :], mask=ok, other=float("-inf"))
            y = y.to(tl.float32)
            s = tl.sum(dy, axis=1)
            live = tl.max(tl.where(y == float("-inf"), 0.0, 1.0), axis=1)
        else:
            y = tl.load(y_ptr + rows[:, None] * stride_y + cols[None, :], mask=ok, other=0.0).to(tl.float32)
            s = tl.sum(dy * y, axis=1)
            live = s  # unused
        dx = _grad(y, dy, s[:, None], live[:, None], LOG)
        tl.store(dx_ptr + rows[:, None] * stride_dx + cols[None, :], dx.to(dx_ptr.dtype.element_ty), mask=ok)


# ---------------------------------------------------------------------------------------------
# Regime 2: one row per program (persistent), chunked online fold, then a re-read
#   forward:  read x twice (second from L2 when it fits), write y   3*M*N*size bytes
#   backward: read y, dy twice, write dx                            5*M*N*size bytes
# ---------------------------------------------------------------------------------------------
@triton.jit
def _online_fwd_kernel(x_ptr, y_ptr, M, N, stride_x, stride_y,
                       CHUNK: tl.constexpr, LOG: tl.constexpr, NUM_STAGES: tl.constexpr):
    pid = tl.program_id(0)
    nprog = tl.num_programs(0)
    offs = tl.arange(0, CHUNK)
    n_chunks = tl.cdiv(N, CHUNK)
    for row in tl.range(pid, M, nprog):
        row64 = tl.cast(row, tl.int64)
        x_row = x_ptr + row64 * stride_x
        y_row = y_ptr + row64 * stride_y
        # pass 1: per-lane states, one exp per element
        m_vec = tl.full([CHUNK], float("-inf"), tl.float32)
        d_vec = tl.zeros([CHUNK], tl.float32)
        for i in tl.range(0, n_chunks, num_stages=NUM_STAGES):
            cols = i * CHUNK + offs
            x = tl.load(x_row + cols, mask=cols < N, other=float("-inf")).to(tl.float32)
            m_vec, d_vec = _fold(m_vec, d_vec, x)
        shift, d = _merge_lanes(m_vec, d_vec)
        # pass 2: re-read, last chunk first (the likeliest still in L2), normalise, write
        for i in tl.range(0, n_chunks, num_stages=NUM_STAGES):
            cols = (n_chunks - 1 - i) * CHUNK + offs
            ok = cols < N
            x = tl.load(x_row + cols, mask=ok, other=float("-inf")).to(tl.float32)
            y = _normalise(x, shift, d, LOG)
            tl.store(y_row + cols, y.to(y_ptr.dtype.element_ty), mask=ok)


@triton.jit
def _online_bwd_kernel(y_ptr, dy_ptr, dx_ptr, M, N, stride_y, stride_dy, stride_dx,
                       CHUNK: tl.constexpr, LOG: tl.constexpr, NUM_STAGES: tl.constexpr):
    pid = tl.program_id(0)
    nprog = tl.num_programs(0)
    offs = tl.arange(0, CHUNK)
    n_chunks = tl.cdiv(N, CHUNK)
    for row in tl.range(pid, M, nprog):
        row64 = tl.cast(row, tl.int64)
        y_row = y_ptr + row64 * stride_y
        dy_row = dy_ptr + row64 * stride_dy
        dx_row = dx_ptr + row64 * stride_dx
        acc = tl.zeros([CHUNK], tl.float32)
        live_vec = tl.zeros([CHUNK], tl.float32)
        for i in tl.range(0, n_chunks, num_stages=NUM_STAGES):
            cols = i * CHUNK + offs
            ok = cols < N
            dy = tl.load(dy_row + cols, mask=ok, other=0.0).to(tl.float32)
            if LOG:
                y = tl.load(y_row + cols, mask=ok, other=float("-inf")).to(tl.float32)
                acc += dy
                live_vec = tl.maximum(live_vec, tl.where(y == float("-inf"), 0.0, 1.0))
            else:
                y = tl.load(y_row + cols, mask=ok, other=0.0).to(tl.float32)
                acc += dy * y
        s = tl.sum(acc, 0)
        live = tl.max(live_vec, 0)
        for i in tl.range(0, n_chunks, num_stages=NUM_STAGES):
            cols = (n_chunks - 1 - i) * CHUNK + offs
            ok = cols < N
            dy = tl.load(dy_row + cols, mask=ok, other=0.0).to(tl.float32)
            y = tl.load(y_row + cols, mask=ok, other=0.0).to(tl.float32)
            dx = _grad(y, dy, s, live, LOG)
            tl.store(dx_row + cols, dx.to(dx_ptr.dtype.element_ty), mask=ok)


# ---------------------------------------------------------------------------------------------
# Regime 3: split rows. Chunk tasks handed out by an atomic ticket; ticket t
#   (a) reads chunk t, publishes its partial to ws[t] and counts it in sync[row]   (1 read)
#   (b) re-reads chunk t - LAG, waits for its row's C partials, merges, writes     (1 read, 1 write)
# sync = int32[M + 1]: M per-row counters, then the ticket; zeroed by the launcher.
#   forward:  2 reads + 1 write of M*N*size (the re-read within a LAG-chunk window, in L2)
#   backward: 4 reads + 1 write; plus workspace: 2 floats per chunk, C of them read per chunk
# ---------------------------------------------------------------------------------------------
@triton.jit
def _split_fwd_kernel(x_ptr, y_ptr, ws_ptr, sync_ptr, M, N, stride_x, stride_y, C, LAG,
                      CHUNK: tl.constexpr, PBLOCK: tl.constexpr, LOG: tl.constexpr):
    offs = tl.arange(0, CHUNK)
    pidx = tl.arange(0, PBLOCK)
    n_chunks = M * C
    n_tickets = n_chunks + LAG
    t = tl.atomic_add(sync_ptr + M, 1, sem="relaxed")
    while t < n_tickets:
        # issue both loads first (masked off when this ticket has no such half) ...
        r_row = t // C  # (a) reads chunk t
        r_cols = (t - r_row * C) * CHUNK + offs
        xr = tl.load(x_ptr + r_row.to(tl.int64) * stride_x + r_cols, mask=(r_cols < N) & (t < n_chunks),
                     other=float("-inf")).to(tl.float32)
        g = tl.maximum(t - LAG, 0)  # (b) writes chunk t - LAG
        w_row = g // C
        w_cols = (g - w_row * C) * CHUNK + offs
        w_ok = (w_cols < N) & (t >= LAG)
        xw = tl.load(x_ptr + w_row.to(tl.int64) * stride_x + w_cols, mask=w_ok,
                     other=float("-inf")).to(tl.float32)
        # ... so that the next ticket's round trip overlaps them
        t_next = tl.atomic_add(sync_ptr + M, 1, sem="relaxed")
        # (a) publish the partial state (m, d) of chunk t, then count it
        if t < n_chunks:
            m_part = tl.max(xr, 0)
            d_part = tl.sum(tl.exp2((xr - _guard(m_part)) * LOG2E), 0)
            tl.store(ws_ptr + 2 * t, m_part)
            tl.store(ws_ptr + 2 * t + 1, d_part)
            tl.debug_barrier()
            tl.atomic_add(sync_ptr + r_row, 1, sem="release")
        # (b) merge the C partials of row w_row (all from tickets < t), normalise chunk t - LAG
        if t >= LAG:
            _wait_for(sync_ptr + w_row, C)
            m_vec = tl.full([PBLOCK], float("-inf"), tl.float32)
            d_vec = tl.zeros([PBLOCK], tl.float32)
            for p0 in range(0, C, PBLOCK):
                p = p0 + pidx
                part = ws_ptr + 2 * (w_row * C + p)
                pm = tl.load(part, mask=p < C, other=float("-inf"), cache_modifier=".cg")
                pd = tl.load(part + 1, mask=p < C, other=0.0, cache_modifier=".cg")
                m_new = tl.maximum(m_vec, pm)
                s_new = _guard(m_new)
                d_vec = d_vec * tl.exp2((m_vec - s_new) * LOG2E) + pd * tl.exp2((pm - s_new) * LOG2E)
                m_vec = m_new
            shift, d = _merge_lanes(m_vec, d_vec)
            yw = _normalise(xw, shift, d, LOG)
            tl.store(y_ptr + w_row.to(tl.int64) * stride_y + w_cols, yw.to(y_ptr.dtype.element_ty), mask=w_ok)
        t = t_next


@triton.jit
def _split_bwd_kernel(y_ptr, dy_ptr, dx_ptr, ws_ptr, sync_ptr, M, N, stride_y, stride_dy, stride_dx,
                      C, LAG, CHUNK: tl.constexpr, PBLOCK: tl.constexpr, LOG: tl.constexpr):
    offs = tl.arange(0, CHUNK)
    pidx = tl.arange(0, PBLOCK)
    n_chunks = M * C
    n_tickets = n_chunks + LAG
    t = tl.atomic_add(sync_ptr + M, 1, sem="relaxed")
    while t < n_tickets:
        r_row = t // C  # (a) reads chunk t
        r_cols = (t - r_row * C) * CHUNK + offs
        r_ok = (r_cols < N) & (t < n_chunks)
        r_off = r_row.to(tl.int64)
        dyr = tl.load(dy_ptr + r_off * stride_dy + r_cols, mask=r_ok, other=0.0).to(tl.float32)
        yr = tl.load(y_ptr + r_off * stride_y + r_cols, mask=r_ok,
                     other=float("-inf") if LOG else 0.0).to(tl.float32)
        g = tl.maximum(t - LAG, 0)  # (b) writes chunk t - LAG
        w_row = g // C
        w_cols = (g - w_row * C) * CHUNK + offs
        w_ok = (w_cols < N) & (t >= LAG)
        w_off = w_row.to(tl.int64)
        dyw = tl.load(dy_ptr + w_off * stride_dy + w_cols, mask=w_ok, other=0.0).to(tl.float32)
        yw = tl.load(y_ptr + w_off * stride_y + w_cols, mask=w_ok, other=0.0).to(tl.float32)
        t_next = tl.atomic_add(sync_ptr + M, 1, sem="relaxed")
        # (a) publish (sum dy*y or sum dy, live flag) of chunk t, then count it
        if t < n_chunks:
            if LOG:
                s_part = tl.sum(dyr, 0)
                live_part = tl.max(tl.where(yr == float("-inf"), 0.0, 1.0), 0)
            else:
                s_part = tl.sum(dyr * yr, 0)
                live_part = s_part * 0.0
            tl.store(ws_ptr + 2 * t, s_part)
            tl.store(ws_ptr + 2 * t + 1, live_part)
            tl.debug_barrier()
            tl.atomic_add(sync_ptr + r_row, 1, sem="release")
        # (b) reduce the C partials of row w_row, write dx of chunk t - LAG
        if t >= LAG:
            _wait_for(sync_ptr + w_row, C)
            s_vec = tl.zeros([PBLOCK], tl.float32)
            live_vec = tl.zeros([PBLOCK], tl.float32)
            for p0 in range(0, C, PBLOCK):
                p = p0 + pidx
                part = ws_ptr + 2 * (w_row * C + p)
                s_vec += tl.load(part, mask=p < C, other=0.0, cache_modifier=".cg")
                live_vec = tl.maximum(live_vec, tl.load(part + 1, mask=p < C, other=0.0, cache_modifier=".cg"))
            dxw = _grad(yw, dyw, tl.sum(s_vec, 0), tl.max(live_vec, 0), LOG)
            tl.store(dx_ptr + w_off * stride_dx + w_cols, dxw.to(dx_ptr.dtype.element_ty), mask=w_ok)
        t = t_next


# ---------------------------------------------------------------------------------------------
# Launchers
# ---------------------------------------------------------------------------------------------
@dataclass
class Plan:
    """One launch: kernel, grid, arguments and meta-parameters (and the occupancy-cache key)."""

    kernel: object
    grid: tuple
    args: tuple
    meta: dict
    key: object
    config: object


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
    if regime == "rows":
        cfg = rules.rows_config(M, N, dtype, backward)
        key = ("rows", backward, cfg, log, dtype)
        grid = (_programs(key, cfg.num_warps, sms, rules.cdiv(M, cfg.BLOCK_M)),)
        return Plan(_rows_bwd_kernel if backward else _rows_fwd_kernel, grid, (*tensors, M, N, *strides),
                    dict(BLOCK_M=cfg.BLOCK_M, BLOCK_N=cfg.BLOCK_N, LOG=log, NUM_STAGES=cfg.num_stages,
                         num_warps=cfg.num_warps, num_stages=cfg.num_stages), key, cfg)
    if regime == "online":
        cfg = rules.online_config(N, dtype, backward)
        key = ("online", backward, cfg, log, dtype)
        grid = (min(M, rules.online_programs(sms)),)
        return Plan(_online_bwd_kernel if backward else _online_fwd_kernel, grid, (*tensors, M, N, *strides),
                    dict(CHUNK=cfg.CHUNK, LOG=log, NUM_STAGES=cfg.num_stages,
                         num_warps=cfg.num_warps, num_stages=cfg.num_stages), key, cfg)
    cfg = rules.split_config(M, N, sms, backward)
    programs = min(rules.split_programs(sms), 2 * M * cfg.C)  # never more than the tickets
    lag = rules.split_lag(cfg.C, M, programs)
    ws = workspace(2 * M * cfg.C, torch.float32, False)
    sync = workspace(M + 1, torch.int32, True)
    *inputs, out = tensors
    return Plan(_split_bwd_kernel if backward else _split_fwd_kernel, (programs,),
                (*inputs, out, ws, sync, M, N, *strides, cfg.C, lag),
                dict(CHUNK=cfg.CHUNK, PBLOCK=cfg.PBLOCK, LOG=log, num_warps=cfg.num_warps, num_stages=1), None, cfg)


def _run(backward: bool, log: bool, regime: Optional[str], tensors: tuple) -> None:
    out = tensors[-1]
    M, N = out.shape
    sms = sm_count(out.device)
    regime = regime or pick_regime(M, N, out.dtype, backward, sms)

    def workspace(n, dtype, zero):
        return (torch.zeros if zero else torch.empty)(n, dtype=dtype, device=out.device)

    p = plan(backward, log, regime, M, N, out.dtype, sms, tensors, tuple(t.stride(0) for t in tensors), workspace)
    if p is None:
        return
    if out.is_cuda and out.device.index != torch.cuda.current_device():
        # Triton launches on the current device's context and stream: make them the tensors' device
        with torch.cuda.device(out.device):
            _launch(p.kernel, p.grid, p.args, p.meta, p.key, out.device)
    else:
        _launch(p.kernel, p.grid, p.args, p.meta, p.key, out.device)


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

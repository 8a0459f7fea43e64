"""Production softmax / log_softmax forward and backward on CUDA (kernels/cuda/softmax.cu): launch plans,
launchers and one registry Variant per regime.

ops.py calls (x, y, dy: CUDA tensors of fp32 / fp16 / bf16, any shape and strides; `dim` in [0, ndim);
`out` contiguous with the input's shape and dtype, completely written):

    forward(x, out, dim, log)           out = softmax(x, dim), or log_softmax when log
    backward(y, dy, out, dim, log)      out = dx from the forward output y (probabilities, or log-probabilities)
    plan(M, N, dtype, op=...)           the launch plan (pure Python, no GPU): regime, kernels, grid, block

Layouts. The reduced dim last with stride 1 and the leading dims collapsing to one row stride: row kernels
(each input keeps its own row stride). Else a contiguous input with the dim not last: the strided kernel over
(outer, N, inner), no transpose copy. Else the inputs are made contiguous first (one copy each) and one of the
two applies.

Regimes (row layout), picked by `choose_regime` from N, M and the register budget of the op and dtype:
    warp     N <= warp_max_n (1024 fwd; 512 fp32 bwd): 2^lg lanes per row, RPT rows per lane group in flight
    block    one CTA (128..512 threads) per row, the row in registers (+ dynamic smem when SSLOTS > 0)
    cluster  a cluster of C CTAs per row (C <= 8, 16 for fp32 backward above 131072), partials through DSMEM;
             when rows are too few to fill the GPU, wider clusters (up to 16) with smaller shares per CTA
    split    few rows on the scalar path, or N beyond the cluster capacity: (m, d) per chunk into
             a cached fp32 workspace, then merge + re-read (an L2 hit for these sizes) + write
    columns  forward over a non-last dim of a contiguous tensor, (outer, N, inner), the columns on chip: a cluster
             of C CTAs (C <= 8) per strip of LANES x W columns, each CTA a band of rows; 1 read + 1 write
    strided  the same (and backward) when the columns do not fit on chip: two passes, the second from L2
The 16-byte vector path needs N (inner for strided), every row stride and every pointer to be multiples of
16 bytes; otherwise the plan picks the scalar instantiations (W = 1) of the same kernels.

Kernel sources are compiled per instantiation on first use (NVRTC, disk-cached); nothing here needs a GPU to
import, plan, compile or report resources. Per call: one dict lookup on (op, shape, strides, dim, dtype,
device, alignment), the argument tuple, the launch(es).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, replace
from typing import Optional

import numpy as np
import torch

from ..errors import OnlineSoftmaxError, Unavailable
from ..registry import OPS, Variant, register
from ..runtime import available
from ..runtime import launch as rt_launch
from ..runtime import nvrtc
from ..runtime.bounded import BoundedCache

FILE = "softmax.cu"
INSPECT_ARCH = "sm_90"  # what `resources` / the compile test report for without a GPU (the H200)
DEFAULT_SMS = 132  # H200; the real count is read from the device at run time

OP_CODE = {"softmax": 0, "log_softmax": 1, "softmax_backward": 2, "log_softmax_backward": 3}
FORWARD_OPS = ("softmax", "log_softmax")
BACKWARD_OPS = ("softmax_backward", "log_softmax_backward")
DT_CODE = {torch.float32: 0, torch.float16: 1, torch.bfloat16: 2}
DTYPES = (torch.float32, torch.float16, torch.bfloat16)
REGIMES = ("warp", "block", "cluster", "split", "columns", "strided")

# ---- tuning constants (the kernel-side ones must match softmax.cu) -------------------------------------
WARP_THREADS = 256  # SM_WARP_THREADS
ROW_MAX_THREADS = 512  # SM_ROW_MAX_THREADS; __launch_bounds__(512, 2): <= 64 registers, 2 CTAs/SM
ROW_MIN_THREADS = 128
SPLIT_THREADS = 256  # SM_SPLIT_THREADS
SPLIT_UNROLL = 4  # SM_SPLIT_UNROLL
STRIDED_THREADS = 512  # SM_STRIDED_THREADS; __launch_bounds__(512, 2)
REG_WORDS = 32  # per thread: the row's share held in registers (floats fwd, raw 32-bit words of y+dy bwd)
WARP_MAX_SLOTS = 8  # warp kernels: accesses per lane and row (scalar path: N <= 256)
MAX_RPT = 4  # warp kernels: rows per lane group
MAX_CLUSTER = 16  # 16 needs the non-portable cluster attribute (fp32 backward above 131072 only)
PORTABLE_CLUSTER = 8
FEW_ROWS_MIN_N = 4096  # rows this long and too few for a CTA per SM get wider clusters (or split); shorter ones
#                        are latency-bound either way
FEW_ROWS_CTAS_PER_SM = 2  # few rows: clusters sized for about this many CTAs per SM
SPLIT_CTAS_PER_SM = 4  # split: aim for this many CTAs per SM in total
SPLIT_MIN_CHUNK = 512  # split: at least this many accesses per CTA
COLUMNS_SMEM_SLOTS_FP32 = 12  # columns: 16-byte accesses per thread in shared memory (96 KB per 512-thread CTA)
COLUMNS_SMEM_SLOTS_16BIT = 8  # (64 KB: the 16-bit kernel's static tree arrays are twice as large)
STRIDED_CTAS_PER_SM = 2  # strided: persistent grid of this many CTAs per SM
STRIDED_L2_BUDGET = 32 << 20  # strided: strip bytes in flight (grid * N * strip) the second pass finds in L2
INT_MAX = 2**31 - 1
STATIC_SMEM_LIMIT = 48 * 1024


class Unsupported(OnlineSoftmaxError):
    """A shape the requested regime cannot take (plan with a forced regime)."""


# ---- small helpers --------------------------------------------------------------------------------------


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _pow2ceil(n: int) -> int:
    return 1 if n <= 1 else 1 << (n - 1).bit_length()


def _log2(n: int) -> int:
    return n.bit_length() - 1


_SIZES = {torch.float32: 4, torch.float16: 2, torch.bfloat16: 2}


def _check_op_dtype(op: str, dtype) -> None:
    if op not in OP_CODE:
        raise OnlineSoftmaxError(f"unknown op {op!r}; ops: {', '.join(OP_CODE)}")
    if dtype not in DT_CODE:
        raise OnlineSoftmaxError(f"dtype {dtype} not supported (float32, float16, bfloat16)")


# ---- tuning rules (pure functions of the shape; each one a named, testable decision) ---------------------


def vec_width(dtype) -> int:
    """Elements per 16-byte access: 4 fp32, 8 fp16/bf16."""
    return 16 // _SIZES[dtype]


def reg_slots(op: str, dtype, W: int) -> int:
    """Accesses per thread the row kernels hold in registers: REG_WORDS floats forward (the row is kept
    unpacked: softmax overwrites it with exp(x - m_thread), one exponential per element); REG_WORDS raw 32-bit
    words of y and dy backward (no exponential to save: unpacked when used)."""
    if op in FORWARD_OPS:
        return REG_WORDS // W
    words = max(1, W * _SIZES[dtype] // 4)  # per access and tensor (a 16-bit scalar still takes a register)
    return REG_WORDS // (2 * words)


def smem_slots(op: str, dtype, W: int) -> int:
    """Extra accesses per thread parked in dynamic shared memory when one CTA's registers are not enough
    (16-byte path only): as many as in registers, i.e. 64 KB (fp32 forward, any backward) per 512-thread CTA; 16-bit
    forward parks three times as many (96 KB: its data is 2 bytes an element in shared memory, 4 in registers), so
    one CTA holds 64K elements and a row of 262144 needs a cluster of 4. Two CTAs still fit an SM."""
    if W == 1:
        return 0
    rs = reg_slots(op, dtype, W)
    return 3 * rs if (op in FORWARD_OPS and dtype != torch.float32) else rs


def smem_bytes(op: str, W: int, threads: int, sslots: int) -> int:
    return sslots * threads * 16 * (1 if op in FORWARD_OPS else 2)


def warp_max_n(op: str, dtype, W: int) -> int:
    """Largest N the warp regime takes: 32 lanes x min(reg_slots, WARP_MAX_SLOTS) accesses x W."""
    return 32 * min(reg_slots(op, dtype, W), WARP_MAX_SLOTS) * W


def warp_config(op: str, dtype, W: int, N: int) -> tuple[int, int, int]:
    """(lg, slots, rpt): 2^lg lanes per row (the smallest power of 2 covering the row's accesses, <= 32),
    slots accesses per lane (power of 2), rpt rows per lane group: up to MAX_RPT while the rows' registers stay
    within the budget (half of it on the scalar path), so each thread keeps 32..64 bytes of loads in flight even
    for short rows."""
    nv = _cdiv(N, W)
    lanes = min(32, _pow2ceil(nv))
    slots = _pow2ceil(_cdiv(nv, lanes))
    cap = min(reg_slots(op, dtype, W), WARP_MAX_SLOTS)
    if slots > cap:
        raise Unsupported(f"N = {N} > {warp_max_n(op, dtype, W)}: too long for a warp per row")
    budget = reg_slots(op, dtype, W) // (2 if W == 1 else 1)  # scalar: every element has its own address
    rpt = max(1, min(MAX_RPT, budget // slots))
    return _log2(lanes), slots, rpt


def block_threads(op: str, dtype, W: int, N: int) -> tuple[int, int]:
    """(threads, slots) of one CTA per row holding the row in registers: half the register budget per thread
    when the threads suffice (more CTAs per SM, shorter per-thread chains), the whole budget at 512 threads."""
    nv = _cdiv(N, W)
    rs = reg_slots(op, dtype, W)
    half = max(1, rs // 2)
    threads = min(ROW_MAX_THREADS, max(ROW_MIN_THREADS, _pow2ceil(_cdiv(nv, half))))
    slots = half if nv <= threads * half else rs
    if nv > threads * slots:
        raise Unsupported(f"N = {N}: more than {ROW_MAX_THREADS * rs * W} elements do not fit one CTA's registers")
    return threads, slots


def row_capacity(op: str, dtype, W: int) -> int:
    """Elements one 512-thread CTA holds (registers + shared memory)."""
    return ROW_MAX_THREADS * (reg_slots(op, dtype, W) + smem_slots(op, dtype, W)) * W


def cluster_size(op: str, dtype, W: int, N: int) -> int:
    """CTAs per row: the smallest power of 2 whose CTAs hold the row (registers + smem)."""
    return _pow2ceil(_cdiv(N, row_capacity(op, dtype, W)))


def max_cluster(op: str, dtype) -> int:
    """Largest cluster a plan uses when rows are many: portable 8, except fp32 backward (y and dy: 16K elements per
    CTA) up to 16 to reach N = 262144 with two CTAs per SM."""
    return MAX_CLUSTER if (op in BACKWARD_OPS and dtype == torch.float32) else PORTABLE_CLUSTER


def _pow2floor(n: int) -> int:
    return 1 << (max(1, n).bit_length() - 1)


def cluster_config(op: str, dtype, W: int, M: int, N: int, sms: int) -> tuple[int, int, int]:
    """(C, threads, sslots) of the cluster regime. Many rows: the smallest cluster whose 512-thread CTAs hold the
    row in registers + shared memory. Few rows (M x C < SMs): a larger cluster (up to MAX_CLUSTER, at least
    ROW_MIN_THREADS x reg_slots accesses per CTA) so that the M x C CTAs give every SM about
    FEW_ROWS_CTAS_PER_SM, each holding its share in registers (fewer threads when it is small); shares that
    need shared memory keep the many-rows cluster. C == 1 means one CTA per row is as wide as it gets."""
    nv = _cdiv(N, W)
    rs = reg_slots(op, dtype, W)
    need = cluster_size(op, dtype, W, N)
    c = need
    if M * need < sms:
        fill = min(MAX_CLUSTER, _pow2floor(FEW_ROWS_CTAS_PER_SM * sms // M),
                   _pow2floor(nv // (ROW_MIN_THREADS * rs)))
        c = max(need, fill)
    per_cta = _cdiv(nv, c)
    if per_cta <= ROW_MAX_THREADS * rs:
        return c, min(ROW_MAX_THREADS, max(ROW_MIN_THREADS, _pow2ceil(_cdiv(per_cta, rs)))), 0
    # shares beyond the registers: full CTAs (registers + smem), as few as hold the row (a CTA's share is its
    # capacity, so a wider cluster would leave CTAs empty)
    return need, ROW_MAX_THREADS, smem_slots(op, dtype, W)


def split_parts(M: int, N: int, W: int, sms: int, min_parts: int = 1) -> tuple[int, int]:
    """(parts, chunk): each row cut into `parts` chunks of `chunk` accesses (a multiple of the CTA width), about
    SPLIT_CTAS_PER_SM CTAs per SM in total, at least SPLIT_MIN_CHUNK accesses per CTA."""
    nv = _cdiv(N, W)
    want = max(1, _cdiv(SPLIT_CTAS_PER_SM * sms, M))
    chunk = max(SPLIT_MIN_CHUNK, _cdiv(nv, want))
    if min_parts > 1 and nv >= min_parts:
        chunk = min(chunk, _cdiv(nv, min_parts))
    chunk = _cdiv(chunk, SPLIT_THREADS) * SPLIT_THREADS if chunk >= SPLIT_THREADS else chunk
    parts = _cdiv(nv, chunk)
    return parts, chunk


def strided_tile(op: str, dtype, W: int, N: int, inner: int, sms: int) -> tuple[int, int, int, int]:
    """(lanes, rows, strips, cap) of the strided kernel, whose grid is min(outer x strips, cap). rows: threads
    down N (up to the CTA), lanes: threads across `inner` (W columns each). The persistent grid is STRIDED_CTAS_PER_SM per SM; lanes shrink until the
    strips in progress (grid x N x lanes x W x size x inputs) fit STRIDED_L2_BUDGET, so the second pass re-reads
    from L2; when one access per row is already the narrowest strip, the grid shrinks (to one CTA per SM at
    least) instead."""
    size = _SIZES[dtype]
    inputs = 1 if op in FORWARD_OPS else 2
    need = _cdiv(inner, W)
    lanes = max(1, min(STRIDED_THREADS // min(_pow2ceil(N), STRIDED_THREADS), _pow2ceil(need)))
    grid_cap = STRIDED_CTAS_PER_SM * sms
    while lanes > 1 and grid_cap * N * lanes * W * size * inputs > STRIDED_L2_BUDGET:
        lanes //= 2
    rows = min(_pow2ceil(N), STRIDED_THREADS // lanes)
    strips = _cdiv(need, lanes)
    # one strip is as narrow as it gets (one access wide): fewer CTAs in flight instead, down to one per SM
    per_cta = N * lanes * W * size * inputs
    return lanes, rows, strips, min(grid_cap, max(sms, STRIDED_L2_BUDGET // per_cta))


def columns_slots(op: str, dtype, W: int) -> int:
    """Rows per thread the columns kernel holds in registers: half the row kernels' (each thread also carries W
    (m, d) pairs, one per column), a quarter on the scalar path (every row has its own address)."""
    return max(1, reg_slots(op, dtype, W) // (2 if W > 1 else 4))


def columns_smem_slots(dtype, W: int) -> int:
    """16-byte accesses per thread the columns kernel parks in shared memory (16-byte path only): 96 KB per CTA in
    fp32 (128-byte pieces reach 8192 rows with a cluster of 8), 64 KB for 16-bit data (its per-column tree takes
    32 KB of static shared memory); two CTAs per SM either way."""
    if W == 1:
        return 0
    return COLUMNS_SMEM_SLOTS_FP32 if dtype == torch.float32 else COLUMNS_SMEM_SLOTS_16BIT


def columns_config(op: str, dtype, W: int, N: int, inner: int) -> Optional[tuple[int, int, int]]:
    """(lanes, C, sslots) of the columns kernel (forward only), or None when N does not fit a cluster of 8: a
    512-thread CTA is (lanes, 512 / lanes) threads, lanes x W columns wide; each CTA a band of ceil(N / C) rows,
    each thread columns_slots rows in registers (+ sslots in shared memory). Preference: 128-byte row pieces
    (in registers, then with shared memory), then 64-byte, then narrower (measured at dim 0 of 8192^2 fp32:
    64-byte pieces 41% of copy, 128-byte 67%: the L2 is the limit at 64, benchmarks/results/h200-*-columns.txt);
    short columns get more lanes instead of idle threads down N."""
    if op not in FORWARD_OPS:
        return None
    rs, ss = columns_slots(op, dtype, W), columns_smem_slots(dtype, W)
    across = _pow2ceil(_cdiv(inner, W))
    for pref, sslots in ((8, 0), (8, ss), (4, 0), (4, ss), (2, 0), (2, ss), (1, 0), (1, ss)):
        lanes = min(pref, across)
        lanes = max(lanes, min(across, 32, ROW_MAX_THREADS // _pow2ceil(_cdiv(N, rs + sslots))))
        c = _pow2ceil(_cdiv(N, (ROW_MAX_THREADS // lanes) * (rs + sslots)))
        if c <= PORTABLE_CLUSTER:
            return lanes, c, sslots
    return None


def choose_regime(op: str, dtype, W: int, M: int, N: int, sms: int) -> str:
    """Row layout: warp for short rows, then one CTA, then a cluster; when rows are too few to give every SM a CTA
    (and long enough to matter) a wider cluster on the 16-byte path, split on the scalar one; split when the row
    is beyond the cluster capacity."""
    if N <= warp_max_n(op, dtype, W):
        return "warp"
    ctas_per_row = None
    if _cdiv(N, W) <= ROW_MAX_THREADS * reg_slots(op, dtype, W):
        ctas_per_row = 1
    elif W > 1:
        c = cluster_size(op, dtype, W, N)
        if c <= max_cluster(op, dtype):
            ctas_per_row = c
    if ctas_per_row is None:
        return "split"
    if N >= FEW_ROWS_MIN_N and M * ctas_per_row < sms:
        if W == 1:
            return "split"
        if cluster_config(op, dtype, W, M, N, sms)[0] > 1:
            return "cluster"
    return "block" if ctas_per_row == 1 else "cluster"


# ---- plans ------------------------------------------------------------------------------------------------


def stable_rows(sms: int) -> int:
    """From this many rows on, a plan depends on M only through its grids and workspace (no few-rows rule
    applies: M x CTAs per row >= SMs, and split_parts wants one chunk per row): Plan.at moves it to another M."""
    return SPLIT_CTAS_PER_SM * sms


def _grid(M: int, per: tuple) -> int:
    """A launch's grid for M rows: ceil(M x mul / div), at most cap (0: no cap)."""
    mul, div, cap = per
    g = _cdiv(M * mul, div)
    return min(g, cap) if cap else g


@dataclass(frozen=True)
class Launch:
    kernel: str  # name expression in softmax.cu
    grid: int  # blocks, or clusters when cluster > 1 (cuda.core's LaunchConfig convention)
    block: tuple  # (x,) or (x, y)
    cluster: int = 1
    smem: int = 0  # dynamic shared memory bytes
    sig: str = "rows"  # argument signature: rows | warp | stats | apply | strided
    per: tuple = (1, 1, 0)  # the grid rule: grid = _grid(M, per)


def _launch(M: int, kernel: str, per: tuple, block: tuple, cluster: int = 1, smem: int = 0,
            sig: str = "rows") -> Launch:
    return Launch(kernel, _grid(M, per), block, cluster, smem, sig, per)


@dataclass(frozen=True)
class Plan:
    regime: str
    op: str
    dtype: torch.dtype
    M: int  # rows (outer for strided)
    N: int
    W: int  # elements per access (16-byte vector or 1)
    launches: tuple
    inner: int = 1
    lg: int = 0  # warp: log2 lanes per row
    parts: int = 0  # split: chunks per row
    chunk: int = 0  # split: accesses per chunk
    strips: int = 0  # strided: column strips per outer index
    items: int = 0  # strided: outer * strips
    workspace: int = 0  # split: fp32 elements (2 per chunk)

    @property
    def kernels(self) -> tuple:
        return tuple(l.kernel for l in self.launches)

    def at(self, M: int) -> "Plan":
        """This plan for M rows: the same kernels and geometry, the grids and workspace of M. Equal to plan(M, ...)
        when both row counts are at least stable_rows(sms) (a test checks it over the rules' breakpoints)."""
        if M == self.M:
            return self
        launches = tuple(replace(l, grid=_grid(M, l.per)) for l in self.launches)
        for l in launches:
            if l.grid * l.cluster > INT_MAX:
                raise Unsupported(f"{self.regime}: {l.grid * l.cluster} CTAs exceed the grid limit")
        return replace(self, M=M, launches=launches, items=M * self.strips, workspace=2 * M * self.parts)


def plan(M: int, N: int, dtype, op: str = "softmax", *, vec: bool = True, inner: int = 1, layout: str = "rows",
         sms: int = DEFAULT_SMS, regime: Optional[str] = None) -> Plan:
    """The launch plan for `op` on M rows of N (layout "rows"), or on (outer=M, N, inner) (layout "strided").
    vec: the 16-byte path is allowed (pointers, strides and N or inner aligned; the plan also checks N / inner).
    regime: force one (the registry variants do); raises Unsupported if it cannot take the shape."""
    p = _plan(M, N, dtype, op, vec, inner, layout, sms, regime)
    for l in p.launches:
        if l.grid * l.cluster > INT_MAX:
            raise Unsupported(f"{p.regime}: {l.grid * l.cluster} CTAs exceed the grid limit")
    return p


def _plan(M: int, N: int, dtype, op: str, vec: bool, inner: int, layout: str, sms: int,
          regime: Optional[str]) -> Plan:
    _check_op_dtype(op, dtype)
    if M < 1 or N < 1 or inner < 1:
        raise Unsupported(f"empty shape (M={M}, N={N}, inner={inner})")
    if N > INT_MAX // 2:
        raise Unsupported(f"N = {N} >= 2^30: the kernels index a row with 32-bit offsets")
    V = vec_width(dtype)
    o, dt = OP_CODE[op], DT_CODE[dtype]
    fwd = op in FORWARD_OPS
    pre = "fwd" if fwd else "bwd"
    if layout == "strided" or regime in ("columns", "strided"):
        if layout == "rows":  # a (M, N) row input through the strided kernels: (outer=M, N, inner=1)
            inner = 1
        W = V if (vec and inner % V == 0) else 1
        cfg = columns_config(op, dtype, W, N, inner) if regime != "strided" else None
        if cfg is not None:
            lanes, c, sslots = cfg
            strips = _cdiv(_cdiv(inner, W), lanes)
            items = M * strips
            name = f"fwd_cols<{o},{dt},{W},{columns_slots(op, dtype, W)},{sslots},{c}>"
            launch = _launch(M, name, (strips, 1, 0), (lanes, ROW_MAX_THREADS // lanes), c,
                             smem_bytes(op, W, ROW_MAX_THREADS, sslots), sig="strided")
            return Plan("columns", op, dtype, M, N, W, (launch,), inner=inner, strips=strips, items=items)
        if regime == "columns":
            cap = PORTABLE_CLUSTER * ROW_MAX_THREADS * (columns_slots(op, dtype, W) + columns_smem_slots(dtype, W))
            raise Unsupported(f"{op}: the columns kernel is forward only, N up to {cap} here")
        lanes, rows, strips, cap = strided_tile(op, dtype, W, N, inner, sms)
        items = M * strips
        name = f"{pre}_strided<{o},{dt},{W}>"
        return Plan("strided", op, dtype, M, N, W, (_launch(M, name, (strips, 1, cap), (lanes, rows), sig="strided"),),
                    inner=inner, strips=strips, items=items)
    if layout != "rows":
        raise OnlineSoftmaxError(f"unknown layout {layout!r}")
    W = V if (vec and N % V == 0) else 1
    chosen = regime or choose_regime(op, dtype, W, M, N, sms)
    if chosen == "warp":
        lg, slots, rpt = warp_config(op, dtype, W, N)
        per_cta = (WARP_THREADS >> lg) * rpt
        name = f"{pre}_warp<{o},{dt},{W},{slots},{rpt}>"
        return Plan("warp", op, dtype, M, N, W, (_launch(M, name, (1, per_cta, 0), (WARP_THREADS,), sig="warp"),),
                    lg=lg)
    if chosen == "block":
        if _cdiv(N, W) <= ROW_MAX_THREADS * reg_slots(op, dtype, W):
            threads, slots = block_threads(op, dtype, W, N)
            sslots = 0
        elif W > 1 and N <= row_capacity(op, dtype, W):
            threads, slots, sslots = ROW_MAX_THREADS, reg_slots(op, dtype, W), smem_slots(op, dtype, W)
        else:
            raise Unsupported(f"N = {N} does not fit one CTA ({ROW_MAX_THREADS * reg_slots(op, dtype, W) * W} "
                              f"elements in registers" + (f", {row_capacity(op, dtype, W)} with shared memory)"
                                                          if W > 1 else "; the scalar path has no smem slots)"))
        name = f"{pre}_row<{o},{dt},{W},{threads},{slots},{sslots},1>"
        return Plan("block", op, dtype, M, N, W,
                    (_launch(M, name, (1, 1, 0), (threads,), 1, smem_bytes(op, W, threads, sslots)),))
    if chosen == "cluster":
        if W == 1:
            raise Unsupported(f"N = {N} is not a multiple of {V} (or the data is not 16-byte aligned): the cluster "
                              "regime needs 16-byte aligned rows; unaligned long rows go to the split regime")
        if cluster_size(op, dtype, W, N) > max_cluster(op, dtype):
            raise Unsupported(f"N = {N} needs {cluster_size(op, dtype, W, N)} CTAs per row "
                              f"(> {max_cluster(op, dtype)}); rows up to "
                              f"{max_cluster(op, dtype) * row_capacity(op, dtype, W)} elements")
        c, threads, sslots = cluster_config(op, dtype, W, M, N, sms)
        c = max(2, c)
        slots = reg_slots(op, dtype, W)
        name = f"{pre}_row<{o},{dt},{W},{threads},{slots},{sslots},{c}>"
        return Plan("cluster", op, dtype, M, N, W,
                    (_launch(M, name, (1, 1, 0), (threads,), c, smem_bytes(op, W, threads, sslots)),))
    if chosen == "split":
        parts, chunk = split_parts(M, N, W, sms, min_parts=2 if regime == "split" else 1)
        if M * parts > INT_MAX:
            raise Unsupported(f"{M} rows x {parts} chunks exceed the grid")
        stats = f"fwd_split_stats<{dt},{W}>" if fwd else f"bwd_split_stats<{o},{dt},{W}>"
        apply = f"{pre}_split_apply<{o},{dt},{W}>"
        return Plan("split", op, dtype, M, N, W,
                    (_launch(M, stats, (parts, 1, 0), (SPLIT_THREADS,), sig="stats"),
                     _launch(M, apply, (parts, 1, 0), (SPLIT_THREADS,), sig="apply")),
                    parts=parts, chunk=chunk, workspace=2 * M * parts)
    raise OnlineSoftmaxError(f"unknown regime {chosen!r}; regimes: {', '.join(REGIMES)}")


# ---- the instantiations the plans can pick (for the compile test and `resource_table`) -------------------


def _probe_ns(W: int) -> list[int]:
    """Row lengths on both sides of every breakpoint of the rules (powers of two times W, and between)."""
    ns = set(range(1, 40))
    for k in range(5, 20):
        p = 1 << k
        ns.update({p - 1, p, p + 1, p + p // 2})
    return sorted({n * W for n in ns} | ns)


@functools.lru_cache(maxsize=None)
def _instantiations() -> tuple:
    return tuple(sorted((k, tuple(sorted(v))) for k, v in _probe_instantiations().items()))


def instantiations() -> dict[str, set]:
    """Every kernel name expression `plan` can return -> {regimes that use it} (see _probe_instantiations)."""
    return {k: set(v) for k, v in _instantiations()}


def _probe_instantiations() -> dict[str, set]:
    """Every kernel name expression `plan` can return, by probing the rules over shapes on both sides of every
    breakpoint (the rules are step functions of N at powers of two), every op, dtype, alignment, regime and
    layout. Maps name -> {regimes that use it}."""
    seen: dict[str, set] = {}

    def add(p: Plan) -> None:
        for l in p.launches:
            seen.setdefault(l.kernel, set()).add(p.regime)

    for op in OP_CODE:
        for dtype in DTYPES:
            for vec in (True, False):
                W = vec_width(dtype) if vec else 1
                for N in _probe_ns(W):
                    for M in (1, 64, 1 << 20):
                        try:
                            add(plan(M, N, dtype, op, vec=vec))
                        except Unsupported:
                            pass
                    for regime in ("warp", "block", "cluster", "split", "columns"):
                        try:
                            add(plan(2, N, dtype, op, vec=vec, regime=regime))
                        except Unsupported:
                            pass
                for inner in (1, 3, W, 64 * W):
                    for N in _probe_ns(W)[::3]:
                        for regime in (None, "strided"):
                            try:
                                add(plan(4, N, dtype, op, vec=vec, inner=inner, layout="strided", regime=regime))
                            except Unsupported:
                                pass
    return seen


# ---- compiled modules and loaded kernels ------------------------------------------------------------------
# Threads: every cache below is read without a lock and filled under one; what it holds is immutable once built,
# except a PreparedLaunch's parameter block, which is filled and launched under its own lock. Nothing per call
# (pointers, the split workspace) is shared between calls.

ENTRY_CACHE = 256  # per cache (forward, backward, forced regime): exact tensor metadata -> _Entry
PLAN_CACHE = 1024  # fitted plans by geometry; rows >= stable_rows share one (Plan.at moves it to the call's M)
_modules = BoundedCache(4096)  # (kernel, arch) -> CompiledModule (one instantiation per module: compile what is used)
_kernels = BoundedCache(4096)  # (kernel, device, block, smem, cluster) -> _Kernel: bounded by the instantiations
_plans = BoundedCache(PLAN_CACHE)
_archs: dict = {}


def module(kernel: str, arch: str = INSPECT_ARCH) -> nvrtc.CompiledModule:
    """The compiled module holding one instantiation (cached in process and on disk)."""
    return _modules.get_or_make((kernel, arch), lambda: nvrtc.compile_source(FILE, [kernel], arch=arch))


def compile_all(names, arch: str = INSPECT_ARCH, batch: int = 64, workers: int = 1) -> dict[str, dict]:
    """ptxas reports of many instantiations: `batch` per NVRTC call (one front-end pass for many kernels;
    batch=1 produces exactly the cache entries the run-time path looks up), spread over `workers` processes."""
    names = sorted(names)
    groups = [names[i:i + batch] for i in range(0, len(names), batch)]
    if workers > 1 and len(groups) > 1:
        import concurrent.futures as cf
        import multiprocessing as mp

        with cf.ProcessPoolExecutor(min(workers, len(groups)), mp_context=mp.get_context("spawn")) as ex:
            parts = list(ex.map(_compile_group, groups, [arch] * len(groups)))
    else:
        parts = [_compile_group(g, arch) for g in groups]
    report: dict[str, dict] = {}
    for part in parts:
        report.update(part)
    return report


def _compile_group(group, arch: str) -> dict:
    mod = nvrtc.compile_source(FILE, list(group), arch=arch)
    return {n: mod.resources(n) for n in group}


def _arch_of(device: int) -> str:
    a = _archs.get(device)
    if a is None:
        a = _archs[device] = nvrtc.current_arch(device)
    return a


def _sms(device: Optional[int]) -> int:
    if device is not None and torch.cuda.is_available():
        return rt_launch.sm_count(device)
    return DEFAULT_SMS


class _Kernel:
    """One instantiation loaded on one device for one launch shape (block, dynamic smem, cluster), its attributes
    set once; shared by every entry of that shape. bind() gives a launch with a fixed grid and scalar tail."""

    __slots__ = ("lk", "kern", "device", "block", "smem", "cluster", "fits")

    def __init__(self, name: str, device: int, block: tuple, smem: int, cluster: int):
        self.lk = rt_launch.kernel(module(name, _arch_of(device)), name, device)
        self.kern = self.lk.kernel
        self.device, self.block, self.smem, self.cluster = device, block, smem, cluster
        self.lk.allow_smem(smem)
        if cluster > PORTABLE_CLUSTER:
            _allow_non_portable_cluster(self.kern, device)
        self.fits = self._clusters_fit()

    def config(self, grid: int):
        """cuda.core's LaunchConfig (cluster launches count the grid in clusters, cuda.core's convention)."""
        from cuda.core import LaunchConfig

        cfg = LaunchConfig(grid=grid, cluster=self.cluster, block=self.block, shmem_size=self.smem)
        if _grid_counts_blocks(cfg, grid):  # an older cuda.core: grid in blocks
            cfg = LaunchConfig(grid=grid * self.cluster, cluster=self.cluster, block=self.block,
                               shmem_size=self.smem)
        return cfg

    def bind(self, grid: int, tail: tuple, pointers: int):
        """fn(*pointers) launching with this grid and these scalar arguments on the caller's current stream: a
        prepared cuLaunchKernel without a cluster (the eager hot path), cuda.core's launch with one."""
        if self.cluster == 1:
            return rt_launch.PreparedLaunch(self.lk, grid, self.block, tail, self.smem, pointers)
        return _ClusterLaunch(self, grid, tail)

    def _clusters_fit(self) -> Optional[bool]:
        """Whether one cluster of this shape can be resident (cuOccupancyMaxActiveClusters through cuda.core);
        None when the query is not available."""
        if self.cluster == 1:
            return True
        try:
            n = self.kern.occupancy.max_active_clusters(self.config(1),
                                                        stream=rt_launch.current_stream(self.device))
            return int(n) > 0
        except Exception:
            return None


def _kernel(name: str, device: int, block: tuple, smem: int, cluster: int) -> _Kernel:
    key = (name, device, block, smem, cluster)
    return _kernels.get(key) or _kernels.get_or_make(
        key, lambda: rt_launch.on_device(device, _Kernel, name, device, block, smem, cluster))


class _ClusterLaunch:
    """A cluster launch through cuda.core (it packs the arguments per call) with a fixed grid and scalar tail;
    rows(grid, first, *pointers) launches with another grid and first scalar (the row count)."""

    __slots__ = ("k", "cfg", "tail")

    def __init__(self, k: _Kernel, grid: int, tail: tuple):
        self.k, self.cfg, self.tail = k, k.config(grid), tail

    def __call__(self, *ptrs: int) -> None:
        rt_launch.on_device(self.k.device, self._go, self.cfg, self.tail, ptrs)

    def rows(self, grid: int, first: int, *ptrs: int) -> None:
        tail = (type(self.tail[0])(first),) + self.tail[1:]
        rt_launch.on_device(self.k.device, self._go, self.k.config(grid), tail, ptrs)

    def _go(self, cfg, tail, ptrs) -> None:
        k = self.k
        try:
            _cc_launch(rt_launch.current_stream(k.device), cfg, k.kern, *ptrs, *tail)
        except Exception as e:
            raise OnlineSoftmaxError(f"launch of {k.lk.name} (grid={cfg.grid}, cluster={k.cluster}, "
                                     f"block={k.block}, smem={k.smem}) failed: {type(e).__name__}: {e}") from None


def _cc_launch(*args) -> None:
    from cuda.core import launch

    launch(*args)


def _grid_counts_blocks(cfg, grid: int) -> bool:
    """cuda.core 1.2 counts a cluster launch's grid in clusters (gridDimX = grid * cluster); True if this one
    passes the grid through as blocks instead (checked on the driver struct it builds; False if unknowable)."""
    try:
        from cuda.core._launch_config import _to_native_launch_config

        return int(_to_native_launch_config(cfg).gridDimX) == grid
    except Exception:
        return False


def _allow_non_portable_cluster(kern, device: int) -> None:
    from cuda.bindings import driver

    attr = driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED
    (err,) = driver.cuKernelSetAttribute(attr, 1, kern.handle, driver.CUdevice(device))
    if err != driver.CUresult.CUDA_SUCCESS:
        raise OnlineSoftmaxError(f"cuKernelSetAttribute(NON_PORTABLE_CLUSTER_SIZE_ALLOWED) failed: {err}")


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


def _fitted_plan(M: int, N: int, dtype, op: str, vec: bool, inner: int, layout: str, sms: int,
                 regime: Optional[str], device: int, fallback: str) -> Plan:
    """plan(...) with an automatic plan whose clusters (cluster, columns) cannot be resident on this device, or
    whose cluster attributes are refused, replaced by the `fallback` regime (split, strided); cached by geometry,
    one entry for every M >= stable_rows(sms)."""
    stable = M >= stable_rows(sms)
    key = (op, N, dtype, vec, inner, layout, sms, regime, device, None if stable else M)

    def make() -> Plan:
        p = plan(M, N, dtype, op, vec=vec, inner=inner, layout=layout, sms=sms, regime=regime)
        if regime is not None or all(l.cluster == 1 for l in p.launches):
            return p
        try:
            if all(_kernel(l.kernel, device, l.block, l.smem, l.cluster).fits is not False for l in p.launches):
                return p
        except OnlineSoftmaxError:
            pass
        return plan(M, N, dtype, op, vec=vec, inner=inner, layout=layout, sms=sms, regime=fallback)

    p = _plans.get(key) or _plans.get_or_make(key, make)
    return p.at(M) if stable else p


class _Entry:
    """Everything one (op, shape, strides, dim, dtype, device, alignment) needs per call: the plan, whether the
    inputs are made contiguous first, and one bound launch per kernel (the pointers come per call). Immutable;
    the split regime's workspace is allocated per call. rows(M, ...) runs the plan moved to M rows (Plan.at) without
    building anything: only the grids, the row count and the workspace change."""

    __slots__ = ("plan", "contig", "calls", "ws_n", "single", "M", "pers")

    def __init__(self, p: Optional[Plan], device: int, contig: bool, strides: tuple, so: int):
        self.plan, self.contig = p, contig
        self.ws_n = p.workspace if p is not None else 0
        self.calls, self.single, self.M, self.pers = (), None, 0, ()
        if p is None:  # an empty tensor: nothing to launch
            return
        self.M, self.pers = p.M, tuple(l.per for l in p.launches)
        i64, i32 = np.int64, np.int32
        sa = strides[0]
        sb = strides[1] if len(strides) > 1 else 0
        calls = []
        for l in p.launches:
            pointers = 3  # (a, b, out); stats: (a, b, workspace); apply: (a, b, workspace, out)
            if l.sig in ("rows", "warp"):
                tail = (i64(p.M), i32(p.N), i64(sa), i64(sb), i64(so))
                if l.sig == "warp":
                    tail += (i32(p.lg),)
            elif l.sig == "stats":
                tail = (i64(p.M), i32(p.N), i64(sa), i64(sb), i32(p.parts), i32(p.chunk))
            elif l.sig == "apply":
                tail = (i64(p.M), i32(p.N), i64(sa), i64(sb), i64(so), i32(p.parts), i32(p.chunk))
                pointers = 4
            else:  # strided
                tail = (i64(p.M), i32(p.N), i64(p.inner), i64(p.strips), i64(p.items))
            calls.append(_kernel(l.kernel, device, l.block, l.smem, l.cluster).bind(l.grid, tail, pointers))
        self.calls = tuple(calls)
        if len(calls) == 1:
            self.single = calls[0]

    def __call__(self, a: int, b: int, out: int, dev: torch.device) -> None:
        if self.single is not None:
            self.single(a, b, out)
            return
        # split: the partial states go to a workspace of this call, from torch's caching allocator on the current
        # stream (so calls from other threads never share it, its reuse is ordered after these kernels, and a CUDA
        # graph captures it in its own pool)
        ws = torch.empty(self.ws_n, dtype=torch.float32, device=dev)
        stats, apply = self.calls
        stats(a, b, ws.data_ptr())
        apply(a, b, ws.data_ptr(), out)

    def rows(self, M: int, a: int, b: int, out: int, dev: torch.device) -> None:
        """The call for M rows, for any M whose plan has this entry's geometry (_rows_entry keys it so)."""
        if M == self.M:
            self(a, b, out, dev)
        elif self.single is not None:
            self.single.rows(_grid(M, self.pers[0]), M, a, b, out)
        else:
            ws = torch.empty(self.ws_n // self.M * M, dtype=torch.float32, device=dev)
            (stats, apply), (ps, pa) = self.calls, self.pers
            stats.rows(_grid(M, ps), M, a, b, ws.data_ptr())
            apply.rows(_grid(M, pa), M, a, b, ws.data_ptr(), out)


def _device_index(x: torch.Tensor, op: str) -> int:
    if not x.is_cuda:
        raise OnlineSoftmaxError(f"{op}: CUDA tensors expected (got {x.device})")
    return x.device.index if x.device.index is not None else torch.cuda.current_device()


def _prepare(op: str, ins: tuple, out: torch.Tensor, dim: int, regime: Optional[str]) -> _Entry:
    call = _plan_call(op, ins, out, dim, regime)
    return _Entry(*call) if call else _Entry(None, -1, False, (), 0)


def _plan_call(op: str, ins: tuple, out: torch.Tensor, dim: int, regime: Optional[str]) -> Optional[tuple]:
    """(plan, device, contig, row strides, out row stride) for these tensors, after checking them; None when empty."""
    x = ins[0]
    if x.dtype not in DT_CODE:
        raise OnlineSoftmaxError(f"{op}: dtype {x.dtype} not supported (float32, float16, bfloat16)")
    for t in ins[1:] + (out,):
        if t.dtype != x.dtype or t.shape != x.shape or t.device != x.device:
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
    sms = _sms(device)
    V = vec_width(x.dtype)
    aligned = all(t.data_ptr() % 16 == 0 for t in ins + (out,))
    N = shape[dim] if shape else 1
    strides = [tuple(t.stride()) for t in ins]
    rows = [_row_layout(shape, s, dim) for s in strides]
    column_kernels = regime in ("columns", "strided")
    if not column_kernels and all(r is not None for r in rows):
        M = rows[0][0]
        rss = tuple(r[2] for r in rows)
        vec = aligned and (M == 1 or all(rs % V == 0 for rs in rss))
        p = _fitted_plan(M, N, x.dtype, op, vec, 1, "rows", sms, regime, device, "split")
        return p, device, False, rss, N
    # made contiguous per call (one copy per input). `aligned` stays the verdict on the original pointers: the
    # cache key only records that bit, and an input that is already contiguous is not copied.
    contig = not all(_is_contiguous(shape, s) for s in strides)
    outer = math.prod(shape[:dim])
    inner = math.prod(shape[dim + 1:])
    if inner == 1 and not column_kernels:  # contiguous with the dim innermost: rows of N
        p = _fitted_plan(outer, N, x.dtype, op, aligned, 1, "rows", sms, regime, device, "split")
        return p, device, contig, (N,) * len(ins), N
    p = _fitted_plan(outer, N, x.dtype, op, aligned, inner, "strided", sms, regime, device, "strided")
    return p, device, contig, (0,) * len(ins), 0


def _call(e: _Entry, ins: tuple, out: torch.Tensor, pa: int, pb: int, po: int) -> None:
    if e.contig:
        ins = tuple(t.contiguous() for t in ins)
        pa = ins[0].data_ptr()
        pb = ins[1].data_ptr() if len(ins) > 1 else 0
    if e.calls:
        e(pa, pb, po, ins[0].device)


_entries = BoundedCache(ENTRY_CACHE)  # forced regimes (the registry variants)


def _run(op: str, ins: tuple, out: torch.Tensor, dim: int, regime: Optional[str] = None) -> None:
    """Any op, optionally with a forced regime (the registry variants)."""
    pa = ins[0].data_ptr()
    pb = ins[1].data_ptr() if len(ins) > 1 else 0
    po = out.data_ptr()
    x = ins[0]
    key = (op, regime, x.shape, tuple(t.stride() for t in ins), dim, x.dtype, x.get_device(),
           not ((pa | pb | po) & 15))
    e = _entries.get(key) or _entries.get_or_make(key, lambda: _prepare(op, ins, out, dim, regime))
    _call(e, ins, out, pa, pb, po)


# ---- the contract with ops.py -----------------------------------------------------------------------------
# The hot path: one key of tensor metadata, one dict lookup, the launch. `out` must be contiguous (ops.py
# allocates it so); that is checked when a key is first seen, not on every call. Contiguous rows over the last dim
# (nearly every call) are keyed without their row count M once M >= stable_rows (4 x SMs): those Ms share one
# entry, whose plan moves to the call's M (Plan.at), so a new batch size builds nothing. Below it the few-rows
# rules depend on M: a new M is planned (pure Python), and shares the entry of every M whose plan has the same
# geometry (kernels, blocks, clusters, chunks). Other layouts are keyed by their exact shape and strides.

ROWS_CACHE = 1024  # per direction: the few-row Ms of several row lengths, and one key per length beyond
_fwd_rows = BoundedCache(ROWS_CACHE)
_bwd_rows = BoundedCache(ROWS_CACHE)
_geometries = BoundedCache(ENTRY_CACHE)  # row entries by plan geometry
_fwd_entries = BoundedCache(ENTRY_CACHE)
_bwd_entries = BoundedCache(ENTRY_CACHE)
_stable: dict = {}  # device index -> stable_rows(its SMs)


def _rows_entry(op: str, ins: tuple, out: torch.Tensor, dim: int) -> _Entry:
    """The entry for contiguous rows, shared by every row count whose plan has the same geometry."""
    call = _plan_call(op, ins, out, dim, None)
    p = call[0]
    key = (op, p.dtype, p.N, p.W, call[1:], p.lg, p.parts, p.chunk,
           tuple((l.kernel, l.block, l.smem, l.cluster, l.per) for l in p.launches))
    return _geometries.get(key) or _geometries.get_or_make(key, lambda: _Entry(*call))


def _stable_rows_of(device: int) -> int:
    st = _stable.get(device)
    if st is None:
        st = _stable[device] = stable_rows(_sms(device)) if device >= 0 else 1  # CPU: _prepare refuses it
    return st


def forward(x: torch.Tensor, out: torch.Tensor, dim: int, log: bool) -> None:
    """out <- softmax(x, dim) (log_softmax when log). x: CUDA fp32/fp16/bf16, any shape and strides; dim in
    [0, x.ndim); out contiguous, x's shape and dtype. Accumulates in fp32. Safe from any thread and stream."""
    pa, po = x.data_ptr(), out.data_ptr()
    n = x.numel()
    if n and dim == x.dim() - 1 and x.is_contiguous():
        N = x.shape[dim]
        M, d = n // N, x.get_device()
        key = (log, N, x.dtype, d, not ((pa | po) & 15), M if M < (_stable.get(d) or _stable_rows_of(d)) else 0)
        e = _fwd_rows.get(key)
        if e is None:
            e = _fwd_rows.get_or_make(key, lambda: _rows_entry("log_softmax" if log else "softmax", (x,), out, dim))
        e.rows(M, pa, 0, po, x.device)
        return
    key = (log, x.shape, x.stride(), dim, x.dtype, x.get_device(), not ((pa | po) & 15))
    e = _fwd_entries.get(key)
    if e is None:
        e = _fwd_entries.get_or_make(key, lambda: _prepare("log_softmax" if log else "softmax", (x,), out, dim,
                                                           None))
    _call(e, (x,), out, pa, 0, po)


def backward(y: torch.Tensor, dy: torch.Tensor, out: torch.Tensor, dim: int, log: bool) -> None:
    """out <- dx from y = the forward output (probabilities; log-probabilities when log) and dy:
    softmax: dx = y * (dy - sum(dy * y)); log_softmax: dx = dy - exp(y) * sum(dy), 0 for a row of y all -inf."""
    pa, pb, po = y.data_ptr(), dy.data_ptr(), out.data_ptr()
    n = y.numel()
    op = "log_softmax_backward" if log else "softmax_backward"
    if n and dim == y.dim() - 1 and y.is_contiguous() and dy.is_contiguous():
        N = y.shape[dim]
        M, d = n // N, y.get_device()
        key = (log, N, y.dtype, d, not ((pa | pb | po) & 15), M if M < (_stable.get(d) or _stable_rows_of(d)) else 0)
        e = _bwd_rows.get(key)
        if e is None:
            e = _bwd_rows.get_or_make(key, lambda: _rows_entry(op, (y, dy), out, dim))
        e.rows(M, pa, pb, po, y.device)
        return
    key = (log, y.shape, y.stride(), dy.stride(), dim, y.dtype, y.get_device(), not ((pa | pb | po) & 15))
    e = _bwd_entries.get(key)
    if e is None:
        e = _bwd_entries.get_or_make(key, lambda: _prepare(op, (y, dy), out, dim, None))
    _call(e, (y, dy), out, pa, pb, po)


def plan_for(op: str, *tensors: torch.Tensor, dim: int = -1, regime: Optional[str] = None) -> Plan:
    """The plan forward/backward would use for these tensors (inspection; loads kernels on first use)."""
    out = torch.empty_like(tensors[0], memory_format=torch.contiguous_format)
    return _prepare(op, tuple(tensors), out, dim % tensors[0].dim(), regime).plan


# ---- resources and the registry variants ------------------------------------------------------------------


def plan_resources(p: Plan, arch: str = INSPECT_ARCH) -> dict:
    """ptxas report of the plan's kernels; for two kernels: max registers/smem/stack, summed spills, and each
    kernel's own report under "per_kernel"."""
    rows = []
    for l in p.launches:
        r = module(l.kernel, arch).resources(l.kernel)
        r.update(kernel=l.kernel, block=l.block, grid=l.grid, cluster=l.cluster, dynamic_smem=l.smem,
                 regime=p.regime)
        rows.append(r)
    if len(rows) == 1:
        return rows[0]
    return {
        "kernel": "+".join(r["kernel"] for r in rows),
        "regime": p.regime,
        "registers": max(r["registers"] for r in rows),
        "smem": max(r["smem"] for r in rows),
        "stack": max(r["stack"] for r in rows),
        "spill_stores": sum(r["spill_stores"] for r in rows),
        "spill_loads": sum(r["spill_loads"] for r in rows),
        "block": rows[0]["block"],
        "dynamic_smem": max(r["dynamic_smem"] for r in rows),
        "per_kernel": {r["kernel"]: r for r in rows},
    }


def _variant_plan(op: str, regime: str, M: int, N: int, dtype) -> Plan:
    dev = torch.cuda.current_device() if torch.cuda.is_available() else None
    return plan(M, N, dtype, op, vec=True, sms=_sms(dev), regime=regime)


def _supports(op: str, regime: str):
    def supports(M: int, N: int, dtype) -> Optional[str]:
        if dtype not in DT_CODE:
            return f"dtype {dtype} not supported"
        try:
            _variant_plan(op, regime, M, N, dtype)
        except Unsupported as e:
            return str(e)
        return None

    return supports


def _algo_bytes(op: str, regime: str):
    per = OPS[op][1]  # reads + writes per element, ideal

    def algo_bytes(M: int, N: int, s: int) -> int:
        ideal = per * M * N * s
        if regime in ("warp", "block", "cluster", "columns"):
            return ideal
        reads = OPS[op][0]
        total = ideal + reads * M * N * s  # the second pass re-reads the inputs (from L2 when the plan works)
        if regime == "split":
            dtype = {4: torch.float32, 2: torch.bfloat16}.get(s, torch.float32)
            try:
                p = _variant_plan(op, regime, M, N, dtype)
                total += 8 * M * p.parts * (1 + p.parts)  # partials written once, each read by every chunk
            except Unsupported:
                pass
        return total

    return algo_bytes


def _resources(op: str, regime: str):
    def resources(M: int, N: int, dtype=torch.float32) -> dict:
        return plan_resources(_variant_plan(op, regime, M, N, dtype))

    return resources


def _variant_run(op: str, regime: str):
    def run(inputs, out) -> None:
        _run(op, tuple(inputs), out, inputs[0].dim() - 1, regime)

    return run


_RUNG = {
    "warp": ("warp per row", "2^lg lanes (<= 32) per row, RPT rows per lane group, row in registers as 16-byte "
             "vectors, (m, d) by shuffles"),
    "block": ("CTA per row", "one CTA (128..512 threads) per row, row in registers (+ dynamic smem), one block "
              "merge, 16-byte stores"),
    "cluster": ("cluster per row", "a cluster of C CTAs per row (Hopper DSMEM): each holds N/C in registers + "
                "smem, partial states exchanged through distributed shared memory; 1 read + 1 write"),
    "split": ("split rows", "each row cut into P chunks: partial states to an fp32 workspace, then merge + "
              "re-read (L2) + write: two launches"),
    "columns": ("columns on chip (non-last dim)", "(outer, N, inner) forward: a cluster of C CTAs per strip of "
                "columns, each a band of rows in registers (+ smem), per-column (m, d) by a tree and DSMEM; here on "
                "(M, N) as inner = 1"),
    "strided": ("strided (non-last dim)", "(outer, N, inner) with threads along inner: states down N, tree "
                "merge, second pass over the strip (L2); here on (M, N) as inner = 1"),
}

_SUMMARY_OP = {
    "softmax": "softmax forward",
    "log_softmax": "log_softmax forward",
    "softmax_backward": "softmax backward dx = y * (dy - sum(dy * y))",
    "log_softmax_backward": "log_softmax backward dx = dy - exp(y) * sum(dy)",
}

VARIANT_NAMES: list[str] = []

for _op in OP_CODE:
    for _regime in REGIMES:
        if _regime == "columns" and _op in BACKWARD_OPS:  # forward only: backward uses the strided kernel
            continue
        _name = f"cuda.{_op}_{_regime}"
        VARIANT_NAMES.append(_name)
        register(Variant(
            name=_name, op=_op, backend="cuda", rung=f"production: {_RUNG[_regime][0]}",
            seed_ref="issue #4", summary=f"{_SUMMARY_OP[_op]}: {_RUNG[_regime][1]}",
            run=_variant_run(_op, _regime), algo_bytes=_algo_bytes(_op, _regime), device="cuda", dtypes=DTYPES,
            supports=_supports(_op, _regime), available=available, resources=_resources(_op, _regime),
        ))


def resource_table(arch: str = INSPECT_ARCH, workers: int = 1) -> list[dict]:
    """One row per instantiation the plans can pick: regimes, kernel, registers, smem, stack, spills."""
    inst = instantiations()
    rep = compile_all(inst, arch, workers=workers)
    return [{"kernel": k, "regimes": ",".join(sorted(inst[k])), **{f: rep[k][f] for f in
             ("registers", "smem", "stack", "spill_stores", "spill_loads")}} for k in sorted(inst)]


if __name__ == "__main__":  # python -m onlinesoftmax.variants.production: ptxas table of every instantiation
    import os

    print(f"{'kernel':40s} {'regimes':8s} {'regs':>4s} {'smem':>6s} {'stack':>5s} {'spills st/ld':>12s}")
    for r in resource_table(workers=os.cpu_count() or 1):
        print(f"{r['kernel']:40s} {r['regimes']:8s} {r['registers']:4d} {r['smem']:6d} {r['stack']:5d} "
              f"{r['spill_stores']:6d}/{r['spill_loads']:<5d}")

"""The production CUDA engine's launch rules and plans: pure Python, no GPU, no compiler. Each rule is a named
function of the shape (op, M, N, dtype, alignment, SMs); `plan` combines them into the kernels, grids, blocks,
clusters and shared memory of one call.

    plan(M, N, dtype, op, vec=..., window=0, inner=1, layout="rows", sms=..., regime=None) -> Plan

Layouts. The reduced dim last with stride 1 and the leading dims collapsing to one row stride: row kernels
(each input keeps its own row stride). Else a contiguous input with the dim not last: the strided kernels over
(outer, N, inner), no transpose copy. Else the inputs are made contiguous first (one copy each) and one of the
two applies (run.py decides the layout; plans take M rows of N, or (outer = M, N, inner)).

Regimes (row layout), picked by `choose_regime` from N, M and the register budget of the op and dtype:
    warp     N <= warp_max_n (1024 fwd; 512 fp32 bwd): 2^lg lanes per row, RPT rows per lane group in flight
    block    one CTA (64..512 threads; 128..512 on the scalar path) per row, the row in registers
             (+ dynamic smem when SSLOTS > 0)
    cluster  a cluster of C CTAs per row (C <= 8; fp32 backward: 8 CTAs with more smem each, wide_slots, then 16),
             partials through DSMEM;
             when rows are too few to fill the GPU, wider clusters (up to 16) with smaller shares per CTA; the
             aligned backward spreads its row over CTAs holding it in registers where they fill 7/8 of them; on
             the scalar path (a backward whose y and dy start unalike) the CTAs hold the row in registers only
    group    rows beyond the cluster capacity on the 16-byte path where the out rows start as the inputs' (P < 2),
             enough of them to fill the chip (group_form; GROUP_AUTOMATIC, ONLINESOFTMAX_GROUPS=0 turns it off):
             G CTAs a row (G at most the SMs), each holding its share as a cluster's CTA does, their pairs through
             global memory (group_config); a second kernel writes the shares whose CTAs stopped waiting
             (GROUP_WAIT_NS)
    split    few rows on the scalar path, or N beyond the cluster capacity where no group takes it: (m, d) per chunk into an fp32
             workspace (allocated per call), then merge + re-read (an L2 hit for these sizes) + write; 16-byte
             accesses on aligned rows and through the window where the out rows start as the inputs' (P = 1)
    columns  forward over a non-last dim of a contiguous tensor, (outer, N, inner), the columns on chip: a cluster
             of C CTAs (C <= 8) per strip of LANES x W columns, each CTA a band of rows; 1 read + 1 write; taken
             where the band needs shared memory with 128-byte row pieces (columns_preferred)
    strided  the same (and backward) otherwise: a CTA per strip of 128-byte row pieces, two passes, the second from
             L2 where the grid's strips fit it
    period   dim 0 of a matrix whose width is not whole 16-byte vectors (period_preferred): the slab read as vectors,
             g = V / gcd(inner, V) rows being whole ones, so a thread's vector of every period holds the same
             columns; stats (pairs per band of periods), merge, apply (the band kept in shared memory, the rest
             re-read from L2): three phases of one cooperative launch, a CTA an SM at most, two grid barriers
    flat     rows of N elements that are not whole 16-byte accesses, every tensor one contiguous aligned block (most
             tensors: `flat`): a CTA stages R rows (a whole number of accesses) in shared memory with 16-byte
             copies, 4..32 lanes per row compute there, 16-byte stores; N <= FLAT_MAX_N
    chan     forward and backward over a short non-last dim (N <= 256: channels): G threads per 4-byte access of the
             inner dim hold its column in registers, a band of up to 32 rows each; 1 read + 1 write, and for G > 1
             one merge of the bands' pairs through shared memory
The 16-byte path (W = vector). Aligned: N (inner for strided), every row stride and every pointer multiples of
16 bytes. Window (warp, block, cluster; window_path): any N, rows starting anywhere as long as the inputs' rows
start alike modulo 16 bytes; each row is read through the aligned accesses covering it; a backward whose dy rows
start otherwise (its out rows as y's) reads dy through a window of its own, realigned to y's (window 3; dy_window:
fp32 only where its scalar plan takes 8 CTAs or more). Otherwise the plan picks the scalar instantiations (W = 1) of
the same kernels.
"""

from __future__ import annotations

import functools
import itertools
import math
import os
from dataclasses import dataclass, replace
from typing import Optional

import torch

from ...errors import OnlineSoftmaxError
from ...intmath import cdiv, log2, pow2ceil, pow2floor
from ...opdefs import GPU_DTYPES, OPS, SOFTMAX_OPS
from ...runtime import DEFAULT_SMS
from ...runtime.launch import PORTABLE_CLUSTER

FILE = "softmax.cu"  # the kernels' source, in SOURCES
SOURCES = "onlinesoftmax/engines/cuda/kernels"
ENGINE_OPS = tuple(op.name for op in SOFTMAX_OPS)
DT_CODE = {torch.float32: 0, torch.float16: 1, torch.bfloat16: 2}  # DT of the kernels
REGIMES = ("warp", "block", "cluster", "group", "split", "columns", "strided", "bands", "chan", "flat", "period")
COLUMN_REGIMES = ("columns", "strided", "bands", "chan", "period")  # over (outer, N, inner): a non-last dim

# ---- tuning constants (the kernel-side ones must match softmax.cu) -------------------------------------
WARP_THREADS = 256  # the same names in softmax.cu (an enum); the warp kernels' largest CTA
ROW_MAX_THREADS = 512  # __launch_bounds__(512, 2): <= 64 registers, 2 CTAs/SM
ROW_MIN_THREADS = 128
FWD_ROW_SLOTS = 3  # the forward's row kernels on the 16-byte path: accesses per thread (block_threads)
VEC_ROW_MIN_THREADS = 64  # the 16-byte path's one-CTA-a-row kernels: the fewest threads (block_threads)
SPLIT_THREADS = 256
GROUP_THREADS = ROW_MAX_THREADS  # group: the row kernels' CTA (a cluster's: row_capacity elements)
GROUP_FIX_THREADS = 256  # group: the kernel after the group kernel's (a CTA a row: the shares abandoned)
GROUP_CTAS_PER_SM = 2  # group: the CTAs an SM holds (<= 64 registers, <= 106 KB of slots); a group takes at most
#                        one an SM (half the device: run.py checks the occupancy query's count against twice G)
# group: whether automatic plans take the group regime (group_form), or only a forced regime does. On unless the
# environment says otherwise (ONLINESOFTMAX_GROUPS=0).
GROUP_AUTOMATIC = os.environ.get("ONLINESOFTMAX_GROUPS", "1").strip().lower() not in ("0", "off", "false", "no")
# group: how long (ns) a CTA waits for the rest of its group before it abandons its share to the kernel after
# (softmax.cu's os_group_reduce, grp_fix). Several group kernels at once (threads on streams of their own, a graph's branches)
# can each hold G - 1 waiting CTAs of a partly started group until no slot is left for any: without a bound, a hang.
# Alone on the device a CTA waits for CTAs of its group that start as earlier groups' CTAs exit, a share's time
# (microseconds); 200 us is well above it, and a tenth of a millisecond lost where the groups do block one another.
GROUP_WAIT_NS = 200_000
SPLIT_UNROLL = 4
STRIDED_THREADS = 512  # __launch_bounds__(512, 2)
CHAN_THREADS = 256
CHAN_BAND = 32  # chan: the most rows of a column one thread holds in registers (CAP, a CHAN_CAP_STEP multiple)
CHAN_CAP_STEP = 4
CHAN_MAX_GROUP = 8  # chan: the most threads (bands) a column; CHAN_THREADS / CHAN_MAX_GROUP = 32 columns a CTA
CHAN_MERGED_BAND = 20  # chan, G > 1: the longest band where G <= CHAN_MAX_GROUP allows (chan_config)
CHAN_MAX_N = CHAN_BAND * CHAN_MAX_GROUP
REG_WORDS = 32  # per thread: the row's share held in registers (floats fwd, raw 32-bit words of y+dy bwd)
WARP_MAX_SLOTS = 8  # warp kernels: accesses per lane and row (scalar path: N <= 256)
MAX_RPT = 4  # warp kernels: rows per lane group
FLAT_THREADS = 256
FLAT_SMEM_BYTES = 32768  # flat: the shared memory one CTA stages its rows in, all inputs (at least a whole access each)
# flat: elements per lane and row (instantiations), every count up to 12 and 33 (2^10 + 1 on 32 lanes): with 12
# after 8, a 16-bit row of 129 on 16 lanes held 12 (192 elements, 33% of them past the row) and ran at 70% of copy,
# on 9 at 84.5% (h200-flat-slots-rows-c50c2af.txt)
FLAT_SLOTS = (1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 16, 20, 24, 28, 32, 33, 36)
FLAT_LANES = (4, 8, 16, 32)  # flat: lanes per row the kernels take (their LG = 2..5)
# flat: about this many elements a lane pick the lanes per row (flat_config), by op
FLAT_LANE_ELEMS = {"softmax": 8, "log_softmax": 8, "softmax_backward": 2, "log_softmax_backward": 4}
FLAT_MAX_N = FLAT_LANES[-1] * FLAT_SLOTS[-1]
WARP_SCALAR_MAX_N = 256  # scalar_short_rows: forward rows up to this long take the scalar warp kernel, not the window
BWD_LEAN_MIN_FILL = 7 / 8  # backward: a cluster whose CTAs hold the row in registers where their shares fill this much
MAX_CLUSTER = 16  # 16 needs the non-portable cluster attribute (fp32 backward rows beyond wide_slots' reach only)
# fp32 backward: the most shared-memory slots a CTA of a cluster of 8 takes before the plan goes to 16 CTAs
# (wide_slots); at 7, two 512-thread CTAs still fit an SM (7 x 16 KB of y and dy each, + 1 KB reserved: 226 of its 228 KB)
BWD_WIDE_SLOTS = {"softmax_backward": 6, "log_softmax_backward": 7}
# ... if their static shared memory stays within the last 1 KB: the windows that realign (P = 2 and 3) declare
# 2.2-3 KB beside the slots (softmax.cu's xch), so at 7 slots only one CTA fits an SM; they stop at 6
REALIGN_WIDE_SLOTS = 6
FEW_ROWS_MIN_N = 4096  # rows this long and too few for a CTA per SM get wider clusters (or split); shorter ones
#                        are latency-bound either way
FEW_ROWS_CTAS_PER_SM = 2  # few rows: clusters sized for about this many CTAs per SM
FEW_ROWS_SPLIT_SHARE = 4  # few rows split where full clusters of MAX_CLUSTER would use at most 1 / this of the SMs
SPLIT_CTAS_PER_SM = 4  # split: aim for this many CTAs per SM in total
SPLIT_MIN_CHUNK = 512  # split: at least this many accesses per CTA
SPLIT_L2_BUDGET = 32 << 20  # split: the input bytes of one wave of rows (split_wave), re-read from L2 by its apply
SPLIT_MIN_WAVES = 4  # split: rows go in waves only where there are at least this many
COLUMNS_SMEM_SLOTS_FP32 = 12  # columns: 16-byte accesses per thread in shared memory (96 KB per 512-thread CTA)
COLUMNS_SMEM_SLOTS_16BIT = 8  # (64 KB: the 16-bit kernel's static tree arrays are twice as large)
STRIDED_CTAS_PER_SM = 2  # strided: persistent grid of this many CTAs per SM (the launch bound), but W = 8's one
STRIDED_L2_BUDGET = 32 << 20  # strided: strip bytes in flight (grid * N * strip) the second pass finds in L2
STRIDED_PIECE = 128  # strided: bytes of a row the lanes of a thread row read side by side (strided_tile)
BANDS_THREADS = 256  # bands: the CTA (lanes x rows threads); softmax.cu's enum
BANDS_CTAS_PER_SM = 2  # bands: the kernels' launch bound (<= 128 registers)
BANDS_WORDS = 56  # bands: 32-bit registers of data a thread holds on the 16-byte path (64 spilled beside the slots)
BANDS_SMEM_WORDS = 96  # bands: the most 32-bit words of data a thread stages in shared memory beside them (16 bytes)
BANDS_SCALAR_WORDS = 16  # bands: registers of data on the scalar path (every access its own 64-bit address)
BANDS_FEW_STRIPS_BYTES = 128 << 10  # bands: the few-strips rule's least input bytes of a strided CTA's strip
PERIOD_THREADS = 512  # period: the CTAs' most threads (softmax.cu's enum; launch bound 1 an SM)
PERIOD_MIN_INNER = 64  # period: the narrowest inner (a stats CTA folds T x V / inner of its pairs into each column)
PERIOD_SMEM = 227 << 10  # period: the most dynamic shared memory a CTA takes (stats' pairs, kept periods; the kernels
#                          have no static shared memory: the merge phase folds its warps' rows in the pairs' place)
PERIOD_MIN_BYTES = 6 << 20  # period: the least slab (one input's N x inner) automatic plans give it (period_preferred)
INT_MAX = 2**31 - 1


class Unsupported(OnlineSoftmaxError):
    """A shape the requested regime cannot take (plan with a forced regime)."""


# ---- small helpers --------------------------------------------------------------------------------------

_SIZES = {torch.float32: 4, torch.float16: 2, torch.bfloat16: 2}


def _check_op_dtype(op: str, dtype) -> None:
    if op not in ENGINE_OPS:
        raise OnlineSoftmaxError(f"unknown op {op!r}; ops: {', '.join(ENGINE_OPS)}")
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
    if not OPS[op].backward:
        return REG_WORDS // W
    words = max(1, W * _SIZES[dtype] // 4)  # per access and tensor (a 16-bit scalar still takes a register)
    return REG_WORDS // (2 * words)


def smem_slots(op: str, dtype, W: int) -> int:
    """Extra accesses per thread parked in dynamic shared memory when one CTA's registers are not enough
    (16-byte path only): as many as in registers, i.e. 64 KB (fp32 forward, any backward) per 512-thread CTA; 16-bit
    forward parks three times as many (96 KB: its data is 2 bytes an element in shared memory, 4 in registers), so
    one CTA holds 64K elements and a row of 262144 needs a cluster of 4. One access more on top (8 to 16 KB), so
    that a power-of-two row read through the window (2^k + W - 1 elements: odd N beside it) needs no more CTAs than
    the aligned row. Two CTAs still fit an SM."""
    if W == 1:
        return 0
    rs = reg_slots(op, dtype, W)
    return (3 * rs if (not OPS[op].backward and dtype != torch.float32) else rs) + 1


def smem_bytes(op: str, W: int, threads: int, sslots: int) -> int:
    return sslots * threads * 16 * (1 if not OPS[op].backward else 2)


def used_smem_slots(op: str, dtype, W: int, N: int, C: int, threads: int, sslots: int) -> int:
    """Shared-memory slots a row kernel's CTA fills (at most sslots): C CTAs share the row's accesses evenly
    (softmax.cu's CH; N as the rules see it, N + W - 1 on the window path), each holding reg_slots per thread in
    registers, the rest of its share in smem. Measured (benchmarks/results/h200-clusters-b45ee6e.txt): filling each
    CTA to capacity before the next left clusters waiting on their first CTA, e.g. bf16 N = 100003 on 2 CTAs of
    8704 + 3797 accesses ran at 67% of copy, 6251 each at 82%.
    The plans instantiate the kernels with these slots (SSLOTS), not the most a CTA can take, and size the dynamic
    smem to them. The same geometry with the largest SSLOTS (the same bytes: the slots past the share are never
    touched) ran slower on the H200 (tune_rows.py --clusters, h200-tune-sslots-73f0fca.txt, % of copy, used slots
    against the most): fp32 softmax forward 50001 / 100003 / 200003 92.6 / 90.3 / 87.2 against 91.3 / 89.0 / 85.6,
    bf16 100003 / 200003 84.2 / 82.2 against 83.2 / 80.9; bf16 softmax backward 50001 / 100003 / 200003 96.5 / 95.7 /
    93.4 against 95.6 / 95.1 / 93.0, log-softmax 95.8 / 92.9 / 88.9 against 96.1 / 91.9 / 87.3."""
    share = cdiv(cdiv(N, W), C)
    return max(0, min(sslots, cdiv(share, threads) - reg_slots(op, dtype, W)))


def warp_max_n(op: str, dtype, W: int) -> int:
    """Largest N the warp regime takes: 32 lanes x min(reg_slots, WARP_MAX_SLOTS) accesses x W."""
    return 32 * min(reg_slots(op, dtype, W), WARP_MAX_SLOTS) * W


def warp_geometry(op: str, dtype) -> tuple[int, int]:
    """Warp kernels: (threads per CTA, accesses in flight), the second on the 16-byte path the accesses a thread loads
    before its first reduction (rows per lane group x slots). 128 threads and 2 accesses (32 bytes), but for the
    16-bit log-softmax forward 256 and 4 (64 bytes). Timed on the H200 (benchmarks/tune_rows.py --warp,
    h200-warp-geometry-cf8a189.txt; % of copy, 128-thread CTAs at 1 / 2 / 4 rows per lane group): fp32 softmax 128
    97.1 / 98.4 / 95.9, 256 98.5 / 96.7 / 96.2, 512 97.3 / 96.3 / -; fp32 log-softmax 128 93.6 / 98.5 / 96.1; bf16
    softmax 128 93.7 / 96.8 / 93.9, 256 91.6 / 97.2 / 94.2; bf16 log-softmax 128 87.3 / 91.6 / 95.2 (256 threads:
    95.6 at 4 rows), 256 85.1 / 90.0 / 94.9; fp32 log-softmax backward at 129 97.9 / 95.8 / -. 128-thread CTAs were
    level with 256 or up to 2.9 points faster at the same rows. The A/B of the rule against 256 threads and up to 4
    rows within the register budget (h200-warp-geometry-ab-cf8a189.txt; every op and dtype at N = 32, 127, 128, 129,
    256, 512, 1024): fp32 forward +0 to +2.9 points, 16-bit softmax -0.1 to +3.4, backward -0.3 to +1.4; the 16-bit
    log-softmax forward -1.4 to +0.2 with 128 threads (its rows unchanged), so it keeps 256. The rule as shipped, the
    same A/B (h200-warp-geometry-ab-e18d732.txt): fp32 forward +0.1 to +3.0, 16-bit softmax -0.2 to +3.1, backward
    -0.5 to +1.3."""
    return (256, 4) if op == "log_softmax" and dtype != torch.float32 else (128, 2)


def warp_config(op: str, dtype, W: int, N: int) -> tuple[int, int, int]:
    """(lg, slots, rpt): 2^lg lanes per row (the smallest power of 2 covering the row's accesses, <= 32),
    slots accesses per lane (power of 2), rpt rows per lane group: on the 16-byte path as warp_geometry gives them,
    on the scalar path up to MAX_RPT while the rows' registers stay within half the budget.

    The scalar forward on 32 lanes takes exactly the row's accesses over the lanes (N = 129: 5 slots, not 8) and
    one row per lane group: timed on the H200 (benchmarks/tune_rows.py --warp, h200-warp-66c0ce4.txt) at N = 127,
    128, 129, 255 and 256, one row ran at 57-98% of copy where 2 or 4 rows ran at 30-79%, and 129 in 5 slots at
    70% (bf16) and 95% (fp32) against 57% and 93% in 8."""
    nv = cdiv(N, W)
    lanes = min(32, pow2ceil(nv))
    if W == 1 and lanes == 32 and not OPS[op].backward:
        if nv > 32 * WARP_MAX_SLOTS:
            raise Unsupported(f"N = {N} > {warp_max_n(op, dtype, W)}: too long for a warp per row")
        return 5, cdiv(nv, 32), 1
    slots = pow2ceil(cdiv(nv, lanes))
    cap = min(reg_slots(op, dtype, W), WARP_MAX_SLOTS)
    if slots > cap:
        raise Unsupported(f"N = {N} > {warp_max_n(op, dtype, W)}: too long for a warp per row")
    budget = reg_slots(op, dtype, W) // 2 if W == 1 else warp_geometry(op, dtype)[1]  # scalar: an address an element
    rpt = max(1, min(MAX_RPT, budget // slots))
    return log2(lanes), slots, rpt


def scalar_short_rows(op: str, N: int, V: int, vec: bool, window: int) -> bool:
    """Forward rows of 33..WARP_SCALAR_MAX_N elements that the window would read (vec and N a multiple of V
    excepted) take the scalar warp kernel instead: the window adds an access to the row (127 bf16: 17 of them), and
    a warp's lanes come in powers of two, so about half of them load and compute padding. Timed on the H200
    (benchmarks/tune_rows.py --warp, h200-warp-66c0ce4.txt), % of copy, window (the rules' rows per lane group, then
    the best) -> scalar: bf16 127 39 (40) -> 71, 129 39 (40) -> 70, 255 54 -> 59; fp32 127 66 (88) -> 96,
    129 65 (87) -> 95, 255 68 (81) -> 86."""
    return (not OPS[op].backward and bool(window) and not (vec and N % V == 0)
            and 32 < N <= WARP_SCALAR_MAX_N)


def dy_window(op: str, dtype, M: int, N: int, sms: int) -> bool:
    """A backward whose dy rows start unlike y's (the out rows as y's): dy's own window realigned to y's (window 3,
    the kernels' P = 3) rather than the scalar path. Timed on the H200 (benchmarks/sliced_rows.py --y fresh per tree,
    h200-dy-window-550b7dd.txt, % of copy, scalar -> P = 3): 16-bit everywhere (padded vocabulary 2560 x 50257
    48-61 -> 88-94, 131072 x 1000 85-88 -> 99-100, 1024 x 131072 39-40 -> 88-93); fp32 only where the scalar plan
    spreads the row over 8 CTAs or more (or splits it): its 4-byte scalar accesses are whole words, level or ahead
    below that (16384 and 32000: 101-103 against 90-100), behind from there (50257 86-95 -> 95-97, 131072 68-89 ->
    92-93)."""
    if dtype != torch.float32:
        return True
    p = _plan(M, N, dtype, op, False, 0, 1, "rows", sms, None, MAX_CLUSTER, True)
    return p.regime == "split" or p.launches[0].cluster >= 8


def flat_slots(N: int, lanes: int) -> int:
    """flat: the elements each of a row's `lanes` lanes takes (the smallest FLAT_SLOTS entry >= N / lanes)."""
    for s in FLAT_SLOTS:
        if lanes * s >= N:
            return s
    raise Unsupported(f"N = {N} > {lanes * FLAT_SLOTS[-1]}: too long for the flat kernels' {lanes} lanes per row")


def flat_sure(slots: int) -> int:
    """flat forward: the slots of a lane that lie inside every row it takes (the kernels' SURE, read without a
    mask): the FLAT_SLOTS entry below `slots`, since flat_slots took the smallest one whose lanes hold N (lanes x
    that entry < N). Measured on the H200 against every slot tested (h200-flat-sure-9f876fa.txt, % of copy, bf16 softmax
    / log-softmax): 1023 88 / 86 -> 93 / 94, 1025 88 / 86 -> 94 / 94, 255 88 / 82 -> 90 / 85, 150 83 / 77 -> 88 / 83,
    129 84 / 78 -> 84 / 81; fp16 alike, fp32 level."""
    i = FLAT_SLOTS.index(slots)
    return FLAT_SLOTS[i - 1] if i else 0


def flat_config(op: str, dtype, N: int) -> tuple[int, int]:
    """flat: (lg, slots), 2^lg lanes per row and slots elements a lane (flat_slots).

    Forward: the power of two nearest N / 8 (in ratio; FLAT_LANE_ELEMS), 4 to 32 lanes: 4 below N = 46, 8 below 91, 16
    below 182, 32 beyond. On 32 lanes a short row spends most of its instructions in the 2 x 5 shuffle steps of the
    max and sum butterflies; fewer lanes take fewer steps and more elements each. Timed on the H200 (tune_rows --flat
    --lanes, 32 KB chunks, h200-tune-flat-lanes-*.txt; % of copy at 4 / 8 / 16 / 32 lanes): bf16 softmax 33 71 / 70 /
    55 / 34, 63 62 / 67 / 77 / 56, 127 61 / 71 / 87 / 76, 129 60 / 67 / 69 / 72, 199 - / 83 / 76 / 82, 255 - / 71 /
    87 / 88; bf16 log_softmax within a few points alike (199: 82 at 8 lanes, 77 at 32); fp32 at 96-97 from 8 lanes
    up to N = 255 but for 33 (4 lanes 96, 8 lanes 84-92). With every slot count up to 12 (b03894f; bf16,
    h200-tune-flat-lanes-slots-b03894f.txt) these lanes were the best or within 2 points at 33, 70, 127, 129, 170 and
    1025 for both ops; elsewhere softmax wanted 16 at 63 (72 against 64), log-softmax fewer lanes at 100 (4: 82
    against 76), 150 (8: 81 against 77) and 255 (16: 84 against 82); not taken (no one ratio fits them).

    Backward: the power of two nearest N / 2 (softmax) or N / 4 (log-softmax: an exponential an element more), 4 to
    32 lanes; two inputs, each element read twice. Timed after f210efe (the backward's loop without a branch per
    element; h200-tune-flat-bwd-f210efe.txt, 32 KB chunks, % of copy at 4 / 8 / 16 / 32 lanes), bf16 softmax /
    log-softmax backward: 33 58 / 76 / 74 / 56, 57 / 72 / 59 / 45; 63 43 / 51 / 83 / 88, 42 / 50 / 78 / 76; 127 43 /
    51 / 86 / 97, 42 / 51 / 83 / 87; 129, 199 and 255 best on 32; fp16 alike; fp32 101 at 63 on 16 and 32 lanes.
    The run at 4c1df95 (the loop with its branches) ranked softmax's lanes alike (63: 83 / 90 on 16 / 32). One timing
    of a kernel can differ from the next by up to 6 points."""
    lanes = min(FLAT_LANES[-1], max(FLAT_LANES[0], 1 << max(0, round(math.log2(N / FLAT_LANE_ELEMS[op])))))
    return log2(lanes), flat_slots(N, lanes)


def flat_rows(op: str, dtype, N: int) -> int:
    """flat: rows per CTA, a multiple of V / gcd(N, V) so that every CTA's chunk starts on a 16-byte boundary, as many
    as come nearest FLAT_SMEM_BYTES of all inputs (at least that multiple; at most 1.5 times FLAT_SMEM_BYTES). Timed on
    the H200 (tune_rows --flat, h200-tune-flat-2f4b60c.txt and -a41cc49.txt, two runs alike within 2 points), % of
    copy at 8 / 16 / 32 KB of each input: bf16 softmax 255 68 / 82 / 89-90, 1023 82 / 82 / 88-89, fp32 63 69 / 81-82
    / 91; the backward (two inputs) at 16 / 32 KB each: bf16 softmax 127 98-99 / 95-96, log_softmax 63 66 / 58 (fewer
    CTAs fit an SM). Floored to as many as fit, 16-bit odd rows of 1025-1151 took 8 rows (16-18 KB): 78-80% of copy at
    1025, 83-86% on 16 rows (33-37 KB; h200-flat-slots-rows-c50c2af.txt)."""
    V = vec_width(dtype)
    step = V // math.gcd(N, V)
    return step * max(1, int(FLAT_SMEM_BYTES / (step * N * _SIZES[dtype] * len(OPS[op].inputs)) + 0.5))


# flat: the row-length ranges (off the vector) around the lengths where it measured faster than the other regimes'
# plans (inside a range some lengths measured level or up to 3 points slower; 16-bit 257-1022 not timed), by direction
# (the backward ops apart) and element size; benchmarks/tune_rows.py --flat on the H200, h200-tune-flat-2f4b60c.txt, at
# N = 33, 63, 127, 129, 199, 255, 1023 and 1025 (% of copy, flat -> the rules' plan before it):
#   16-bit forward: 33-63 27-57 -> 22-46, 199-255 76-90 -> 58-84 (fp16 199: 76-82 -> 80-84), 1023-1025 78-89 -> 68-76;
#                   127-129 on 32 lanes a row 61-73 against the scalar warp kernel's 63-73, with flat_config's lanes
#                   (h200-tune-flat-lanes-*.txt, bf16): 127 87 / 82 (softmax / log) against 71 / 65, 129 69 / 64
#                   against 70 / 64; 64-126 and 130-191 not timed
#   fp32 forward: 33-127 50-97 -> 43-95, 199-255 96-98 -> 83-86; not 129 (87-94 -> 94-96) or 1023-1025 (95 -> 97)
#   16-bit softmax backward 63-255 85-99 -> 64-92 (not 1023-1025: 94-97 -> 96-97); after f210efe (no branch per
#                   element in the backward's loop), flat at flat_config's backward lanes -> the plan without flat
#                   (h200-tune-flat-bwd-f210efe.txt): 33 74 -> 65 (76 on 8 lanes)
#   16-bit log_softmax backward 63-129 62-75 -> 51-55 before f210efe; after it, bf16 / fp16, the same columns: 33 72 /
#                   65 -> 54 / 58, 63 78 / 77 -> 51 / 53, 127 87 / 87 -> 51 / 50, 129 76 / 74 -> 51 / 55, 199 81 / 77
#                   -> 73 / 71, 255 91 / 87 -> 76 / 76 (torch 47-79)
#   fp32 backward 63 98-101 -> 77-89 (the warp kernel's 100-102% from 127 on; at 33 flat 72-88 against 79-90)
FLAT_RANGES = {
    ("fwd", 2): ((33, FLAT_MAX_N),),
    ("fwd", 4): ((33, 127), (192, 256)),
    ("softmax_backward", 2): ((33, 256),),
    ("log_softmax_backward", 2): ((33, 256),),
    ("softmax_backward", 4): ((48, 64),),
    ("log_softmax_backward", 4): ((48, 64),),
}


def flat_from(op: str, dtype, N: int, sms: int) -> int:
    """The fewest rows for which the rules pick the flat regime (contiguous aligned rows; 0: none): N not a multiple
    of the vector (whole accesses read at full speed on the aligned path) and in the measured ranges of FLAT_RANGES,
    and rows enough for a chunk per SM. Always above stable_rows(sms): the rows caches key the stable row counts by
    their side of it (run.py)."""
    key = ("fwd" if not OPS[op].backward else op, _SIZES[dtype])
    if N % vec_width(dtype) == 0 or not any(lo <= N <= hi for lo, hi in FLAT_RANGES[key]):
        return 0
    return max(flat_rows(op, dtype, N) * sms, stable_rows(sms) + 1)


def use_flat(op: str, dtype, M: int, N: int, sms: int) -> bool:
    """The automatic choice of the flat regime for contiguous aligned rows (flat_from)."""
    t = flat_from(op, dtype, N, sms)
    return bool(t) and M >= t


def block_threads(op: str, dtype, W: int, N: int) -> tuple[int, int]:
    """(threads, slots) of one CTA per row holding the row in registers.

    Forward on the 16-byte path: 3 accesses per thread (48 bytes in flight), else the fewest slots above that fit
    512 threads, the threads the row's accesses over the slots rounded up to a warp (64 at least). Timed on the H200
    (benchmarks/tune_rows.py, benchmarks/results/h200-rows-*): against the rule below, 16-bit N = 4095 and 4097 went
    from 80% to 94% of copy (320 x 2 -> 192 x 3), 12289 from 62% to 77% (448 x 4 -> 416 x 4), fp32 12289 from 70% to
    81% (448 x 8 -> 416 x 8); fp32 1023 and 1025 stay at 97% (96 x 3), powers of two within a point.

    Otherwise (backward, scalar path): half the register budget per thread when the threads suffice (more CTAs per
    SM, shorter per-thread chains), the whole budget up to 512 threads; on the 16-byte path whole warps (64 threads
    at least), on the scalar path pairs of warps (128 at least). Timed on the H200 (tune_rows.py,
    h200-tune-bwd-clusters-d0620b9.txt): bf16 log-softmax backward 1023 / 1025, 128 x 2 (pairs of warps) 88 / 87% of
    copy, 96 x 2 95 / 94%, 64 x 3 96 / 92%."""
    nv = cdiv(N, W)
    rs = reg_slots(op, dtype, W)
    if W > 1 and not OPS[op].backward:
        choices = sorted(s for s in {FWD_ROW_SLOTS, rs // 2, rs} if s >= FWD_ROW_SLOTS)
        step, low = 32, VEC_ROW_MIN_THREADS
    elif W > 1:
        choices, step, low = (max(1, rs // 2), rs), 32, VEC_ROW_MIN_THREADS
    else:
        choices, step, low = (max(1, rs // 2), rs), 64, ROW_MIN_THREADS
    for slots in choices:
        threads = max(low, cdiv(cdiv(nv, slots), step) * step)
        if threads <= ROW_MAX_THREADS:
            return threads, slots
    raise Unsupported(f"N = {N}: more than {ROW_MAX_THREADS * rs * W} elements do not fit one CTA's registers")


def row_capacity(op: str, dtype, W: int) -> int:
    """Elements one 512-thread CTA holds (registers + shared memory)."""
    return ROW_MAX_THREADS * (reg_slots(op, dtype, W) + smem_slots(op, dtype, W)) * W


def smem_cluster(op: str, dtype, W: int, N: int) -> int:
    """CTAs per row at row_capacity each (registers + smem_slots): the smallest power of 2 that holds the row."""
    return pow2ceil(cdiv(N, row_capacity(op, dtype, W)))


def wide_slots(op: str, dtype, W: int, N: int, P: int = 0) -> int:
    """Shared-memory slots a CTA of a cluster of PORTABLE_CLUSTER takes for an fp32 backward row beyond that cluster's
    capacity at smem_slots (above 147456 elements), where at most BWD_WIDE_SLOTS[op] hold it; else 0 (16 CTAs, or
    not such a row). Timed on the H200 (tune_rows.py --force, h200-tune-bwd-wide-3779569.txt, % of copy, softmax /
    log-softmax backward, 16 CTAs -> 8): 151936 87 / 75 -> 93 / 93 (6 slots, two CTAs an SM); 150001 88 / 72 -> 94
    / 93. Where 8 CTAs need more than 7 slots they run one an SM: that lost to 16 CTAs of two an SM in both ops
    once the cluster fence of e3a2e01 made the clusters of 16 faster (h200-tune-bwd-wide-86813dc.txt, 8 CTAs of 8-12
    slots -> 16 CTAs, log-softmax backward: 180225 78.2 -> 80.3, 196608 84.2 -> 84.2, 200003 79.8 -> 83.0, 229376
    84.1 -> 87.3, 245760 85.5 -> 87.2, 262144 87.5 -> 86.2; softmax backward +0.4 to +9.5; at 7 slots, 172032, the
    8 CTAs' 93.6 against 80.5 for log-softmax, 94.6 against 95.9 for softmax). Clusters of 16 are resident 14 at a
    time, 224 of the 264 CTA slots (docs/tuning.md). P: the window (plan's window); those that realign (2, 3) stop
    at REALIGN_WIDE_SLOTS, as their static exchange beside 7 slots leaves one CTA of 8 an SM (ptxas: 2224 and
    2960 bytes; tests/test_production_compile.py's occupancy test reads it for every row kernel). Timed at 3d69a1a
    against the 8 CTAs of one an SM it replaced (fp32 log-softmax backward, 165000-180000 through the window: sliced
    68.0-70.7 -> 73.5-76.8%, dy unlike y level; h200-pending12-3d69a1a/bwd); where a cluster of 16 cannot be
    resident (run._fitted_plan) such rows fall back as the wider ones do."""
    if not (OPS[op].backward and dtype == torch.float32 and W > 1) or smem_cluster(op, dtype, W, N) <= PORTABLE_CLUSTER:
        return 0
    slots = cdiv(cdiv(cdiv(N, W), PORTABLE_CLUSTER), ROW_MAX_THREADS) - reg_slots(op, dtype, W)
    most = BWD_WIDE_SLOTS[op] if P < 2 else min(BWD_WIDE_SLOTS[op], REALIGN_WIDE_SLOTS)
    return slots if slots <= most else 0


def cluster_size(op: str, dtype, W: int, N: int, P: int = 0) -> int:
    """CTAs per row: the smallest power of 2 whose CTAs hold the row (registers + smem). Backward on the aligned
    16-byte path (P = 0): the smallest up to PORTABLE_CLUSTER whose CTAs hold the row in registers alone, where one
    does and its CTAs' shares fill at least BWD_LEAN_MIN_FILL of their register slots (no cp.async slots, a shorter
    share each; shares that leave the registers partly empty keep the fewer CTAs with smem).
    A/B on the H200 (benchmarks/ab.sh, h200-ab-bwd-lean-d0620b9.txt, % of copy, softmax / log-softmax backward,
    the rule before -> this one): bf16 65536 96 / 89 -> 100 / 98 (2 CTAs with smem -> 4 without), 131072 95 / 91 ->
    98 / 93 (4 -> 8); fp32 32768 99 / 99 -> 103 / 103, 65536 98 / 98 -> 102 / 99, 16384 +1. Filled to 92-98% it
    won or tied (h200-tune-bwd-lean-fill-61d2b5c.txt: bf16 60000, 4 CTAs of 3.66 slots a thread 98 / 96 against 95
    / 85; fp32 60000 99 / 95 against 98 / 97; bf16 128256, 8 CTAs of 3.9 slots 97 / 91 against 95 / 92); filled to
    76% it lost (h200-tune-bwd-lean-fill-c1b46b3.txt: bf16 50000, 95 / 90 against 99 / 96). The window path
    (P = 1) keeps its plans: the A/B's first form of the rule (up to one smem slot a CTA, no fill condition) lost 3-17
    points on odd N, at partly filled shares (12289, 50001, 100003: 3.0-3.05 slots) and at one smem slot used of
    five (65537, 131071), and gained at fp32 32001; the registers-only form with the fill condition was not timed
    there."""
    if wide_slots(op, dtype, W, N, P):
        return PORTABLE_CLUSTER
    c = smem_cluster(op, dtype, W, N)
    if OPS[op].backward and W > 1 and P == 0:
        full = ROW_MAX_THREADS * reg_slots(op, dtype, W)  # accesses a CTA holds in registers
        lean = pow2ceil(cdiv(cdiv(N, W), full))
        if c < lean <= PORTABLE_CLUSTER and cdiv(cdiv(N, W), lean) >= BWD_LEAN_MIN_FILL * full:
            return lean
    return c


def max_cluster(op: str, dtype) -> int:
    """Largest cluster a plan uses when rows are many: portable 8, except fp32 backward (y and dy: 16K elements per
    CTA) up to 16 to reach N = 262144 with two CTAs per SM (where wide_slots' 8 CTAs do not hold the row)."""
    return MAX_CLUSTER if (OPS[op].backward and dtype == torch.float32) else PORTABLE_CLUSTER


def cluster_config(op: str, dtype, W: int, M: int, N: int, sms: int, P: int = 0,
                   widest: int = MAX_CLUSTER) -> tuple[int, int, int]:
    """(C, threads, sslots) of the cluster regime. Many rows: the smallest cluster whose 512-thread CTAs hold the
    row in registers + shared memory. Few rows (M x C < SMs): a larger cluster (up to `widest`, at least
    ROW_MIN_THREADS x reg_slots accesses per CTA) so that the M x C CTAs give every SM about
    FEW_ROWS_CTAS_PER_SM, each holding its share in registers (fewer threads when it is small); shares that
    need shared memory keep the many-rows cluster. C == 1 means one CTA per row is as wide as it gets.
    `widest` (run._fitted_plan): narrower where the device cannot hold the M clusters at once; the narrowed
    clusters stay that wide, with shared memory where their shares need it (not the many-rows cluster: 16 rows of
    262144 bf16 would take 64 CTAs)."""
    nv = cdiv(N, W)
    rs = reg_slots(op, dtype, W)
    need = cluster_size(op, dtype, W, N, P)
    c = need
    if M * need < sms:
        fill = min(widest, pow2floor(FEW_ROWS_CTAS_PER_SM * sms // M),
                   pow2floor(nv // (ROW_MIN_THREADS * rs)))
        c = max(need, fill)
    per_cta = cdiv(nv, c)
    if per_cta <= ROW_MAX_THREADS * rs:
        return c, min(ROW_MAX_THREADS, max(ROW_MIN_THREADS, pow2ceil(cdiv(per_cta, rs)))), 0
    # shares beyond the registers: 512-thread CTAs with shared memory, as few as hold the row (the CTAs share it
    # evenly; wider clusters with smem measured no faster: bf16 128256 on 4 CTAs 81% of copy, on 2 84%)
    # fp32 backward beyond 8 CTAs of smem_slots (wide_slots): few rows (M x 8 CTAs below the SMs) keep 16 CTAs rather
    # than 8 holding more each, as every few-row plan takes a wider cluster (h200-tune-bwd-wide-3779569.txt,
    # log-softmax backward, % of copy, 8 CTAs against 16: 17 rows 41 / 43 against 47 / 49, timed at 10 / 12 slots;
    # 66 rows of 163844, not few, at 7 slots 62 against 58)
    wide = wide_slots(op, dtype, W, N, P)
    if wide and M * need < sms:
        return smem_cluster(op, dtype, W, N), ROW_MAX_THREADS, smem_slots(op, dtype, W)
    return c if widest < MAX_CLUSTER else need, ROW_MAX_THREADS, wide or smem_slots(op, dtype, W)


def group_config(op: str, dtype, W: int, N: int) -> tuple[int, int]:
    """(G, sslots) of the group regime: G CTAs a row, as few as hold it at a cluster CTA's capacity (row_capacity:
    smem_cluster's count before its power of 2), sharing it evenly (softmax.cu's CH), each filling sslots of shared
    memory. N as the rules see it (N + W - 1 on the window path)."""
    G = cdiv(N, row_capacity(op, dtype, W))
    return G, used_smem_slots(op, dtype, W, N, G, GROUP_THREADS, smem_slots(op, dtype, W))


def group_form(op: str, dtype, W: int, M: int, N: int, sms: int, P: int, split_form: bool) -> bool:
    """Whether the group regime takes rows beyond the widest cluster, which the split regime took: 16-byte accesses
    whose out rows (and dy) start as the inputs' (P < 2), a caller with a split form (not the fused cast or
    cross-entropy), groups of at most one CTA an SM (fp32 forward rows up to 4.6M elements), and rows enough that
    their groups fill the chip's CTA slots (M x G >= GROUP_CTAS_PER_SM x sms); fewer rows split (more CTAs).
    Timed on an H100 (session 68, benchmarks/results/session68/call2, regimes.py with the regimes forced, us, split
    -> group, every op, fp32 and bf16): 64 x 1000003 fp32 softmax 267.9 -> 204.0 (a copy of its bytes: 176.9),
    bf16 143.3 -> 116.6 (93.1), fp32 softmax backward 435.2 -> 293.5 (260.9); 528 x 300007 fp32 softmax 680.2 ->
    454.1 (425.9); 16 x 1000003 fp32 softmax 73.3 -> 68.0, backward 115.6 -> 90.4. Where the groups leave CTA slots
    empty the split won by 2-12% (7 x 1000003 bf16 softmax 19.8 against 22.1, 1 x 1000003 fp32 12.1 against 13.5).
    Within the clusters' reach they stay (call 3: at M x N = 2^27, N = 50001 ... 262144, the clusters 2-5% ahead in
    every op and dtype). choose_regime asks it only where GROUP_AUTOMATIC (on unless ONLINESOFTMAX_GROUPS=0)."""
    if W == 1 or P >= 2 or not split_form:
        return False
    G = group_config(op, dtype, W, N)[0]
    return G <= sms and M * G >= GROUP_CTAS_PER_SM * sms


def group_words(G: int) -> int:
    """fp32 words of a row's block in the group regime's workspace: its arrival word (2 words), G pairs and G words
    of abandoned ranks, rounded to pairs (production.cuh's os_group_words)."""
    return 2 + 2 * G + 2 * ((G + 1) // 2)


def group_workspace(M: int, G: int) -> int:
    """The group regime's fp32 workspace: the CTAs' ticket (2 words), then each row's block (group_words; softmax.cu's
    grp_body)."""
    return 2 + group_words(G) * M


def group_abandoned(ws: torch.Tensor, M: int, G: int) -> int:
    """The shares abandoned in a group call's workspace, read after the call (diagnostics: run.KeptWorkspaces): the
    high 16 bits of each row's arrival word (os_group_reduce)."""
    return int((ws.view(torch.int32)[2::group_words(G)][:M] >> 16).sum())


def split_parts(M: int, N: int, W: int, sms: int, min_parts: int = 1) -> tuple[int, int]:
    """(parts, chunk): each row cut into `parts` chunks of `chunk` accesses (a multiple of the CTA width), about
    SPLIT_CTAS_PER_SM CTAs per SM in total, at least SPLIT_MIN_CHUNK accesses per CTA."""
    nv = cdiv(N, W)
    want = max(1, cdiv(SPLIT_CTAS_PER_SM * sms, M))
    chunk = max(SPLIT_MIN_CHUNK, cdiv(nv, want))
    if min_parts > 1 and nv >= min_parts:
        chunk = min(chunk, cdiv(nv, min_parts))
    chunk = cdiv(chunk, SPLIT_THREADS) * SPLIT_THREADS if chunk >= SPLIT_THREADS else chunk
    parts = cdiv(nv, chunk)
    return parts, chunk


def split_wave(op: str, dtype, M: int, N: int, sms: int) -> int:
    """Rows per wave of the split regime, or 0: all M rows at once. In waves run.py launches the two kernels wave
    by wave, so that each wave's apply re-reads from L2 the inputs its stats read just before (SPLIT_L2_BUDGET of
    them), not from DRAM once the rows outgrow the L2 (64 x 1000003 fp32 reads 256 MB). Each wave adds a ramp and a
    drain to both kernels: only where there are at least SPLIT_MIN_WAVES of them. A/B on an H100 (session 66,
    benchmarks/results/session66, % of copy, all rows at once -> waves of 32 / 24 / 16 MB): 64 x 1000003 and
    528 x 300007, 4-16 waves of 32 MB, +2 to +6 points (fp32 softmax 55.7 -> 59.0, log-softmax backward 52.1 -> 57.6);
    two waves of 32 MB -3 to +2 (16 x 1000003 bf16 softmax backward 53.4 -> 51.0); 24 and 16 MB lost up to 10 and 16
    points. (A wave of more than stable_rows / SPLIT_MIN_WAVES rows, short rows split only when forced, never comes:
    the plans of M >= stable_rows stay one.)"""
    wave = max(1, SPLIT_L2_BUDGET // (N * _SIZES[dtype] * len(OPS[op].inputs)))
    return wave if SPLIT_MIN_WAVES * wave <= min(M, stable_rows(sms)) else 0


def strided_tile(op: str, dtype, W: int, M: int, N: int, inner: int, sms: int) -> tuple[int, int, int, int]:
    """(lanes, rows, strips, cap) of the strided kernel on (outer = M, N, inner), whose grid is min(M x strips, cap).
    lanes: threads across `inner` (W columns each), enough for row pieces of STRIDED_PIECE bytes (more for short
    columns, whose rows would leave threads idle), halved while the strips would give fewer than half the SMs a
    CTA; rows: threads down N (up to the CTA). The persistent grid holds as many CTAs as keep its strips in flight
    (grid x N x piece x inputs) inside STRIDED_L2_BUDGET, so the second pass re-reads from L2, but at least one and
    at most strided_ctas(W) per SM.
    Measured with benchmarks/probe_columns.py --strided (h200-probe-strided-840f406.txt, every lanes and grid):
    narrower pieces kept more strips in the budget but read sectors and DRAM pages piecemeal. Backward over dim 0
    of 8192^2, fp32: 16-byte pieces (the rule before) 23% of copy, 128-byte 53%; channels C = 1000, fp32 forward
    24% -> 70%, backward 24% -> 67%, 16-bit 14% -> 51% and 23% -> 57%; dim 0 of 4097 x 1001 (one element an
    access, 126 strips of 8 lanes) 7% -> 24-29% fp32. Splitting each strip's rows over a cluster (shorter bands
    for the L2, more CTAs for few strips) measured slower in every case (h200-probe-strided-clusters-840f406.txt)."""
    size = _SIZES[dtype]
    need = cdiv(inner, W)
    lanes = min(pow2ceil(need), max(STRIDED_PIECE // (W * size), STRIDED_THREADS // min(pow2ceil(N), STRIDED_THREADS)))
    while lanes > 1 and M * cdiv(need, lanes) < sms // 2:
        lanes //= 2
    rows = min(pow2ceil(N), STRIDED_THREADS // lanes)
    per_cta = strided_strip(op, dtype, W, N, lanes)
    return lanes, rows, cdiv(need, lanes), min(strided_ctas(W) * sms, max(sms, STRIDED_L2_BUDGET // per_cta))


def strided_ctas(W: int) -> int:
    """CTAs an SM of the strided kernels (softmax.cu's strided_ctas, their launch bound): one for 16-bit 16-byte
    accesses (8 a thread in flight a trip forward, 4 backward, in 128 registers), STRIDED_CTAS_PER_SM for the rest
    (4 forward; backward 2, or 4 on the scalar path, in 64 registers). Measured in benchmarks/results/session78: the
    one-CTA form won for W = 8 and lost for the scalar path."""
    return 1 if W == 8 else STRIDED_CTAS_PER_SM


def strided_strip(op: str, dtype, W: int, N: int, lanes: int) -> int:
    """Input bytes of a strided CTA's strip: its N rows of lanes x W columns, every input."""
    return N * lanes * W * _SIZES[dtype] * len(OPS[op].inputs)


def bands_config(op: str, dtype, W: int, N: int, inner: int) -> tuple[int, int, int, int, int, int]:
    """(lanes, rows, U, S, strips, G) of the bands kernels on (outer, N, inner): a CTA of BANDS_THREADS = lanes x rows
    threads, lanes across `inner` (W columns each: row pieces of STRIDED_PIECE bytes, fewer lanes for narrower
    columns), each thread U accesses down N in registers (BANDS_WORDS 32-bit words of data, both inputs backward;
    BANDS_SCALAR_WORDS on the scalar path) and, on the 16-byte path, up to BANDS_SMEM_WORDS more in shared memory
    (bands_smem bytes a CTA); G bands (CTAs) a strip, the group that meets through global memory, as few as hold N,
    each of rows x (U + S) rows with S the fewest slots that share N evenly among them (a short last band waited for
    by long ones cost 8-13 points of copy: session 71, benchmarks/results/session71)."""
    size = _SIZES[dtype]
    need = cdiv(inner, W)
    lanes = min(pow2ceil(need), STRIDED_PIECE // (W * size))
    rows = BANDS_THREADS // lanes
    inputs = len(OPS[op].inputs)
    U = max(1, (BANDS_WORDS if W > 1 else BANDS_SCALAR_WORDS) // inputs // max(1, W * size // 4))
    most = BANDS_SMEM_WORDS // inputs // 4 if W * size == 16 else 0
    G = cdiv(N, rows * (U + most))
    S = max(0, cdiv(cdiv(N, G), rows) - U)
    return lanes, rows, U, S, cdiv(need, lanes), G


def bands_smem(op: str, S: int) -> int:
    """Dynamic shared memory of a bands CTA: S 16-byte accesses a thread of each input."""
    return S * len(OPS[op].inputs) * BANDS_THREADS * 16


def bands_most(sms: int) -> int:
    """The most bands a strip may have: half the CTAs the SMs hold at the kernels' launch bound (a group's CTAs wait
    for one another, so all must fit at once, with room for other kernels; run._group_runs asks the device)."""
    return BANDS_CTAS_PER_SM * sms // 2


def bands_preferred(op: str, dtype, W: int, M: int, N: int, inner: int, sms: int) -> bool:
    """Does the automatic plan take the bands kernels rather than the strided one? On the 16-byte path, where a group
    of bands fits half the CTAs the SMs hold, and either the strided kernel's strips leave at least half the SMs idle,
    a strip has more than two bands, whose CTAs fill them, and a strided CTA's strip holds at least
    BANDS_FEW_STRIPS_BYTES of input (forward or backward), or, for a backward, the strided
    strips in flight (one CTA an SM, or one a strip where there are fewer: its smallest grid) hold more than
    STRIDED_L2_BUDGET in fp32, four times it in 16 bits, so that its second pass reads most of them from DRAM again.
    Measured on an H100 (benchmarks/layout_regimes.py --regimes strided bands; % of copy, softmax / log-softmax;
    benchmarks/results/session70-72). With the even bands of session 72, strided -> bands, backward: fp32 dim 0 of
    8192^2 about 55 -> 81, (4, 2000, 4096) 61 -> 81-82, (4, 1900, 4096) 62 -> 79-81, 2048 x 8192 58 -> 71-72, C =
    1000 (34 MB in flight) 71-72 -> 83-84; 16-bit dim 0 of 8192^2 (268 MB) 56-57 -> 63-67; few strips: (3, 3000,
    512) (48 / 24 strips, 5 bands) fp32 48 -> 56, 16-bit 31-32 -> 34-37, dim 0 of 2048^2 (64 / 32, 4) 51-52 -> 55,
    33 -> 33-35, dim 0 of 8192 x 64 (one strip, 14) 6 -> 13, 3 -> 5-6, (3, 70000, 40) (6 / 3, 116) 14 -> 43-44, 10
    -> 23-24; forward there (58 bands) 14 -> 35, 7 -> 24-26. Left to strided: two bands a strip (C = 1000 over (16,
    16): fp32 42-43 against 39-40, bf16 25-26 against 19-21; 16-bit dim 0 of 1000 x 4096 40-41 against 33-35; the
    2048^2 forward 47 against 40), one band, the 16-bit backward at 34-67 MB in flight ((4, 2000, 4096), dim 0 of
    2048 x 8192 and C = 1000 over (64, 64): 55-63 against 52-64), the forward of many strips (dim 0 of 8192^2 fp32
    81% on the columns kernel, 71 on bands; C = 1000 bf16 60 strided against 51), and one element an access (dim 0
    of 4097 x 1001, 28-30 against 30-35, session 70): a CTA meets its group once a band, where the strided kernel
    streams. The floor on a strided CTA's strip (its N rows of lanes x W columns, every input): on the H200 (session
    73, benchmarks/results/session73) the strided kernel ran the backward of (4, 3000, 16) fp32 (a strip of 94 KB)
    in 13 us against the bands' 22-40, of (3, 2000, 72) (62.5 KB) in 13-15 us against 14-22, where the bands' memset,
    exchange and second launch outweigh a strip that short; the strips of the wins above hold 128 KB (16-bit dim 0
    of 2048^2) to 2 MB (131072 x 64, the forward 333 -> 40 us on the H200). Between 94 and 128 KB: not measured."""
    if W == 1:
        return False
    _, _, _, _, strips, G = bands_config(op, dtype, W, N, inner)
    if G > bands_most(sms):
        return False
    if 2 * M * strips <= sms and G > 2 and \
            strided_strip(op, dtype, W, N, strided_tile(op, dtype, W, M, N, inner, sms)[0]) >= BANDS_FEW_STRIPS_BYTES:
        return True
    flight = min(sms, M * strips) * N * STRIDED_PIECE * len(OPS[op].inputs)
    return OPS[op].backward and flight > (1 if dtype == torch.float32 else 4) * STRIDED_L2_BUDGET


def bands_workspace(items: int, G: int, cols: int) -> tuple[int, int]:
    """(words, zeroed) of the bands regime's fp32 workspace for `items` strips (outer x strips) of `cols` columns in
    G bands: the ticket and each item's arrival word first (the `zeroed` words: softmax.cu's os_bands_head), then each
    item's pairs and abandoned ranks (os_bands_block)."""
    head = 2 + 2 * cdiv(items, 2)
    return head + (2 * G * cols + 2 * cdiv(G, 2)) * items, head


def bands_abandoned(ws: torch.Tensor, items: int) -> int:
    """The bands abandoned in a bands call's workspace, read after the call (diagnostics: run.KeptWorkspaces): the
    high 16 bits of each item's arrival word."""
    return int((ws.view(torch.int32)[2:2 + items] >> 16).sum())


def period_geometry(dtype, N: int, inner: int) -> tuple[int, int, int, int, int, int]:
    """(g, Q, T, chunks, L, periods) of the period kernels (softmax.cu's period_geo) on slabs of N x inner: g =
    V / gcd(inner, V) rows are Q whole 16-byte vectors; a stats or apply CTA takes T of them (a chunk; chunks a
    period) and merges its slots into L column pairs; N rows are `periods` periods, the last one partly outside."""
    V = vec_width(dtype)
    g = V // math.gcd(inner, V)
    Q = g * inner // V
    T = min(PERIOD_THREADS, cdiv(Q, 32) * 32)
    return g, Q, T, cdiv(Q, T), min(inner, T * V), cdiv(N, g)


def period_bands(M: int, chunks: int, periods: int, sms: int) -> tuple[int, int]:
    """(bands, periods a band) of the period kernels: about one stats CTA an SM over M x chunks x bands (measured on
    an H100, benchmarks/results/session79: against two an SM and four, fewer pairs for the merge and more periods in
    flight a thread won on dim 0 of 4097 x 1001 and 2049 x 3001, every op, fp32 and bf16)."""
    want = max(1, cdiv(sms, M * chunks))
    PB = cdiv(periods, min(periods, want))
    return cdiv(periods, PB), PB


def period_keep(op: str, M: int, bands: int, chunks: int, T: int, V: int, PB: int, sms: int) -> tuple[int, int]:
    """(keep, dynamic shared memory bytes) of the period kernel: the periods of a band it keeps in shared memory from
    its stats to its apply (read once from DRAM instead of again from L2), after the stats' T x V pairs (8 bytes
    each, merged by column from there). Where every CTA has one item (M x bands x chunks at most the grid), as many
    of its PB as PERIOD_SMEM holds, a multiple of 4 (the kernel's accesses a trip divide it)."""
    pairs = 8 * T * V
    if M * bands * chunks > sms:
        return 0, pairs
    per = T * 16 * (2 if op.endswith("_backward") else 1)  # a period: x, or y and dy
    keep = min(cdiv(PB, 4) * 4, (PERIOD_SMEM - pairs) // per // 4 * 4)
    return keep, pairs + keep * per


def period_possible(dtype, vec: bool, M: int, N: int, inner: int) -> bool:
    """Whether the period kernels take (outer = M, N, inner): every pointer 16-byte aligned, each slab starting on a
    vector (one slab, or N x inner whole vectors), inner at least PERIOD_MIN_INNER, and the slab's element offsets
    inside 32 bits."""
    return (vec and inner >= PERIOD_MIN_INNER and N * inner <= INT_MAX
            and (M == 1 or N * inner % vec_width(dtype) == 0))


def period_preferred(dtype, W: int, vec: bool, M: int, N: int, inner: int) -> bool:
    """Does the automatic plan take the period kernels rather than the strided one? For dim 0 of a matrix (one slab)
    whose width is not whole 16-byte vectors (the strided kernel's scalar path, W = 1), of PERIOD_MIN_BYTES or more.
    Measured on an H100 (benchmarks/results/session79, layout_regimes.py, us, strided -> period): dim 0 of 4097 x
    1001 fp32 softmax 38 -> 29, its backward 47 -> 38, bf16 30 -> 26 and 37 -> 29; 2049 x 3001 fp32 50 -> 37 and 61
    -> 54, bf16 42 -> 30 and 49 -> 37; every op faster in these 16 cells (8.2-24.6 MB slabs). Smaller slabs lose to
    the fixed cost (the first form's three launches: stats 7-10 us, merge 4.3 us, apply 4-5 us at 1025 x 1001):
    1025 x 1001 fp32 (4.1 MB) 13 -> 19, bf16 (2 MB) 12 -> 22; the one-launch form the same (19-20, 22-23; session
    80). Several slabs measured slower at (16, 300, 45, 45) over dim 1 (by 25-40%, the first form, call 3; 46 -> 77-81
    us fp32 in the one-launch form, where CTAs of several items keep nothing), so they stay strided."""
    return (W == 1 and M == 1 and N * inner * _SIZES[dtype] >= PERIOD_MIN_BYTES
            and period_possible(dtype, vec, M, N, inner))


def period_workspace(dtype, M: int, N: int, inner: int, bands: int) -> int:
    """fp32 words of a period call's workspace: the stats' pairs (M x bands x chunks x L), then each column's (M x
    inner, the merge's). Nothing of it is zeroed: the grid barriers are the driver's (softmax.cu's os_grid_sync)."""
    _, _, _, chunks, L, _ = period_geometry(dtype, N, inner)
    return 2 * M * (bands * chunks * L + inner)


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
    if OPS[op].backward:
        return None
    rs, ss = columns_slots(op, dtype, W), columns_smem_slots(dtype, W)
    across = pow2ceil(cdiv(inner, W))
    for pref, sslots in ((8, 0), (8, ss), (4, 0), (4, ss), (2, 0), (2, ss), (1, 0), (1, ss)):
        lanes = min(pref, across)
        lanes = max(lanes, min(across, 32, ROW_MAX_THREADS // pow2ceil(cdiv(N, rs + sslots))))
        c = pow2ceil(cdiv(N, (ROW_MAX_THREADS // lanes) * (rs + sslots)))
        if c <= PORTABLE_CLUSTER:
            return lanes, c, sslots
    return None


def columns_preferred(dtype, W: int, cfg: Optional[tuple[int, int, int]]) -> bool:
    """Does the automatic plan take the columns kernel (cfg: columns_config's, None where it cannot) rather than the
    strided one? Where its band needs the shared-memory slots (cp.async: 16 accesses a thread in flight) with
    STRIDED_PIECE-byte row pieces. Measured
    (h200-probe-strided-840f406.txt): dim 0 of 8192^2 fp32, columns 66% of copy against 55-60% strided; but the
    strided kernel with 128-byte pieces wins where columns holds the band in registers (C = 1000: 70% against 47%
    fp32, 51% against 16% 16-bit), has 64-byte pieces (dim 0 of 8192^2 16-bit: 42% against 30%) or one element an
    access (dim 0 of 4097 x 1001: 24% against 13% fp32)."""
    return cfg is not None and cfg[2] > 0 and cfg[0] * W * _SIZES[dtype] >= STRIDED_PIECE


def chan_config(dtype, N: int, inner: int, vec: bool) -> Optional[tuple[int, int, int]]:
    """(W, CAP, G) of the chan kernel over a non-last dim of N <= CHAN_MAX_N, or None for longer columns and for N x
    inner of 2^31 elements or more (its row offsets are 32-bit): G threads per access of W columns, each holding a
    band of CAP rows in registers (N / G rounded up to CHAN_CAP_STEP, so that one instantiation serves several N).
    G = 1 up to CHAN_BAND rows; beyond, the fewest powers of 2 whose bands are at most CHAN_MERGED_BAND rows (up to
    CHAN_MAX_GROUP): measured at C = 64 and 256, bands of 32 rows ran the backward at 60-80% of copy (one 256-thread
    CTA an SM in fp32, 185 registers), bands of 20 at C = 150 at 80-95%. W: 4-byte accesses (two 16-bit columns)
    where the data is aligned and inner even; one element otherwise (fp32 always: its element is already 4 bytes)."""
    if N > CHAN_MAX_N or N * inner >= 2**31:  # the kernel steps down the rows with 32-bit offsets
        return None
    W = 2 if dtype != torch.float32 and vec and inner % 2 == 0 else 1
    G = 1 if N <= CHAN_BAND else min(CHAN_MAX_GROUP, pow2ceil(cdiv(N, CHAN_MERGED_BAND)))
    return W, cdiv(cdiv(N, G), CHAN_CAP_STEP) * CHAN_CAP_STEP, G


def few_rows_split(op: str, dtype, W: int, M: int, N: int, sms: int) -> bool:
    """Rows so few and so long that clusters of MAX_CLUSTER full CTAs (512 threads holding reg_slots accesses each)
    would keep at most 1 / FEW_ROWS_SPLIT_SHARE of the SMs at work: the split regime spreads them over
    SPLIT_CTAS_PER_SM CTAs an SM, its phase 2 a programmatic launch. Timed on an H100 (session 67,
    benchmarks/results/session67, regimes.py with the regimes forced, us, cluster -> split): 1 and 2 rows of 262144,
    every op, fp32 and bf16, 15 of 16 cells faster (fp32 softmax 1 row 10.6 -> 7.7, log-softmax backward 11.4 ->
    8.1; bf16 softmax 9.3 -> 7.7), the other 8.0 -> 8.3 (bf16 softmax backward, 2 rows); at 131072 the fp32
    backward (4 register slots: its clusters' CTAs are full there too) level or faster (log-softmax 8.9 -> 7.4),
    the other ops, whose CTAs hold half as much, level or either ahead by up to 1 us (kept on clusters). Longer
    rows (16-bit forward up to 524288, whose clusters of 4-8 CTAs hold them with shared memory) split too: not
    timed. choose_regime asks only where the split reads 16-byte accesses (the out rows or dy starting as the
    inputs': P < 2) and where the caller has a split form (plan's split_form: not the fused cast or cross-entropy,
    which keep the cluster)."""
    full = MAX_CLUSTER * ROW_MAX_THREADS * reg_slots(op, dtype, W)
    return cdiv(N, W) >= full and M * MAX_CLUSTER * FEW_ROWS_SPLIT_SHARE <= sms


def choose_regime(op: str, dtype, W: int, M: int, N: int, sms: int, P: int = 0, widest: int = MAX_CLUSTER,
                  split_form: bool = True) -> str:
    """Row layout: warp for short rows, then one CTA, then a cluster; when rows are too few to give every SM a CTA
    (and long enough to matter) a wider cluster on the 16-byte path, split on the scalar one; split when the row
    is beyond the cluster capacity. On the scalar path a backward (whose y and dy rows start at different offsets
    from 16-byte boundaries, e.g. dy a padded vocabulary's view) holds the row in registers only: a CTA has 8192
    elements, a cluster up to max_cluster times that (56 registers, no spills: ptxas through NVRTC, and the
    compile test); a forward there (never from run.py: one input always has a window) splits. Timed on the H200
    (tune_rows.py --clusters --dy-width, h200-tune-bwd-clusters-d0620b9.txt, % of copy, split -> a cluster of 8):
    2670 x 50257 fp32 softmax / log-softmax backward 41 / 41 -> 90 / 82, bf16 36 / 38 -> 57 / 46; bf16 softmax
    backward 4194 x 32001 39 -> 61 (4 CTAs)."""
    if N <= warp_max_n(op, dtype, W):
        return "warp"
    ctas_per_row = None
    if cdiv(N, W) <= ROW_MAX_THREADS * reg_slots(op, dtype, W):
        ctas_per_row = 1
    elif W > 1 or OPS[op].backward:
        c = cluster_size(op, dtype, W, N, P)
        if c <= max_cluster(op, dtype):
            ctas_per_row = c
    if ctas_per_row is None:
        return "group" if GROUP_AUTOMATIC and group_form(op, dtype, W, M, N, sms, P, split_form) else "split"
    if N >= FEW_ROWS_MIN_N and M * ctas_per_row < sms:
        if W == 1 or (split_form and P < 2 and few_rows_split(op, dtype, W, M, N, sms)):  # (P 2, 3: scalar split)
            return "split"
        if cluster_config(op, dtype, W, M, N, sms, P, widest)[0] > 1:
            return "cluster"
    return "block" if ctas_per_row == 1 else "cluster"


# ---- plans ------------------------------------------------------------------------------------------------


def stable_rows(sms: int) -> int:
    """From this many rows on, a plan depends on M only through its grids and workspace (no few-rows rule
    applies: M x CTAs per row >= SMs, and split_parts wants one chunk per row): Plan.at moves it to another M."""
    return SPLIT_CTAS_PER_SM * sms


def grid_for(M: int, per: tuple) -> int:
    """A launch's grid for M rows: ceil(M x mul / div), at most cap (0: no cap)."""
    mul, div, cap = per
    g = cdiv(M * mul, div)
    return min(g, cap) if cap else g


@dataclass(frozen=True)
class Launch:
    kernel: str  # name expression in softmax.cu
    grid: int  # blocks, or clusters when cluster > 1 (cuda.core's LaunchConfig convention)
    block: tuple  # (x,) or (x, y)
    cluster: int = 1
    smem: int = 0  # dynamic shared memory bytes
    sig: str = "rows"  # argument signature: rows | warp | stats | apply | strided | flat | ce (ce_row) | group | fix | bands | bandsfix
    #                    | period
    per: tuple = (1, 1, 0)  # the grid rule: grid = grid_for(M, per)


def _launch(M: int, kernel: str, per: tuple, block: tuple, cluster: int = 1, smem: int = 0,
            sig: str = "rows") -> Launch:
    return Launch(kernel, grid_for(M, per), block, cluster, smem, sig, per)


@dataclass(frozen=True)
class Plan:
    regime: str
    op: str
    dtype: torch.dtype
    M: int  # rows (outer for strided)
    N: int
    W: int  # elements per access (16-byte vector or 1)
    launches: tuple
    window: int = 0  # 16-byte accesses through an aligned window around each row (the kernels' P; window_path)
    out_dtype: Optional[torch.dtype] = None  # fp32 outputs of 16-bit data (fused_cast); None: the data's dtype
    inner: int = 1
    lg: int = 0  # warp: log2 lanes per row
    parts: int = 0  # split: chunks per row; group: CTAs per row (G); bands: CTAs (bands) per strip (G); period: bands
    chunk: int = 0  # split: accesses per chunk; group: per CTA; bands: rows per band; period: periods per band
    strips: int = 0  # strided: column strips per outer index; period: chunks per period
    items: int = 0  # strided: outer * strips
    wave: int = 0  # split: rows per wave (split_wave), the two kernels launched wave by wave; 0: all rows at once
    rows: int = 0  # flat: rows per CTA
    wait: int = 0  # group, bands: GROUP_WAIT_NS when planned (the kernels' wait_ns)
    keep: int = 0  # period: periods a band kept in shared memory from the stats to the apply (period_keep)

    @property
    def kernels(self) -> tuple:
        return tuple(l.kernel for l in self.launches)

    @property
    def workspace(self) -> int:
        """fp32 words of a call's workspace at this plan's M (workspace_for)."""
        return self.workspace_for(self.M)[0]

    def at(self, M: int) -> "Plan":
        """This plan for M rows: the same kernels and geometry, the grids and workspace of M. Equal to plan(M, ...)
        when both row counts are at least stable_rows(sms) and, for contiguous aligned rows (flat), on the same side
        of flat_from (a test checks it over the rules' breakpoints)."""
        if M == self.M:
            return self
        launches = tuple(replace(l, grid=grid_for(M, l.per)) for l in self.launches)
        for l in launches:
            if l.grid * l.cluster > INT_MAX:
                raise Unsupported(f"{self.regime}: {l.grid * l.cluster} CTAs exceed the grid limit")
        return replace(self, M=M, launches=launches, items=M * self.strips)

    def workspace_for(self, M: int) -> tuple[int, int]:
        """(fp32 words, the first of them zeroed before the launch) of a call's workspace for M rows (outer indices):
        split, 2 a chunk of a wave's rows, none zeroed; group, group_workspace, all zeroed; bands, bands_workspace;
        period, period_workspace, none zeroed."""
        if self.regime == "group":
            n = group_workspace(M, self.parts)
            return n, n
        if self.regime == "bands":
            return bands_workspace(M * self.strips, self.parts, self.launches[0].block[0] * self.W)
        if self.regime == "period":
            return period_workspace(self.dtype, M, self.N, self.inner, self.parts), 0
        return 2 * (self.wave or M) * self.parts, 0


def plan(M: int, N: int, dtype, op: str = "softmax", *, vec: bool = True, window: int = 0, inner: int = 1,
         layout: str = "rows", sms: int = DEFAULT_SMS, regime: Optional[str] = None, out_dtype=None,
         flat: bool = False, widest: int = MAX_CLUSTER, split_form: bool = True) -> Plan:
    """The launch plan for `op` on M rows of N (layout "rows"), or on (outer=M, N, inner) (layout "strided").
    vec: every pointer is 16-byte aligned and every row stride a multiple of the vector (the plan checks N / inner).
    window: the rows of the inputs start alike modulo 16 bytes, aligned or not: 1, the out rows too; 2, the out
    rows otherwise (implied: 1 by vec); 3 (backward), the out rows start as y's and dy's otherwise. The row kernels
    then read any N with 16-byte accesses (window_path).
    regime: force one (the registry variants do); raises Unsupported if it cannot take the shape.
    out_dtype: float32 for 16-bit data, forward: the cast fused into the stores (rows in the warp, block and
    cluster regimes, out rows starting as the inputs'); Unsupported elsewhere (the caller casts first).
    flat: every tensor is one contiguous block of M rows N apart starting on a 16-byte boundary (the flat regime's
    condition; use_flat decides where it is picked).
    widest: the widest cluster the few-row rule may take (cluster_config).
    split_form: whether the caller can run a split plan where a cluster holds the rows (few_rows_split); False for
    cross-entropy (ce_row), and implied by a fused cast, neither of which has a split form."""
    window = window or int(vec)
    if window == 3 and layout == "rows" and regime is None and not dy_window(op, dtype, M, N, sms):
        window = 0
    if out_dtype is None and layout == "rows" and regime is None:
        if flat and use_flat(op, dtype, M, N, sms):
            regime = "flat"
        elif scalar_short_rows(op, N, vec_width(dtype), vec, window):
            vec, window = False, 0
    if regime == "flat" and not (flat and layout == "rows"):
        raise Unsupported("the flat regime takes tensors that are each one contiguous block of rows starting on a "
                          "16-byte boundary")
    cast = out_dtype is not None and out_dtype != dtype
    p = _plan(M, N, dtype, op, vec, window, inner, layout, sms, regime, widest, split_form and not cast)
    if cast:
        p = fused_cast(p, out_dtype)
    for l in p.launches:
        if l.grid * l.cluster > INT_MAX:
            raise Unsupported(f"{p.regime}: {l.grid * l.cluster} CTAs exceed the grid limit")
    return p


def fused_cast(p: Plan, out_dtype) -> Plan:
    """The plan with fp32 outputs of 16-bit data (the kernels' DTO = 0): forward rows whose out rows start as the
    inputs' (P < 2), in the regimes that hold the row on chip."""
    if (OPS[p.op].backward or p.dtype == torch.float32 or out_dtype != torch.float32
            or p.regime not in ("warp", "block", "cluster") or p.W == 1 or p.window == 2):
        raise Unsupported(f"no fused cast of {p.op} from {p.dtype} to {out_dtype} in this plan ({p.regime}, "
                          f"W = {p.W}, window {p.window}): cast first")
    return replace(p, out_dtype=out_dtype, launches=tuple(replace(l, kernel=l.kernel[:-1] + ",0>")
                                                          for l in p.launches))


def cross_entropy_plan(M: int, N: int, dtype, *, vec: bool = True, window: int = 0, sms: int = DEFAULT_SMS) -> Plan:
    """The cross-entropy kernel (softmax.cu's ce_row: the loss, lse and gradient of each row from one read) on M
    rows of N logits: softmax's forward plan, whose row kernel it shares, in the regimes that hold a row on one
    CTA or one cluster, on the 16-byte path (one input: its rows always have a window, run._row_access); short rows
    take one CTA each (the warp kernels have no cross-entropy). Unsupported where the rows do not stay on chip
    (split: the caller's Triton kernels take those) or on the scalar path."""
    p = plan(M, N, dtype, "softmax", vec=vec, window=window, sms=sms, split_form=False)
    if p.regime == "warp":
        p = plan(M, N, dtype, "softmax", vec=vec, window=window, sms=sms, regime="block")
    if p.regime not in ("block", "cluster") or p.W == 1:
        raise Unsupported(f"cross-entropy over {M} x {N} ({p.regime}, W = {p.W}): the rows do not stay on chip "
                          "with 16-byte accesses")
    return replace(p, op="cross_entropy", launches=tuple(replace(l, kernel=l.kernel.replace("fwd_row<0,", "ce_row<"),
                                                                 sig="ce") for l in p.launches))


def cross_entropy_helpers() -> tuple:
    """The small kernels around ce_row (run.py launches them): the targets' check and the reduction's scale, the
    loss's sum (per dtype), the backward's grad_output (per dtype, 16-byte or scalar accesses)."""
    return (("ce_targets",) + tuple(f"ce_loss<{dt}>" for dt in DT_CODE.values())
            + tuple(f"ce_scale<{dt},{w}>" for dtype, dt in DT_CODE.items() for w in (vec_width(dtype), 1)))


def window_path(N: int, V: int, vec: bool, window: int) -> tuple[int, int, int]:
    """(W, P, capacity) of a rows plan: 16-byte accesses (W = V, P = 0) when the data is aligned and N a multiple of
    V; else, when the inputs' rows start alike modulo 16 bytes, 16-byte loads through an aligned window around each
    row (P = 1; P = 2 when the out rows start elsewhere: each 16-byte store realigned from two input accesses; P = 3,
    a backward whose dy rows start elsewhere than y's and the out rows': dy through its own window, each access
    realigned to y's before the fold). A row then starts up to V - 1 elements into its first access, so the rules
    size for N + V - 1. Scalar accesses otherwise."""
    if vec and N % V == 0:
        return V, 0, N
    if window:
        return V, window, N + V - 1
    return 1, 0, N


def _check_holds(Nc: int, W: int, C: int, threads: int, slots: int, sslots: int) -> None:
    """A row kernel holds its share of the row's accesses (softmax.cu's CH, of N + W - 1 elements on the window
    path) or refuses: one that did not would leave part of the row unread and its outputs unwritten. The rules
    never ask for that; a forced geometry (benchmarks/tune_rows.py --force) can."""
    share = cdiv(cdiv(Nc, W), C)
    if share > threads * (slots + sslots):
        raise Unsupported(f"{C} CTA(s) of {threads} threads x {slots} + {sslots} slots hold {threads * (slots + sslots)}"
                          f" accesses each, not the {share} of a row of {cdiv(Nc, W)}")


def _plan(M: int, N: int, dtype, op: str, vec: bool, window: int, inner: int, layout: str, sms: int,
          regime: Optional[str], widest: int, split_form: bool) -> Plan:
    _check_op_dtype(op, dtype)
    if M < 1 or N < 1 or inner < 1:
        raise Unsupported(f"empty shape (M={M}, N={N}, inner={inner})")
    if N > INT_MAX // 2:
        raise Unsupported(f"N = {N} >= 2^30: the kernels index a row with 32-bit offsets")
    V = vec_width(dtype)
    o, dt = OPS[op].code, DT_CODE[dtype]
    fwd = not OPS[op].backward
    pre = "fwd" if fwd else "bwd"
    if window == 3 and fwd:
        raise Unsupported(f"{op}: window 3 (dy's rows unlike y's) is the backward's")
    if layout == "strided" or regime in COLUMN_REGIMES:
        if layout == "rows":  # a (M, N) row input through the strided kernels: (outer=M, N, inner=1)
            inner = 1
        chan = chan_config(dtype, N, inner, vec) if regime in (None, "chan") else None
        if chan is not None:
            W, cap, G = chan
            strips = inner // W
            name = f"{pre}_chan<{o},{dt},{W},{cap},{G}>"
            launch = _launch(M, name, (strips, CHAN_THREADS // G, 0), (CHAN_THREADS,), sig="strided")
            return Plan("chan", op, dtype, M, N, W, (launch,), inner=inner, strips=strips, items=M * strips)
        if regime == "chan":
            raise Unsupported(f"the chan kernel holds columns of up to {CHAN_MAX_N} rows (N = {N})")
        W = V if (vec and inner % V == 0) else 1
        if regime == "period" or (regime is None and period_preferred(dtype, W, vec, M, N, inner)):
            if not period_possible(dtype, vec, M, N, inner):
                raise Unsupported(f"the period kernels take 16-byte aligned slabs of N x inner < 2^31 elements, inner "
                                  f">= {PERIOD_MIN_INNER} (M = {M}, N = {N}, inner = {inner}, aligned: {vec})")
            _, _, T, chunks, _, periods = period_geometry(dtype, N, inner)
            bands, PB = period_bands(M, chunks, periods, sms)
            keep, smem = period_keep(op, M, bands, chunks, T, V, PB, sms)
            # a cooperative launch: a CTA an SM at most (its launch bound), its CTAs looping over the items
            launches = (_launch(M, f"{pre}_period<{o},{dt}>", (bands * chunks, 1, sms), (T,), smem=smem,
                                sig="period"),)
            return Plan("period", op, dtype, M, N, V, launches, inner=inner, strips=chunks, items=M * chunks,
                        parts=bands, chunk=PB, keep=keep)
        cfg = columns_config(op, dtype, W, N, inner) if regime in (None, "columns") else None
        if regime is None and not columns_preferred(dtype, W, cfg):
            cfg = None
        if cfg is not None:
            lanes, c, sslots = cfg
            strips = cdiv(cdiv(inner, W), lanes)
            items = M * strips
            name = f"fwd_cols<{o},{dt},{W},{columns_slots(op, dtype, W)},{sslots},{c}>"
            launch = _launch(M, name, (strips, 1, 0), (lanes, ROW_MAX_THREADS // lanes), c,
                             smem_bytes(op, W, ROW_MAX_THREADS, sslots), sig="strided")
            return Plan("columns", op, dtype, M, N, W, (launch,), inner=inner, strips=strips, items=items)
        if regime == "columns":
            cap = PORTABLE_CLUSTER * ROW_MAX_THREADS * (columns_slots(op, dtype, W) + columns_smem_slots(dtype, W))
            raise Unsupported(f"{op}: the columns kernel is forward only, N up to {cap} here")
        if regime == "bands" or (regime is None and bands_preferred(op, dtype, W, M, N, inner, sms)):
            lanes, rows, U, S, strips, G = bands_config(op, dtype, W, N, inner)
            if G > bands_most(sms):
                raise Unsupported(f"N = {N} needs {G} bands of {rows * (U + S)} rows a strip: more than half of the "
                                  f"CTAs {sms} SMs hold at once")
            smem = bands_smem(op, S)
            launch = _launch(M, f"{pre}_bands<{o},{dt},{W},{U}>", (strips * G, 1, 0), (lanes, rows), smem=smem,
                             sig="bands")
            fix = _launch(M, f"{pre}_bands_fix<{o},{dt},{W},{U}>", (strips, 1, 0), (lanes, rows), smem=smem,
                          sig="bandsfix")
            return Plan("bands", op, dtype, M, N, W, (launch, fix), inner=inner, strips=strips, items=M * strips,
                        parts=G, chunk=rows * (U + S), wait=GROUP_WAIT_NS)
        lanes, rows, strips, cap = strided_tile(op, dtype, W, M, N, inner, sms)
        name = f"{pre}_strided<{o},{dt},{W}>"
        launch = _launch(M, name, (strips, 1, cap), (lanes, rows), sig="strided")
        return Plan("strided", op, dtype, M, N, W, (launch,), inner=inner, strips=strips, items=M * strips)
    if layout != "rows":
        raise OnlineSoftmaxError(f"unknown layout {layout!r}")
    if regime == "flat":
        R = flat_rows(op, dtype, N)
        lg, slots = flat_config(op, dtype, N)
        sure = flat_sure(slots)  # the forward reads a lane's first `sure` slots unmasked
        if fwd and (1 << lg) * sure >= N:
            raise OnlineSoftmaxError(f"flat: {1 << lg} lanes of {slots} slots for N = {N}: the slots below {sure} "
                                     "would reach past the row (flat_slots picks the fewest)")
        name = f"{pre}_flat<{o},{dt},{slots},{lg}" + (f",{sure}>" if fwd else ">")
        smem = R * N * _SIZES[dtype] * len(OPS[op].inputs)
        return Plan("flat", op, dtype, M, N, V, (_launch(M, name, (1, R, 0), (FLAT_THREADS,), 1, smem, sig="flat"),),
                    rows=R)
    W, P, Nc = window_path(N, V, vec, window)  # Nc: the elements the rules make room for
    chosen = regime or choose_regime(op, dtype, W, M, Nc, sms, P, widest, split_form)
    if chosen == "warp":
        lg, slots, rpt = warp_config(op, dtype, W, Nc)
        threads = warp_geometry(op, dtype)[0]
        per_cta = (threads >> lg) * rpt
        name = f"{pre}_warp<{o},{dt},{W},{slots},{rpt},{P}>"
        return Plan("warp", op, dtype, M, N, W, (_launch(M, name, (1, per_cta, 0), (threads,), sig="warp"),),
                    P, lg=lg)
    if chosen == "block":
        if cdiv(Nc, W) <= ROW_MAX_THREADS * reg_slots(op, dtype, W):
            threads, slots = block_threads(op, dtype, W, Nc)
            sslots = smem = 0
        elif W > 1 and Nc <= row_capacity(op, dtype, W):
            threads, slots = ROW_MAX_THREADS, reg_slots(op, dtype, W)
            sslots = used_smem_slots(op, dtype, W, Nc, 1, threads, smem_slots(op, dtype, W))
            smem = smem_bytes(op, W, threads, sslots)
        else:
            raise Unsupported(f"N = {N} does not fit one CTA ({ROW_MAX_THREADS * reg_slots(op, dtype, W) * W} "
                              f"elements in registers" + (f", {row_capacity(op, dtype, W)} with shared memory)"
                                                          if W > 1 else "; the scalar path has no smem slots)"))
        _check_holds(Nc, W, 1, threads, slots, sslots)
        name = f"{pre}_row<{o},{dt},{W},{threads},{slots},{sslots},1,{P}>"
        return Plan("block", op, dtype, M, N, W, (_launch(M, name, (1, 1, 0), (threads,), 1, smem),), P)
    if chosen == "cluster":
        if W == 1 and fwd:
            raise Unsupported("the cluster regime's scalar path (W = 1) takes the backward only, whose y and dy may "
                              "start at different offsets; a forward's one input always has a window")
        if cluster_size(op, dtype, W, Nc, P) > max_cluster(op, dtype):
            raise Unsupported(f"N = {N} needs {cluster_size(op, dtype, W, Nc, P)} CTAs per row "
                              f"(> {max_cluster(op, dtype)}); rows up to "
                              f"{max_cluster(op, dtype) * row_capacity(op, dtype, W) - (W - 1 if P else 0)} "
                              "elements")
        c, threads, sslots = cluster_config(op, dtype, W, M, Nc, sms, P, widest)
        c = max(2, c)
        slots = reg_slots(op, dtype, W)
        sslots = used_smem_slots(op, dtype, W, Nc, c, threads, sslots)
        _check_holds(Nc, W, c, threads, slots, sslots)
        name = f"{pre}_row<{o},{dt},{W},{threads},{slots},{sslots},{c},{P}>"
        smem = smem_bytes(op, W, threads, sslots)
        return Plan("cluster", op, dtype, M, N, W, (_launch(M, name, (1, 1, 0), (threads,), c, smem),), P)
    if chosen == "group":
        if W == 1 or P >= 2:
            raise Unsupported("the group regime reads 16-byte accesses of rows whose out rows (and dy) start as the "
                              "inputs' (window 0 or 1)")
        G, sslots = group_config(op, dtype, W, Nc)
        if G > sms:
            raise Unsupported(f"N = {N} needs {G} group CTAs a row, more than one an SM ({sms})")
        slots = reg_slots(op, dtype, W)
        _check_holds(Nc, W, G, GROUP_THREADS, slots, sslots)
        name = f"{pre}_grp<{o},{dt},{W},{GROUP_THREADS},{slots},{sslots},{P}>"
        launch = _launch(M, name, (G, 1, 0), (GROUP_THREADS,), 1, smem_bytes(op, W, GROUP_THREADS, sslots), "group")
        fix = _launch(M, f"{pre}_grp_fix<{o},{dt},{W},{P}>", (1, 1, 0), (GROUP_FIX_THREADS,), 1, 0, "fix")
        return Plan("group", op, dtype, M, N, W, (launch, fix), P, parts=G, chunk=cdiv(cdiv(Nc, W), G),
                    wait=GROUP_WAIT_NS)
    if chosen == "split":
        # aligned rows; the window path where the out rows start as the inputs' (P = 1); scalars otherwise
        W, P, Nc = (W, P, Nc) if P < 2 else (1, 0, N)
        wave = split_wave(op, dtype, M, N, sms)  # the chunks fill the GPU with one wave's rows
        parts, chunk = split_parts(wave or M, Nc, W, sms, min_parts=2 if regime == "split" else 1)
        if M * parts > INT_MAX:
            raise Unsupported(f"{M} rows x {parts} chunks exceed the grid")
        win = f",{P}" if P else ""
        stats = f"fwd_split_stats<{dt},{W}{win}>" if fwd else f"bwd_split_stats<{o},{dt},{W}{win}>"
        apply = f"{pre}_split_apply<{o},{dt},{W}{win}>"
        return Plan("split", op, dtype, M, N, W,
                    (_launch(M, stats, (parts, 1, 0), (SPLIT_THREADS,), sig="stats"),
                     _launch(M, apply, (parts, 1, 0), (SPLIT_THREADS,), sig="apply")),
                    P, parts=parts, chunk=chunk, wave=wave)
    raise OnlineSoftmaxError(f"unknown regime {chosen!r}; regimes: {', '.join(REGIMES)}")


# ---- the instantiations the plans can pick (for the compile test and `resource_table`) -------------------


def _probe_ns(W: int, window: bool = False) -> list[int]:
    """Row lengths on both sides of every breakpoint of the rules (powers of two times W, and between); on the
    window path the rules see N + W - 1, so the breakpoints move down by W - 1."""
    ns = set(range(1, 40))
    for k in range(5, 20):
        p = 1 << k
        ns.update({p - 1, p, p + 1, p + p // 2})
    ns.update(32 * k * s + d for k in range(2, 17) for s in (1, 2, 3, 4, 8, 16, 32) for d in (0, 1))  # block: warps
    # row kernels with shared memory: every count of slots a CTA's share fills (used_smem_slots, wide_slots), 1 to
    # MAX_CLUSTER CTAs
    most = max(reg_slots(op, dt, vec_width(dt)) + max(smem_slots(op, dt, vec_width(dt)), BWD_WIDE_SLOTS.get(op, 0))
               for op in ENGINE_OPS for dt in GPU_DTYPES)
    ns.update(c * ROW_MAX_THREADS * r + d for c in (1, 2, 4, 8, 16) for r in range(1, most + 1) for d in (-1, 0, 1))
    ns.update(g * cap + d for g in (1, 2, 4, 8) for cap in range(CHAN_CAP_STEP, CHAN_BAND + 1, CHAN_CAP_STEP)
              for d in (0, 1))  # chan: every band and group (CHAN_MERGED_BAND x G among them)
    ns = {n * W for n in ns} | ns
    if window:
        ns |= {n - W + 1 for n in ns if n > W} | {n - W + 2 for n in ns if n > W}
    return sorted(ns)


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

    def add(M: int, N: int, dtype, op: str, **kw) -> None:
        try:
            p = plan(M, N, dtype, op, **kw) if op != "cross_entropy" else cross_entropy_plan(M, N, dtype, **kw)
        except Unsupported:
            return
        for l in p.launches:
            seen.setdefault(l.kernel, set()).add(p.regime)

    for name in cross_entropy_helpers():
        seen[name] = {"ce"}
    rows = (1, 9, 17, 33, 64, 1 << 20)  # few rows: every cluster width of cluster_config; many rows
    for op in ENGINE_OPS:
        for dtype in GPU_DTYPES:
            for vec, window in ((True, 0), (False, 1), (False, 2), (False, 3), (False, 0)):
                W = vec_width(dtype) if (vec or window) else 1
                for N in _probe_ns(W, window):
                    for M in rows:
                        add(M, N, dtype, op, vec=vec, window=window)
                        if op == "softmax":
                            add(M, N, dtype, "cross_entropy", vec=vec, window=window)
                    for widest, M in itertools.product((2, 4, 8), rows[:3]):  # few-row clusters narrowed (run.py)
                        add(M, N, dtype, op, vec=vec, window=window, widest=widest)
                    for regime, M in itertools.product(("warp", "block", "cluster", "group", "split", "columns",
                                                        "chan"),
                                                       (2, 1 << 20)):
                        add(M, N, dtype, op, vec=vec, window=window, regime=regime)
                if window:
                    continue
                if vec:  # flat: the rules' choice on contiguous aligned rows; forced, every N it holds (a thousand
                    #        cheap plans: its lanes and slots step wherever flat_config puts them)
                    for N in (n for n in _probe_ns(1) if n <= FLAT_MAX_N):
                        add(1 << 20, N, dtype, op, flat=True)
                    for N in range(1, FLAT_MAX_N + 1):
                        add(3, N, dtype, op, regime="flat", flat=True)
                if vec and dtype != torch.float32 and not OPS[op].backward:  # the fused cast: 16-bit in, fp32 out
                    for N, M in itertools.product(_probe_ns(W, True), rows):
                        add(M, N, dtype, op, window=1, out_dtype=torch.float32)
                    for N, widest, M in itertools.product(_probe_ns(W, True), (2, 4, 8), rows[:3]):
                        add(M, N, dtype, op, window=1, out_dtype=torch.float32, widest=widest)
                # every N the chan kernels take (their bands step by CHAN_CAP_STEP within each group count), a third
                # of the probe beyond
                ns = sorted(set(_probe_ns(W)[::3]) | set(range(1, CHAN_MAX_N + 1)))
                for inner, N, regime in itertools.product((1, 3, W, 64 * W), ns, (None, "strided", "bands")):
                    add(4, N, dtype, op, vec=vec, inner=inner, layout="strided", regime=regime)
                for N, regime in itertools.product(ns, (None, "period")):  # dim 0 of an odd width: the period
                    add(1, N, dtype, op, vec=vec, inner=PERIOD_MIN_INNER + 1, layout="strided", regime=regime)
    return seen

"""Triton softmax / log-softmax, forward and backward: three ways to evaluate the (m, d) fold.

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

Regimes (`pick_regime` chooses one when the caller does not; the variants force one each):

1. "rows"   the whole row in registers, BLOCK_N = next_power_of_2(N). Small N packs several rows
            in one [BLOCK_M, BLOCK_N] tile (`rows_config`: a tile of ~ROWS_TILE_BYTES), so a
            program moves enough bytes per iteration even at N = 128; a persistent grid
            (SMs x occupancy programs, learnt from the compiled kernel) walks the row blocks with
            the next tile's loads pipelined (`tl.range(num_stages=...)`).
            Bytes: forward 1 read + 1 write = 2*M*N*size; backward 2 reads + 1 write = 3*M*N*size.
            Picked for N <= 32768 (`rows_max_n`, every dtype: the values are fp32 in
            registers; backward at 32768 spills 32-140 bytes yet measured fastest there).
            Accepted up to 65536 forward / 32768 backward (`rows_hard_max_n`) when forced.
2. "online" one program per row (persistent), the row read in chunks of ONLINE_CHUNK elements
            and folded into per-lane states (m_i, d_i) with ONE exp per element (`_fold`), the
            lanes merged at the end with the guarded merge; then a second loop re-reads the row
            (backwards, so the chunks read last, the likeliest still in L2, come first) and writes.
            Bytes: forward 2 reads + 1 write = 3*M*N*size, backward 4 reads + 1 write = 5*M*N*size;
            the re-reads hit L2 while SMs rows fit in it, so it is picked for M >= SMs and rows
            (x, or y + dy) of at most ONLINE_MAX_ROW_BYTES = 128 KB, and for any 16-bit rows
            (measured on the H200: split moves half the bytes per ticket there and loses).
3. "split"  a row cut into C chunks of CHUNK elements, each chunk a task; the chunk's partial
            state (m, d) (backward: sum dy*y or sum dy, and a live flag) goes to a small fp32
            workspace, a per-row counter says how many partials are in, and the chunk is then
            normalised by a later task that merges the row's C partials and re-reads the chunk.
            One kernel, tasks handed out in order by an atomic ticket: ticket t reads chunk t and
            writes chunk t - LAG (LAG >= C chunks, so every partial a ticket waits for belongs to
            an earlier ticket, which publishes before it ever waits: no deadlock whatever the
            residency, and the interpreter, which runs programs one after the other, works too).
            LAG = C + programs keeps the re-read inside a window of ~LAG chunks, i.e. in L2
            (512 x 262144 fp32: 296 chunks of 32 KB, ~10 MB of x). Picked for few rows (M below
            the SM count) and for rows too long for the other two regimes.
            Bytes: forward 2 reads + 1 write of x/y, backward 4 reads + 1 write, plus the
            workspace (2 floats per chunk written, C of them read per chunk) and counters.

Tuning knobs are module constants (the lead tunes them on the H200); FORCE_CHUNK and
FORCE_PROGRAMS let tests drive the online/split regimes with tiny shapes under TRITON_INTERPRET=1.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Optional

import torch
import triton
import triton.language as tl

from ...errors import OnlineSoftmaxError

REGIMES = ("rows", "online", "split")

LOG2E = tl.constexpr(1.4426950408889634)

# ---------------------------------------------------------------------------------------------
# Tuning knobs
# ---------------------------------------------------------------------------------------------
ROWS_TILE_BYTES = 16 * 1024  # bytes of one input a rows-regime program loads per iteration (fp32)
ROWS_TILE_BYTES_16BIT = 8 * 1024  # ... and for fp16/bf16 (H200, benchmarks/results/h200-tune-triton.txt)
ROWS_PIPELINE_BYTES = 64 * 1024  # rows: prefetch the next tile through shared memory up to this
ONLINE_CHUNK = 4096  # elements per iteration of the online loops
ONLINE_PROGRAMS_PER_SM = 2  # online: the re-read window is SMs x this x row bytes ...
ONLINE_MAX_ROW_BYTES = 128 * 1024  # ... so pick_regime sends longer rows (x, or y + dy) to "split"
SPLIT_MAX_CHUNK = 8192  # largest split chunk, elements of all inputs together (registers) ...
SPLIT_MIN_CHUNK = 2048  # ... and smallest, so one ticket (an atomic) buys enough work
SPLIT_TASKS_PER_PROGRAM = 4  # split: aim for this many chunks per program at least
SPLIT_MAX_PARTIALS_BLOCK = 256  # partials merged per step in the split write half
INTERPRETER_SMS = 132  # the H200's SM count, used when there is no CUDA device

# Tests: force the chunk (elements, a power of two) of the online/split regimes, and the number
# of programs of every persistent grid. None: the rules below decide.
FORCE_CHUNK: Optional[int] = None
FORCE_PROGRAMS: Optional[int] = None

_FP16_BF16 = (torch.float16, torch.bfloat16)
DTYPES = (torch.float32, torch.float16, torch.bfloat16)


# ---------------------------------------------------------------------------------------------
# Tuning rules: small named functions, one decision each
# ---------------------------------------------------------------------------------------------
def rows_max_n(dtype: torch.dtype, backward: bool = False) -> int:
    """Largest N the "rows" regime is picked for: the row held in registers (the same for every
    dtype: the registers hold fp32). ptxas for sm_90 (Triton 3.6): forward N = 32768 at 32 warps
    takes 51-63 registers and no spill; backward spills 80-140 bytes at 32768, yet measured on the
    H200 it still beats the chunked regimes there (81% vs 78% fp32, 89% vs 74% bf16 of copy,
    benchmarks/results/h200-tune-triton.txt), so backward takes rows up to 32768 too."""
    return 32768


def rows_hard_max_n(backward: bool = False) -> int:
    """Largest N the "rows" regime accepts at all: 65536 fp32 values (the whole register file of
    an SM) forward, half of it backward (y and dy both live)."""
    return 32768 if backward else 65536


def online_min_rows(sms: int) -> int:
    """pick_regime: "online" gives one row to a program; below this many rows SMs would idle."""
    return sms


def pick_regime(M: int, N: int, dtype: torch.dtype, backward: bool = False, sms: Optional[int] = None) -> str:
    """The regime for an (M, N) problem: rows in registers while they fit, then one program per
    row with an L2-resident re-read while rows are many and short enough, else split rows."""
    sms = sms or INTERPRETER_SMS
    if N <= rows_max_n(dtype, backward):
        return "rows"
    row_bytes = N * _itemsize(dtype) * (2 if backward else 1)
    if M >= online_min_rows(sms) and (row_bytes <= ONLINE_MAX_ROW_BYTES or dtype in _FP16_BF16):
        return "online"
    return "split"


def num_warps_for(tile_elems: int) -> int:
    """Warps for a tile of `tile_elems` fp32 values: 16 values per thread up to 8192-value tiles,
    32 for 16K-32K rows (the tutorial / Liger table, applied to the whole 2-D tile)."""
    if tile_elems >= 32768:
        return 32
    if tile_elems >= 8192:
        return 16
    if tile_elems >= 4096:
        return 8
    return 4


def pipeline_stages(tile_bytes: int) -> int:
    """Prefetch the next tile (through shared memory, `tile_bytes` of it: all inputs) while this
    one is reduced, so an SM's loads do not stop during the reductions; not for the largest tiles,
    whose buffer would cost occupancy."""
    return 2 if tile_bytes <= ROWS_PIPELINE_BYTES else 1


@dataclass(frozen=True)
class RowsConfig:
    BLOCK_M: int
    BLOCK_N: int
    num_warps: int
    num_stages: int


def rows_config(M: int, N: int, dtype: torch.dtype, backward: bool = False) -> RowsConfig:
    """Whole rows; several per tile for small N so a tile is ~ROWS_TILE_BYTES of each input."""
    size = _itemsize(dtype)
    block_n = triton.next_power_of_2(N)
    block_m = max(1, rows_tile_bytes(dtype) // (block_n * size))
    block_m = min(block_m, triton.next_power_of_2(M))
    tile = block_m * block_n
    inputs = 2 if backward else 1
    return RowsConfig(block_m, block_n, rows_num_warps(tile, dtype), pipeline_stages(tile * size * inputs))


def rows_tile_bytes(dtype: torch.dtype) -> int:
    """Measured on the H200: 16-bit rows lose 15-35% with the fp32 tile (70% vs 87% of copy at
    N = 512..8192 bf16), a smaller tile with half the warps recovers it."""
    return ROWS_TILE_BYTES_16BIT if dtype in _FP16_BF16 else ROWS_TILE_BYTES


def rows_num_warps(tile_elems: int, dtype: torch.dtype) -> int:
    """Half the fp32 rule's warps for 16-bit tiles (4-8 warps measured best there)."""
    warps = num_warps_for(tile_elems)
    return max(1, warps // 2) if dtype in _FP16_BF16 else warps


@dataclass(frozen=True)
class ChunkConfig:
    CHUNK: int
    num_warps: int
    num_stages: int


def online_config(N: int, dtype: torch.dtype, backward: bool = False) -> ChunkConfig:
    """A 16 KB (fp32) chunk per iteration, three (forward) or two (backward: y and dy) in flight."""
    chunk = FORCE_CHUNK or min(ONLINE_CHUNK, triton.next_power_of_2(N))
    return ChunkConfig(chunk, num_warps_for(chunk), 2 if backward else 3)


def online_programs(sms: int) -> int:
    """One row per program; SMs x ONLINE_PROGRAMS_PER_SM rows in flight bound the L2 window."""
    return FORCE_PROGRAMS or sms * ONLINE_PROGRAMS_PER_SM


@dataclass(frozen=True)
class SplitConfig:
    CHUNK: int
    C: int  # chunks per row
    PBLOCK: int  # partials merged per step
    num_warps: int


def split_config(M: int, N: int, sms: int, backward: bool = False) -> SplitConfig:
    """Chunks small enough that every program gets SPLIT_TASKS_PER_PROGRAM of them, at least
    SPLIT_MIN_CHUNK (the ticket costs an atomic), at most SPLIT_MAX_CHUNK values of all inputs (a
    ticket holds two chunks in fp32 registers: ptxas sm_90 gives 64 registers at 8192 x 16 warps
    forward and ~100 at 4096 x 8 warps backward, two programs per SM), never wider than the row."""
    if FORCE_CHUNK:
        chunk = FORCE_CHUNK
    else:
        want = triton.cdiv(M * N, SPLIT_TASKS_PER_PROGRAM * split_programs(sms))
        chunk = triton.next_power_of_2(max(1, want))
        largest = SPLIT_MAX_CHUNK // (2 if backward else 1)
        chunk = max(SPLIT_MIN_CHUNK, min(chunk, largest))
        chunk = min(chunk, triton.next_power_of_2(N))
    c = triton.cdiv(N, chunk)
    pblock = min(triton.next_power_of_2(c), SPLIT_MAX_PARTIALS_BLOCK)
    return SplitConfig(chunk, c, pblock, num_warps_for(chunk))


def split_programs(sms: int) -> int:
    """Programs of the split grid: two per SM, one reading while the other waits on an atomic."""
    return FORCE_PROGRAMS or 2 * sms


def split_lag(C: int, M: int, programs: int) -> int:
    """Chunks between the read and the write of a chunk: at least C (a row's partials all come
    from earlier tickets), plus one round of the grid so they are normally finished; no more than
    all the chunks (then every read comes before every write)."""
    return min(C + programs, M * C)


def split_workspace_bytes(M: int, N: int, backward: bool = False, sms: int = INTERPRETER_SMS) -> int:
    """Workspace traffic of the split regime: partials written once and read C times, counters."""
    cfg = split_config(M, N, sms, backward)
    partials = M * cfg.C * 2 * 4
    return partials * (1 + cfg.C) + (M + 1) * 4 * 2


# ---------------------------------------------------------------------------------------------
# Device helpers
# ---------------------------------------------------------------------------------------------
def _itemsize(dtype: torch.dtype) -> int:
    return torch.empty((), dtype=dtype).element_size()


_SMS: dict = {}


def sm_count(device: torch.device) -> int:
    """The device's SM count (cached), or the H200's 132 for CPU tensors in the interpreter."""
    if device.type != "cuda":
        return INTERPRETER_SMS
    index = device.index if device.index is not None else torch.cuda.current_device()
    if index not in _SMS:
        _SMS[index] = torch.cuda.get_device_properties(index).multi_processor_count
    return _SMS[index]


def interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


# programs per SM of each compiled configuration, learnt from the first launch (registers, shared
# memory, threads); before that an estimate from the warps.
_OCCUPANCY: dict = {}


def _estimated_occupancy(num_warps: int) -> int:
    return max(1, min(4, 32 // num_warps))


def _programs(key, num_warps: int, sms: int, tasks: int) -> int:
    if FORCE_PROGRAMS:
        return max(1, min(FORCE_PROGRAMS, tasks))
    per_sm = _OCCUPANCY.get(key, _estimated_occupancy(num_warps))
    return max(1, min(tasks, sms * per_sm))


def _learn_occupancy(key, compiled, num_warps: int, device: torch.device) -> None:
    if key is None or key in _OCCUPANCY or compiled is None or device.type != "cuda":
        return
    try:
        props = torch.cuda.get_device_properties(device)
        regs = getattr(props, "regs_per_multiprocessor", 65536)
        smem = getattr(props, "shared_memory_per_multiprocessor", 228 * 1024)
        threads = getattr(props, "max_threads_per_multi_processor", 2048)
        n_regs = max(1, int(compiled.n_regs))
        shared = int(compiled.metadata.shared)
    except Exception:  # noqa: BLE001 - occupancy is a performance hint only
        return
    n_regs = -(-n_regs // 8) * 8  # registers are allocated in steps of 8 per thread
    occ = min(regs // (n_regs * 32 * num_warps), threads // (32 * num_warps), 32)
    if shared:
        occ = min(occ, smem // (shared + 1024))  # 1 KB per block is reserved by the driver
    _OCCUPANCY[key] = max(1, occ)


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
    if t.dtype not in DTYPES:
        raise OnlineSoftmaxError(f"{name} has dtype {t.dtype}; supported: float32, float16, bfloat16")
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
class _Plan:
    """One launch: kernel, grid, arguments and meta-parameters (and the occupancy-cache key)."""

    kernel: object
    grid: tuple
    args: tuple
    meta: dict
    key: object
    config: object


def _plan(backward: bool, log: bool, regime: str, M: int, N: int, dtype: torch.dtype, sms: int,
          tensors: tuple, strides: tuple, workspace) -> _Plan:
    """tensors: (x, out) or (y, dy, out), or their dtypes for a warmup compile; strides: their row
    strides; workspace(n, dtype, zero) -> a buffer (or its dtype)."""
    if regime == "rows":
        cfg = rows_config(M, N, dtype, backward)
        key = ("rows", backward, cfg, log, dtype)
        grid = (_programs(key, cfg.num_warps, sms, triton.cdiv(M, cfg.BLOCK_M)),)
        return _Plan(_rows_bwd_kernel if backward else _rows_fwd_kernel, grid, (*tensors, M, N, *strides),
                     dict(BLOCK_M=cfg.BLOCK_M, BLOCK_N=cfg.BLOCK_N, LOG=log, NUM_STAGES=cfg.num_stages,
                          num_warps=cfg.num_warps, num_stages=cfg.num_stages), key, cfg)
    if regime == "online":
        cfg = online_config(N, dtype, backward)
        key = ("online", backward, cfg, log, dtype)
        grid = (min(M, online_programs(sms)),)
        return _Plan(_online_bwd_kernel if backward else _online_fwd_kernel, grid, (*tensors, M, N, *strides),
                     dict(CHUNK=cfg.CHUNK, LOG=log, NUM_STAGES=cfg.num_stages,
                          num_warps=cfg.num_warps, num_stages=cfg.num_stages), key, cfg)
    if regime == "split":
        cfg = split_config(M, N, sms, backward)
        programs = min(split_programs(sms), 2 * M * cfg.C)  # never more than the tickets
        lag = split_lag(cfg.C, M, programs)
        ws = workspace(2 * M * cfg.C, torch.float32, False)
        sync = workspace(M + 1, torch.int32, True)
        *inputs, out = tensors
        return _Plan(_split_bwd_kernel if backward else _split_fwd_kernel, (programs,),
                     (*inputs, out, ws, sync, M, N, *strides, cfg.C, lag),
                     dict(CHUNK=cfg.CHUNK, PBLOCK=cfg.PBLOCK, LOG=log, num_warps=cfg.num_warps, num_stages=1),
                     None, cfg)
    raise OnlineSoftmaxError(f"unknown regime {regime!r}; known: {', '.join(REGIMES)}")


def _run(backward: bool, log: bool, regime: Optional[str], tensors: tuple) -> None:
    out = tensors[-1]
    M, N = out.shape
    if M == 0 or N == 0:
        return
    sms = sm_count(out.device)
    regime = regime or pick_regime(M, N, out.dtype, backward, sms)

    def workspace(n, dtype, zero):
        return (torch.zeros if zero else torch.empty)(n, dtype=dtype, device=out.device)

    plan = _plan(backward, log, regime, M, N, out.dtype, sms, tensors, tuple(t.stride(0) for t in tensors),
                 workspace)
    if out.is_cuda and out.device.index != torch.cuda.current_device():
        # Triton launches on the current device's context and stream: make them the tensors' device
        with torch.cuda.device(out.device):
            _launch(plan.kernel, plan.grid, plan.args, plan.meta, plan.key, out.device)
    else:
        _launch(plan.kernel, plan.grid, plan.args, plan.meta, plan.key, out.device)


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
    plan = _plan(backward, log, regime, M, N, dtype, sm_count(device), (dtype,) * n, (N,) * n,
                 lambda _n, dt, _zero: dt)
    compiled = plan.kernel.warmup(*plan.args, grid=plan.grid, **plan.meta)
    compiled._init_handles()
    return {
        "registers": int(compiled.n_regs),
        "stack": int(compiled.n_spills) * 4,  # local memory bytes per thread (spills)
        "shared": int(compiled.metadata.shared),
        "num_warps": plan.meta["num_warps"],
        "programs": plan.grid[0],
        "config": repr(plan.config),
    }

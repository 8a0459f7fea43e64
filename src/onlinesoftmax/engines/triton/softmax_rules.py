"""The Triton engine's rules: which regime, which block sizes, warps, stages and grid. Pure Python
(no triton import), so the registry can ask them on a machine without Triton.

Regimes (`pick_regime` chooses one when the caller does not; the variants force one each):

1. "rows"   the whole row in registers, BLOCK_N = next_power_of_2(N), or two tiles of BLOCK_N + TAIL
            lanes where they hold the row in fewer (`rows_pieces`). Small N packs several rows
            in one [BLOCK_M, BLOCK_N] tile (`rows_config`: a tile of at most ROWS_TILE_BYTES), so a
            program moves enough bytes per iteration even at N = 128; one tile a program
            (`rows_persistent`: the persistent grid, SMs x occupancy programs walking the tiles with
            the next tile's loads pipelined, measured 5-10 points of copy slower on the H200).
            Bytes: forward 1 read + 1 write = 2*M*N*size; backward 2 reads + 1 write = 3*M*N*size.
            Picked for N <= 32768 (`rows_max_n`, every dtype: the values are fp32 in
            registers; backward at 32768 spills 32-140 bytes yet measured fastest there).
            Accepted up to 65536 forward / 32768 backward (`rows_hard_max_n`) when forced.
2. "online" one program per row (persistent), the row read in chunks of ONLINE_CHUNK_BYTES
            and folded into per-lane states (m_i, d_i) with ONE exp per element, the lanes merged
            at the end with the guarded merge; then a second loop re-reads the row (backwards, so
            the chunks read last, the likeliest still in L2, come first) and writes.
            Bytes: forward 2 reads + 1 write = 3*M*N*size, backward 4 reads + 1 write = 5*M*N*size
            (the log-softmax backward 3 reads + 1 write: pass 1 reads dy alone); the re-reads hit L2
            while the rows in flight fit in it, so it is picked for M >= SMs and (online_takes)
            16-bit rows but a softmax backward's y + dy past 448 KB, and fp32 forward rows up to
            256 KB (the fp32 backward goes split).
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
FORCE_PROGRAMS let tests drive the online/split regimes with tiny shapes under TRITON_INTERPRET=1, and
FORCE_PROGRAMS puts the rows regime on its persistent grid, so that its loop's later tiles run.

A non-last dim is read where it lies: up to COLS_STREAM_MAX_N rows (COLS_STREAM_BWD_MAX_N backward) by the streamed
columns kernel (`cols_stream_config`: every column inside one thread), up to COLS_MAX_N by the tile columns kernel
(`cols_config`: all N rows of BLOCK_I adjacent columns in one tile, reduced along its first axis); longer ones are
moved to the last dim.
"""

from __future__ import annotations

import sys
import types
from dataclasses import dataclass
from typing import Optional

import torch

from ...intmath import cdiv, pow2ceil, pow2floor
from ...opdefs import GPU_DTYPES
from ...runtime import DEFAULT_SMS

REGIMES = ("rows", "online", "split")
_FP16_BF16 = (torch.float16, torch.bfloat16)

# ---------------------------------------------------------------------------------------------
# Tuning knobs
# ---------------------------------------------------------------------------------------------
ROWS_TILE_BYTES = 16 * 1024  # bytes of one input a rows-regime program loads per iteration (fp32)
ROWS_TILE_BYTES_16BIT = 8 * 1024  # ... and for fp16/bf16 (H200, benchmarks/results/h200-tune-triton.txt)
ROWS_SCALAR_TILE_BYTES = 8 * 1024  # ... and for fp32 scalar rows 129-256 wide, warps fixed at 2 (rows_scalar_tile)
ROWS_ONE_WARP_TILE_BYTES = 2 * 1024  # ... and for other scalar rows 65-256 wide, on one warp (rows_scalar_tile)
ROWS_PIECES_MIN_N = 129  # rows: a row this long or longer in two power-of-two tiles where they take fewer lanes
# than one (rows_pieces); None: one tile
ROWS_PIECES_MAX_N = 16383  # ... and no longer than this
ROWS_BACKWARD_FULL_WARPS_LANES = 16384  # rows backward: a tile of this many lanes or more on 32 warps; None: rules'
ROWS_BACKWARD_MIN_WARPS = 4  # rows backward: a rules' tile on at least this many warps (not the scalar tiles); None
ROWS_16BIT_LONG_WARPS = 4  # rows: long unaligned 16-bit rows (rows_16bit_long) on this many warps; None: the rules'
ROWS_PERSISTENT = False  # rows: a persistent grid walking the tiles (True), or one tile a program (rows_persistent)
ROWS_UNITS = True  # rows: rows of whole 16-byte vectors that Triton cannot prove so, told so (rows_unit)
ROWS_WINDOW_MIN_N = 8192  # rows: scalar rows this long or longer through 16-byte windows (rows_window); None: none
ROWS_WINDOW_TAIL_MIN_BYTES = 64 << 20  # ... and where the last row needs a launch of its own, inputs this large
ROWS_PIPELINE_BYTES = 64 * 1024  # rows, persistent: prefetch the next tile through shared memory up to this
CHUNK_WINDOWS = True  # online, split: scalar rows (odd N, a sliced view) through 16-byte windows (chunk_window)
ONLINE_CHUNK_BYTES = 16 * 1024  # an input's bytes per iteration of the online loops (8192 16-bit elements) ...
ONLINE_STAGES = 4  # ... and chunks in flight a loop, where ONLINE_STAGE_BYTES hold them (online_stages)
ONLINE_STAGE_BYTES = 128 * 1024
ONLINE_PROGRAMS_PER_SM = 1  # online: the re-read window is SMs x this x row bytes ...
ONLINE_MAX_ROW_BYTES_FP32 = 256 * 1024  # ... so pick_regime sends fp32 forward rows longer than this to "split" ...
ONLINE_MAX_ROW_BYTES_16BIT = 448 * 1024  # ... and a 16-bit y + dy longer than this (online_takes)
COLS_MAX_N = 1024  # the columns kernel (a non-last dim): the most rows a tile holds whole ...
COLS_TILE = 8192  # ... elements of a tile (forward; half of it backward, for y and dy) ...
COLS_ELEMS_PER_THREAD = 16  # ... and the elements of each input a thread holds (the warps follow)
COLS_MAX_WARPS = 16
COLS_STREAM_MAX_N = 64  # a non-last dim up to this long takes the streamed columns kernel forward ...
COLS_STREAM_BWD_MAX_N = 32  # ... and up to this long backward (cols_stream_config) ...
COLS_STREAM_WARPS = 4  # ... programs of this many warps ...
COLS_STREAM_VALUES = 64  # ... each thread holding this many values of all inputs a tile (a longer dim; half in
#                          16-bit backward) ...
COLS_WHOLE_VALUES = 128  # ... or the whole dim, where it takes no more than this
COLS_STREAM_L2_BYTES = 16 << 20  # ... and the programs' columns in flight between the passes within this of L2
SPLIT_MAX_CHUNK = 8192  # largest split chunk, elements of all inputs together (registers; split_largest_chunk) ...
SPLIT_MIN_CHUNK = 2048  # ... and smallest, so one ticket (an atomic) buys enough work
SPLIT_TASKS_PER_PROGRAM = 2  # split: aim for this many chunks per program at least
SPLIT_MAX_PARTIALS_BLOCK = 256  # partials merged per step in the split write half
INTERPRETER_SMS = DEFAULT_SMS  # the H200's SM count, used when there is no CUDA device

# Tests: force the chunk (elements, a power of two) of the online/split regimes, and the number
# of programs of every persistent grid. None: the rules below decide.
FORCE_CHUNK: Optional[int] = None
FORCE_PROGRAMS: Optional[int] = None


# ---------------------------------------------------------------------------------------------
# What the launchers accept, and which regime they pick
# ---------------------------------------------------------------------------------------------
def unsupported(regime: str, N: int, dtype: torch.dtype, backward: bool = False) -> Optional[str]:
    """Why the launchers refuse rows of N elements of `dtype` in `regime`, or None: the one rule
    both the launchers and the registry's variants apply."""
    if regime not in REGIMES:
        return f"unknown regime {regime!r}; known: {', '.join(REGIMES)}"
    if dtype not in GPU_DTYPES:
        names = ", ".join(str(d).replace("torch.", "") for d in GPU_DTYPES)
        return f"dtype {str(dtype).replace('torch.', '')} not supported; supported: {names}"
    if regime == "rows" and N > rows_hard_max_n(backward):
        return (f"N = {N} > {rows_hard_max_n(backward)}: the 'rows' regime holds a whole row in one program's "
                f"registers ({'y and dy' if backward else 'x'} in fp32); use 'online' or 'split'")
    return None


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


def online_takes(N: int, dtype: torch.dtype, backward: bool, log: bool) -> bool:
    """Whether the online regime takes rows of N (given rows enough for the SMs), by the part it re-reads (x forward,
    y + dy softmax backward, dy log-softmax backward). Timed at chunks of 16 KB an input, a program an SM, 4 stages,
    against split, % of copy on an H100 (tune_triton.py --only 'online|split'):
    - 16-bit rows (session 64, bf16, chunks of 8192): any one-input re-read, and y + dy up to
      ONLINE_MAX_ROW_BYTES_16BIT. Forward 74 / 60 at 65537, 67 / 60 at 131071, 60 / 59 at 200003 (400 KB);
      log-softmax backward 82 / 64, 74 / 63, 69 / 64; softmax backward 69 / 67 at 65537 (y + dy 256 KB), 61 / 66 at
      131071 (512 KB), 56 / 66 at 200003. On the H200 the log-softmax backward at 262143 split ran at 46.5% against
      torch's 65.1 (0.71x), online at 200003 at 64.6.
    - fp32 forward rows up to ONLINE_MAX_ROW_BYTES_FP32 (session 65, benchmarks/results/session65): online at
      chunks of 4096 against split at its chunk then (8192), softmax 72 / 57 at 50001, 70 / 59 at 65537, 66 / 61
      at 131071 (512 KB), log_softmax within 2 points; against split at chunks of 4096 (split_largest_chunk), 486.7 /
      500.1 us at 50001 (200 KB) but 534.0 / 513.4 at 131071, so online up to 256 KB (132 rows in flight: 34 MB,
      within the L2). The fp32 backward goes split: 88-89% of copy at 50001 and 131071, online 59-78."""
    if dtype in _FP16_BF16:
        return not backward or log or 2 * N * dtype.itemsize <= ONLINE_MAX_ROW_BYTES_16BIT
    return not backward and N * dtype.itemsize <= ONLINE_MAX_ROW_BYTES_FP32


def pick_regime(M: int, N: int, dtype: torch.dtype, backward: bool = False, sms: Optional[int] = None,
                log: bool = False) -> str:
    """The regime for an (M, N) problem: rows in registers while they fit, then one program per
    row with an L2-resident re-read while rows are many and short enough, else split rows."""
    sms = sms or INTERPRETER_SMS
    if N <= rows_max_n(dtype, backward):
        return "rows"
    if M >= online_min_rows(sms) and online_takes(N, dtype, backward, log):
        return "online"
    return "split"


# ---------------------------------------------------------------------------------------------
# Block sizes, warps and stages: small named functions, one decision each
# ---------------------------------------------------------------------------------------------
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


def rows_persistent() -> bool:
    """Whether the rows regime's grid is persistent (SMs x occupancy programs, each walking tiles) rather than
    one tile a program. One tile a program, loading straight to registers as Liger's and Inductor's kernels do,
    beat the persistent pipelined grid at the rules' tile in all 7 problems of `tune_triton.py --quick` on the
    H200, by 5-10 points of copy (fp32 softmax at N = 128 90 -> 98%, bf16 at 512 86 -> 96%, fp32 backward at
    512 97 -> 102%; benchmarks/results/h200-pending12-3d69a1a/triton). Tests that force the programs get the
    persistent loop, so its second and later tiles stay exercised."""
    return ROWS_PERSISTENT or bool(FORCE_PROGRAMS)


def pipeline_stages(tile_bytes: int) -> int:
    """A persistent grid prefetches the next tile (through shared memory, `tile_bytes` of it: all inputs) while
    this one is reduced, so an SM's loads do not stop during the reductions; not for the largest tiles, whose
    buffer would cost occupancy. One tile a program has no next tile: one stage."""
    return 2 if rows_persistent() and tile_bytes <= ROWS_PIPELINE_BYTES else 1


def rows_scalar(N: int, strides, aligned: bool = True) -> bool:
    """Whether the rows kernel's accesses are one element each: Triton vectorises a row's loads and stores only where
    it can prove 16 of its elements aligned, i.e. N and every row stride multiples of 16 (its integer
    specialisation) and every pointer 16-byte aligned (`aligned`). Odd N, N = 1000 or a sliced view are scalar."""
    return not (aligned and N % 16 == 0 and all(s % 16 == 0 for s in strides if s is not None))


def rows_unit(N: int, strides, itemsize: int, aligned: bool = True) -> int:
    """Elements U of a 16-byte vector where rows N wide are whole vectors that Triton would read one element at a time
    (rows_scalar): N and every row stride multiples of U, i.e. of 16 bytes but not of 16 elements (N = 1000 or 3000
    in every dtype), the pointers 16-byte aligned. The rows kernel then rounds N and the strides down to multiples of
    U (UNIT; they are already), which its analysis reads as U dividing them: 16-byte accesses, no windows. Else 1."""
    u = 16 // itemsize
    if not ROWS_UNITS or not rows_scalar(N, strides, aligned) or not aligned:
        return 1
    return u if N % u == 0 and all(s % u == 0 for s in strides if s is not None) else 1


def rows_window(N: int, strides, itemsize: int, aligned: bool = True) -> int:
    """Elements V of the 16-byte vectors the rows kernel reads scalar rows through (rows_window_fits), or 1 for none:
    only for rows of at least ROWS_WINDOW_MIN_N elements. On the H200 at 3d10205
    (benchmarks/results/h200-session57/triton/ab.txt, every row windowed against none, 4 ops, fp32 and bf16) the
    windows gained at N = 12289 and 32001 (16 cells: mean +7.3 points of copy, up to +22; 4 lost, the log-softmax
    backward's -7.5 and -9.5 the worst) and lost below (80 cells: mean -3.4; N = 129 -10.7 and 1025 -16.6 on
    average, to -32), where the masked vectors at each end weigh more against a short row; 4097 to 12289 untimed."""
    if ROWS_WINDOW_MIN_N is None or N < ROWS_WINDOW_MIN_N:
        return 1
    return rows_window_fits(N, strides, itemsize, aligned)


def row_window(N: int, strides, itemsize: int, aligned: bool = True) -> int:
    """V (16 bytes of elements) where rows N wide can be read through windows, else 1: each row read from the V-aligned
    element at or before its start, as whole vectors, the < V elements past each end of its vector body apart (the
    ends, one element at a time). Only for scalar rows (rows_scalar) where every row starts at the same offset of a
    vector in every tensor (the pointers 16-byte aligned, one row stride), rows apart (a stride of at least N) and N
    holding a vector. The kernels that take them: rows_window, chunk_window."""
    if not aligned or not rows_scalar(N, strides, aligned):
        return 1
    v = 16 // itemsize
    given = {s for s in strides if s is not None}
    if len(given) != 1:
        return 1
    return v if given.pop() >= N >= v else 1


def rows_window_fits(N: int, strides, itemsize: int, aligned: bool = True) -> int:
    """V where rows N wide can be read through windows (row_window) in the rows kernel, whatever their length's rule
    (rows_window), else 1: where the widest window, N + V - 1 elements, takes at most V lanes more than the row read
    one element at a time (rows_pieces: at N = 32767 it would double the block, and spill; at 4095, 4096 + V lanes
    where a scalar row takes 4096). The rows kernel reads a row's window whole, neighbours' elements too (unused),
    so the last row's may pass the tensor's end: the launcher leaves that row to a launch of its own
    (rows_window_tail)."""
    v = row_window(N, strides, itemsize, aligned)
    return v if v > 1 and sum(rows_pieces(N, v)) <= sum(rows_pieces(N)) + v else 1


def chunk_window(N: int, strides, itemsize: int, aligned: bool = True, chunk: Optional[int] = None) -> int:
    """V where the online and split kernels read rows N wide through windows (row_window; CHUNK_WINDOWS), else 1. Their
    chunks cover a row's vector body alone and the ends go through a masked chunk of their own, so nothing outside
    the row is read and no row needs a launch of its own. chunk: the online kernel's, whose ends' chunk must hold
    both ends, 2V lanes (not so a row of a few elements, 4 fp32 in a chunk of 4, or a chunk tests force). Measured
    on the H200 without the windows (session 61, benchmarks/results/h200-session61/): odd long rows one element an
    access, bf16 softmax at 50001-262143 in the online regime 24-25% of copy against torch's 40-46%, fp32 in the
    split regime 44-46% against 45-49%. With them, on an H100 against 1481bcb in one run (session 62,
    benchmarks/results/h100-session62/call1-4d6e0f7/ab.txt): the bf16 forward at 50001-262143 29-34% -> 59-68%, the
    backward there (online bf16, split fp32) +6 to +12 points, the fp32 forward (split) -1.5 to +4."""
    v = row_window(N, strides, itemsize, aligned) if CHUNK_WINDOWS else 1
    return v if chunk is None or chunk >= 2 * v else 1


def rows_window_tail(M: int, N: int, itemsize: int) -> bool:
    """Whether M rows whose last row's window would pass the tensor's end take the windows anyway, the last row in a
    scalar launch of its own: only from ROWS_WINDOW_TAIL_MIN_BYTES of input. Such a plan is two launches, which the
    ready launch never keeps, so every call is planned: on the H200's host 36-50 us a call against 13-18 us ready
    (benchmarks/results/h200-session57/triton/host-triton.txt), where the windows saved about a fifth of the
    kernel's time at M x N = 2^27 (rows_window). A 64 MiB input's forward moves 128 MiB, ~32 us at copy speed, about
    what the plan costs the host: below that an eager call waits on the host, and what the windows save the kernel
    does not shorten it. Derived from those two measurements, not timed."""
    return M * N * itemsize >= ROWS_WINDOW_TAIL_MIN_BYTES


def rows_scalar_tile(N: int, dtype: torch.dtype) -> Optional[tuple[int, int]]:
    """(bytes of one input a tile holds, its warps) for scalar rows (rows_scalar) N wide, where they do not take the
    rules' tile; None where they do. With no 16-byte vectors Triton gives a thread one element a load and lays a
    tile's warps along the row before its rows: the rules' fp32 [32, 128] tile on 8 warps holds one column of 16 rows
    a thread, and each row's max and sum cross 128 threads (~10 shuffles an element and shared memory, the TTGIR and
    PTX in docs/tuning.md). A tile of one warp holds whole rows, BLOCK_N / 32 elements of each a thread. Rows of
    65-128, and 16-bit rows of 129-256, take tiles of one warp of ROWS_ONE_WARP_TILE_BYTES; fp32 rows of 129-256 the
    8 KB tile (ROWS_SCALAR_TILE_BYTES) on 2 warps, half the rules' (rows of 129-191 in two tiles, rows_pieces, as
    if 256 wide). `tune_triton.py --n 127 129`, % of copy (session 58, an H100, copy 3000 GB/s,
    benchmarks/results/h100-session58/tune-odd-n.txt), the previous rule's launch (the rules' tile at 127,
    the 8 KB tile at 129) against a warp's 2 KB: 127 fp32 forward
    53 -> 99, backward 93 -> 100, bf16 46 -> 94 and 68 -> 96; 129 bf16 44 -> 68 and 67 -> 85, where fp32 kept the
    8 KB tile (forward 96 against 91, backward 101 both). The 8 KB tile at 129 on the H200 (session 53,
    h200-session53/triton/tune-odd-n.txt): fp32 forward 35 -> 78%, backward 66 -> 88%. Scalar rows of 33-64 (where
    two warps share a 64-wide row) and of 257-1024 were not timed, and at 1025 and 4097 no setting won: the rules'
    tile."""
    if 64 < N <= 128 or (128 < N <= 256 and dtype in _FP16_BF16):
        return ROWS_ONE_WARP_TILE_BYTES, 1
    if 128 < N <= 256:
        return ROWS_SCALAR_TILE_BYTES, 2
    return None


@dataclass(frozen=True)
class RowsConfig:
    BLOCK_M: int
    BLOCK_N: int
    num_warps: int
    num_stages: int
    TAIL: int = 0  # lanes of a second tile past BLOCK_N (rows_pieces); 0: none


def rows_pieces(N: int, v: int = 1) -> tuple[int, int]:
    """(BLOCK_N, TAIL): the lanes that hold a row N wide read through windows of v elements (rows_window; v = 1: none),
    i.e. N + v - 1 lanes (a row may start anywhere in its first vector): one power-of-two tile (TAIL = 0), or two
    where they take fewer lanes: the largest power of two in them, whole, then the power of two that holds the rest,
    masked (a vector at least). A row of 2^k + 1 takes 2^k + 1 lanes instead of 2^(k+1), half the loads,
    exponentials and registers (N = 129, 1025, 4097; 3000 takes 2048 + 1024; through windows of 4, 4097 takes
    4096 + 4); N up to 1.5 times a power of two gains, a longer one not (1000: 512 + 512, one tile of 1024). From
    ROWS_PIECES_MIN_N (129, the shortest timed) to ROWS_PIECES_MAX_N: a 16-bit forward row of 24576 in two tiles
    would hold 96 values a thread (147 registers, ptxas) where one tile holds 64. At 16382 x 8193 on the H200
    (benchmarks/results/h200-session59/probe/), rows read one element at a time in two tiles (8192 + 1) against one
    windowed tile of 16384 lanes: softmax forward fp32 91.8 against 54.8% of copy, bf16 63.1 against 28.9; backward
    fp32 66.9 against 92.6, bf16 76.1 against 57.0."""
    width = N + v - 1
    block, head = pow2ceil(width), pow2floor(width)
    tail = max(pow2ceil(width - head), v)
    pieces = (ROWS_PIECES_MIN_N is not None and ROWS_PIECES_MIN_N <= N <= ROWS_PIECES_MAX_N and head < width
              and head + tail < block)
    return (head, tail) if pieces else (block, 0)


def rows_config(M: int, N: int, dtype: torch.dtype, backward: bool = False, scalar: bool = False,
                v: int = 1, log: bool = False) -> RowsConfig:
    """Whole rows; several per tile for small N, a power of two of them, so a tile holds at most ROWS_TILE_BYTES of
    each input (more than half of it, unless one row passes it); scalar: the accesses are one element each
    (rows_scalar), and some widths then take their own tile (rows_scalar_tile); v: the rows are read through
    windows of v elements (rows_window), and a row may take two tiles (rows_pieces); log: the op is log_softmax's."""
    size = dtype.itemsize
    block_n, tail = rows_pieces(N, v)
    own = rows_scalar_tile(N, dtype) if scalar else None
    block_m = pow2floor(max(1, (own[0] if own else rows_tile_bytes(dtype)) // ((block_n + tail) * size)))
    block_m = min(block_m, pow2ceil(M))
    tile = block_m * (block_n + tail)
    inputs = 2 if backward else 1
    warps = own[1] if own else (ROWS_16BIT_LONG_WARPS if rows_16bit_long(tile, dtype, backward, log, scalar or v > 1)
                                else rows_num_warps(tile, dtype, backward))
    return RowsConfig(block_m, block_n, warps,
                      pipeline_stages(tile * size * inputs), tail)


def rows_tile_bytes(dtype: torch.dtype) -> int:
    """Measured on the H200: 16-bit rows lose 15-35% with the fp32 tile (70% vs 87% of copy at
    N = 512..8192 bf16), a smaller tile with half the warps recovers it."""
    return ROWS_TILE_BYTES_16BIT if dtype in _FP16_BF16 else ROWS_TILE_BYTES


def rows_num_warps(tile_elems: int, dtype: torch.dtype, backward: bool = False) -> int:
    """Half the fp32 rule's warps for 16-bit tiles (4-8 warps measured best there). A backward tile of
    ROWS_BACKWARD_FULL_WARPS_LANES or more (one row past 8192: y and dy in fp32 registers fill an SM's register file
    whatever the warps, one program an SM) takes 32 warps, fewer values a thread: `tune_triton.py --n 8193 12289
    32001` on the H200 (session 59, benchmarks/results/h200-session59/), % of copy, the rules' warps against 32:
    8193 softmax backward fp32 88 -> 93, bf16 54 -> 56; 12289 log-softmax backward fp32 75 -> 94, bf16 37 -> 51
    (8 warps: 255 registers a thread, ptxas), softmax backward fp32 101 both, bf16 70 -> 73; 32001 (fp32 already
    32) bf16 50 and 39 both. Below that, a backward tile takes ROWS_BACKWARD_MIN_WARPS at least: the 16-bit halving
    put N = 3000 (3072 lanes in two tiles) and 1025 (two rows of 1025) on 2 warps, 48 lanes of y and of dy a thread
    at 3000 (182 registers, ptxas). bf16 log-softmax backward, % of copy, 2 warps against 4: 3000 34.3 -> 60.7 and
    1025 69.4 -> 84.8 on an H100 (benchmarks/results/h100-session60/, call2 and call3); on the H200 3000 66.5
    against 74.2 on 4 warps in one tile (session 59, h200-session59/triton-35ee1de/ab.txt) and 1025 70 against 77
    on twice the warps (tune-1025-3000-partial.txt). Doubling the warps past 4 lost on the H100: 4097 log-softmax
    backward 92.9 -> 73.3 on 8 warps, 8193 softmax backward 98.5 -> 77.9 on 16 (call2-89c8ff1/ab-warps.txt)."""
    if backward and ROWS_BACKWARD_FULL_WARPS_LANES is not None and tile_elems >= ROWS_BACKWARD_FULL_WARPS_LANES:
        return 32
    warps = num_warps_for(tile_elems)
    warps = max(1, warps // 2) if dtype in _FP16_BF16 else warps
    if backward and ROWS_BACKWARD_MIN_WARPS is not None:
        warps = max(warps, ROWS_BACKWARD_MIN_WARPS)
    return warps


def rows_16bit_long(tile_elems: int, dtype: torch.dtype, backward: bool, log: bool, unaligned: bool) -> bool:
    """Whether a tile runs on ROWS_16BIT_LONG_WARPS (4) instead of rows_num_warps': one 16-bit row that Triton does
    not vectorise itself (unaligned: read one element at a time, or through windows) in a tile of fewer than 32768
    lanes and at least 16384 forward (N = 12289-16383), more than 8192 for the log-softmax backward (8193-16383).
    Two such rows an SM at 255 registers on 4 warps (the log-softmax backward spills 160-208 bytes at 16384 lanes),
    where the rules' 8 warps take 208-224 registers forward at 16384 lanes and the backward's 32 (8 at 8200 lanes: 176
    registers) one row an SM (ptxas). `tune_triton.py --n 8193 12289 16383 --ops softmax log_softmax
    log_softmax_backward` on the H200 (session 61, benchmarks/results/h200-session61/call1-1481bcb/tune-odd-n.txt),
    bf16, % of copy, the rules' warps against 4: softmax 12289 42 -> 59, 16383 50 -> 70; log_softmax 42 -> 66 and
    50 -> 69; log-softmax backward 8193 47 -> 70, 12289 50 -> 69, 16383 57 -> 71. Left out, not measured better: the
    forward at 8193 (softmax 62 -> 55, log_softmax 62 -> 73 on 4 warps), the softmax backward (not timed on 4 warps),
    aligned rows (16384: not timed), fp16 (not timed; the same registers as bf16). Shipped, on an H100 against
    1481bcb in one run (session 62, benchmarks/results/h100-session62/call1-4d6e0f7/ab.txt): softmax 12289 56 -> 77,
    16383 65 -> 91; log_softmax 56 -> 83, 65 -> 88; log-softmax backward 8193 63 -> 89, 12289 69 -> 86, 16383 77 -> 84."""
    if ROWS_16BIT_LONG_WARPS is None or dtype not in _FP16_BF16 or not unaligned or tile_elems >= 32768:
        return False
    if backward:
        return log and tile_elems > 8192
    return tile_elems >= 16384


@dataclass(frozen=True)
class ColsConfig:
    BLOCK_N: int
    BLOCK_I: int
    num_warps: int


def cols_config(N: int, inner: int, dtype: torch.dtype, backward: bool = False) -> Optional[ColsConfig]:
    """The columns kernel over a non-last dim (N rows of `inner` contiguous columns), or None beyond COLS_MAX_N
    rows: a tile of all the rows (BLOCK_N = next_power_of_2(N)) by BLOCK_I columns, COLS_TILE elements of all
    inputs together (fewer where inner is short; at N = 1024, 8 columns: 16 or 32 bytes of each row),
    COLS_ELEMS_PER_THREAD of each input a thread (the warps: powers of 2, as the tile is). ptxas for sm_90: the
    backward of 16-bit log_softmax spilled at N = 1024 with the forward's tile; tests/test_triton_interpreter.py
    checks the largest. On the H200 (h200-tune-triton-columns-85e14e9.txt), % of copy fp32 / bf16: C = 64 backward
    98-100 / 54-93, C = 150 forward 70-71 / 33-34 and backward 74-87 / 48-66, C = 1000 (inner 4096) forward 64 / 27
    and backward 29-30 / 19; not tuned beyond this rule."""
    if N > COLS_MAX_N:
        return None
    block_n = pow2ceil(N)
    tile = COLS_TILE // (2 if backward else 1)  # elements of all inputs together
    block_i = min(tile // block_n, pow2ceil(inner))  # tile // block_n >= 4: block_n <= COLS_MAX_N
    warps = min(COLS_MAX_WARPS, max(4, block_n * block_i // (32 * COLS_ELEMS_PER_THREAD)))
    return ColsConfig(block_n, block_i, warps)


@dataclass(frozen=True)
class ColsStreamConfig:
    BLOCK_N: int  # rows a tile
    BLOCK_I: int  # columns a program: its threads x one 16-byte access
    WHOLE: bool  # the dim is one tile
    num_warps: int


def cols_stream_config(N: int, dtype: torch.dtype, backward: bool = False) -> Optional[ColsStreamConfig]:
    """The streamed columns kernel for a non-last dim of up to COLS_STREAM_MAX_N rows forward, COLS_STREAM_BWD_MAX_N
    backward (and COLS_MAX_N; None beyond: the tile kernel): every column in one thread, the whole dim in one tile
    when its values (all inputs) fit COLS_WHOLE_VALUES a thread, else tiles of COLS_STREAM_VALUES.

    Timed on the H200 against the tile kernel (benchmarks/tune_triton.py --columns,
    benchmarks/results/h200-tune-triton-columns-85e14e9.txt), % of copy over dim 1 of (B, C, 256, 256), fp32 / bf16:
    C = 19 forward 92 / 62-68 (tile kernel 25 / 6-7), backward 73-76 / 46-54 (65 and 36 / 36 and 19); C = 21 alike;
    C = 64 forward 69-72 / 45-49 (39-40 / 21), but backward 32-35 / 19-21 against the tile kernel's 98-100 / 54-93;
    C = 150 the tile kernel everywhere (forward 70 against 33). A whole-dim tile of 128 values (fp32 N = 19..32
    forward, one read) ran at 92 where tiles re-read from L2 ran at 81-84; tiles of 64 values beat 32 but for 16-bit
    log_softmax backward (46 against 50 at C = 19, 40 against 46-47 at C = 21, where torch's runs at 49 and 38), so
    the 16-bit backward takes tiles of 32 (softmax backward 50 and 46 there, against torch's 34 and 28)."""
    if N > min(COLS_STREAM_BWD_MAX_N if backward else COLS_STREAM_MAX_N, COLS_MAX_N):
        return None
    vec, inputs = 16 // dtype.itemsize, 2 if backward else 1
    block_i = vec * 32 * COLS_STREAM_WARPS
    whole = pow2ceil(N) * vec * inputs <= COLS_WHOLE_VALUES
    values = COLS_STREAM_VALUES // (2 if backward and dtype in _FP16_BF16 else 1)
    block_n = pow2ceil(N) if whole else max(1, values // (vec * inputs))
    return ColsStreamConfig(block_n, block_i, whole, COLS_STREAM_WARPS)


def cols_stream_programs(N: int, cfg: ColsStreamConfig, itemsize: int, backward: bool) -> int:
    """The most programs whose columns (all inputs) stay within COLS_STREAM_L2_BYTES between the two passes
    (unbounded for a whole-dim tile, read once)."""
    if cfg.WHOLE:
        return 2**31 - 1
    return max(1, COLS_STREAM_L2_BYTES // (N * cfg.BLOCK_I * itemsize * (2 if backward else 1)))


@dataclass(frozen=True)
class ChunkConfig:
    CHUNK: int
    num_warps: int
    num_stages: int


def online_config(N: int, dtype: torch.dtype, backward: bool = False) -> ChunkConfig:
    """ONLINE_CHUNK_BYTES of each input an iteration: 8192 16-bit elements (on 16 warps; tuned, online_stages) or 4096
    fp32 ones (on 8: 8192 spilled in the fp32 backward, which the rules never pick online), online_stages of
    them in flight."""
    chunk = FORCE_CHUNK or min(ONLINE_CHUNK_BYTES // dtype.itemsize, pow2ceil(N))
    return ChunkConfig(chunk, num_warps_for(chunk), online_stages(chunk, dtype.itemsize, backward))


def online_stages(chunk: int, itemsize: int, backward: bool) -> int:
    """Chunks in flight in the online loops: ONLINE_STAGES where that many of every input's chunks fit in
    ONLINE_STAGE_BYTES (128 KB: four 16 KB chunks of both inputs backward), at least 1. On an H100, 16-bit rows of
    65537-200003, a program an SM at chunk 8192: 4 stages against 3 (forward) or 2 (backward), % of copy: softmax
    74 / 68 at 65537, 67 / 63 at 131071; log-softmax backward 82 / 62, 74 / 61, 69 / 55
    (benchmarks/results/session64/call1-h100-04d83a7/tune-long16.txt)."""
    per_stage = chunk * itemsize * (2 if backward else 1)
    return max(1, min(ONLINE_STAGES, ONLINE_STAGE_BYTES // per_stage))


def online_programs(sms: int) -> int:
    """One row per program; SMs x ONLINE_PROGRAMS_PER_SM rows in flight bound the L2 window (one an SM: at chunk
    8192 16-bit elements a second program's 16 warps would not be resident beside the first; two an SM timed the
    same)."""
    return FORCE_PROGRAMS or sms * ONLINE_PROGRAMS_PER_SM


@dataclass(frozen=True)
class SplitConfig:
    CHUNK: int
    C: int  # chunks per row
    PBLOCK: int  # partials merged per step
    num_warps: int


def split_largest_chunk(backward: bool, itemsize: int, v: int) -> int:
    """The split kernel's largest chunk: SPLIT_MAX_CHUNK values of all inputs, so that a ticket's two chunks (read
    and write half) in fp32 registers leave two programs resident an SM (split_programs): ptxas sm_90 gives 48-64
    registers at 8192 x 16 warps forward and 64-113 at 4096 x 8 warps backward. Half of it for the fp32 forward
    through windows (v > 1), where 8192 takes 81-86 registers (16 warps: 87K of an SM's 64K for two programs;
    test_kernels_compile_for_sm90_without_spills). Timed on an H100 (session 65, tune_triton.py --few,
    benchmarks/results/session65), the fp32 forward at odd N, 8192 against 4096: 623.6 against 500.1 us at
    2684 x 50001, 586.9 / 513.4 at 1024 x 131071, 590.4 / 516.7 at 512 x 262143, 44.2 / 37.8 at 7 x 1000003, 85.2
    / 72.8 at 16 x 1000003 (log_softmax likewise); at even N, where 8192 takes 64 registers, 35.5 / 39.7 at
    64 x 131072 and 61.4 / 70.7 at 64 x 262144."""
    largest = SPLIT_MAX_CHUNK // (2 if backward else 1)
    return largest // 2 if v > 1 and itemsize == 4 and not backward else largest


def split_config(M: int, N: int, sms: int, itemsize: int, backward: bool = False, v: int = 1) -> SplitConfig:
    """Chunks small enough that every program gets SPLIT_TASKS_PER_PROGRAM of them, at least SPLIT_MIN_CHUNK (the
    ticket costs an atomic), at most split_largest_chunk, never wider than the row. v: rows read through windows of
    v elements (chunk_window), whose chunks cover N + v - 1 lanes; itemsize: the inputs' bytes an element. Two tasks a
    program rather than four (session 65, an H100, tune_triton.py --few; us): at 16 x 131072 a chunk of 4096 rather
    than 2048, softmax fp32 17.0 against 21.0 and bf16 15.5 / 19.4, softmax backward fp32 19.6 / 21.4 and bf16
    15.1 / 18.4 (log_softmax and its backward likewise); at 32 x 131072 bf16 softmax 8192 rather than 4096 18.4 /
    22.0 (on the H200 in session 57 fp32 20.1 / 22.9 as well)."""
    if FORCE_CHUNK:
        chunk = FORCE_CHUNK
    else:
        want = cdiv(M * N, SPLIT_TASKS_PER_PROGRAM * split_programs(sms))
        chunk = pow2ceil(max(1, want))
        chunk = max(SPLIT_MIN_CHUNK, min(chunk, split_largest_chunk(backward, itemsize, v)))
        chunk = min(chunk, pow2ceil(N))
    c = cdiv(N + v - 1, chunk)
    pblock = min(pow2ceil(c), SPLIT_MAX_PARTIALS_BLOCK)
    return SplitConfig(chunk, c, pblock, num_warps_for(chunk))


def split_programs(sms: int) -> int:
    """Programs of the split grid: two per SM, one reading while the other waits on an atomic."""
    return FORCE_PROGRAMS or 2 * sms


def split_lag(C: int, M: int, programs: int) -> int:
    """Chunks between the read and the write of a chunk: at least C (a row's partials all come
    from earlier tickets), plus one round of the grid so they are normally finished; no more than
    all the chunks (then every read comes before every write)."""
    return min(C + programs, M * C)


def split_workspace_bytes(M: int, N: int, backward: bool = False, sms: int = INTERPRETER_SMS, itemsize: int = 4) -> int:
    """Workspace traffic of the split regime on contiguous rows of `itemsize` bytes: partials written once and read C
    times, counters (C counts the lanes of the rows' windows, where they take them: chunk_window)."""
    cfg = split_config(M, N, sms, itemsize, backward, chunk_window(N, (N,), itemsize))
    partials = M * cfg.C * 2 * 4
    return partials * (1 + cfg.C) + (M + 1) * 4 * 2


# ---------------------------------------------------------------------------------------------
# Persistent grids: programs per SM
# ---------------------------------------------------------------------------------------------
def estimated_occupancy(num_warps: int) -> int:
    """Programs per SM of a kernel not compiled yet, from its warps alone."""
    return max(1, min(4, 32 // num_warps))


def occupancy(registers: int, shared: int, num_warps: int, regs_per_sm: int, shared_per_sm: int,
              threads_per_sm: int) -> int:
    """Programs per SM of a compiled kernel: its registers, shared memory and threads against the SM's."""
    registers = cdiv(max(1, registers), 8) * 8  # registers are allocated in steps of 8 per thread
    occ = min(regs_per_sm // (registers * 32 * num_warps), threads_per_sm // (32 * num_warps), 32)
    if shared:
        occ = min(occ, shared_per_sm // (shared + 1024))  # 1 KB per block is reserved by the driver
    return max(1, occ)


def persistent_programs(per_sm: int, sms: int, tasks: int) -> int:
    """A persistent grid: every SM full (`per_sm` programs each), never more programs than tasks."""
    if FORCE_PROGRAMS:
        return max(1, min(FORCE_PROGRAMS, tasks))
    return max(1, min(tasks, sms * per_sm))


class _Counted(types.ModuleType):
    """This module's class: an assignment to any of its names (a test's or benchmarks/tune_triton.py's setting of a
    knob or a rule, or the undoing of one) counts in `generation`, so that the launcher's ready launches see that the
    rules may have changed by one integer (softmax._settings) instead of comparing every value of the module, 88 of
    them: the ready launcher 6.2 -> 5.3 us a call, the public call 11.0 -> 10.1 on this project's CPU machine with
    Triton's driver stubbed (benchmarks/results/cpu-host-triton-s60.txt; not timed on a GPU's host). It then calls
    on_change's functions: the launcher drops its ready launches, whose entries in the native helper's table no
    generation is compared for."""

    def __setattr__(self, name, value):
        super().__setattr__(name, value)
        self._changed()

    def __delattr__(self, name):
        super().__delattr__(name)
        self._changed()

    def _changed(self):
        super().__setattr__("generation", self.__dict__.get("generation", 0) + 1)
        for f in self.__dict__.get("on_change", ()):
            f()


generation = 0
on_change: list = []  # called after each such assignment (the launcher's: its ready launches go)
sys.modules[__name__].__class__ = _Counted

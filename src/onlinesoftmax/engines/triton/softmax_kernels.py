"""The Triton softmax kernels: one kernel per regime (rows, online, split; see rules.py) and one for
non-last dims (cols), each written once for the four ops. The op is a compile-time policy, two
tl.constexpr flags:

    BACKWARD=False  in = x, dy = None, out = y     LOG: softmax or log_softmax
    BACKWARD=True   in = y, dy = dy,   out = dx    LOG: of softmax or of log_softmax

so every kernel takes (in_ptr, dy_ptr, out_ptr, ..., stride_in, stride_dy, stride_out, ...). A
forward launch passes None for dy_ptr and stride_dy: Triton makes a None argument a compile-time
constant, which leaves the compiled kernel's parameters, and `if BACKWARD:` keeps only one side, so
each op compiles to the kernel it would be written alone.

The regimes work on 2-D tensors (M, N) with column stride 1 and any row stride (cols: contiguous
(outer, N, inner), reduced over N), in fp32, fp16 or bf16, accumulating in fp32 and writing the
input dtype into a preallocated `out`. The semantics are those of `onlinesoftmax.reference` (and
`state.py` for the merge):

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

Import this module only after TRITON_INTERPRET is set (if it is to be set): `triton.jit` decides
when a kernel is defined whether it is interpreted.
"""

from __future__ import annotations

import os

import triton
import triton.language as tl

LOG2E = tl.constexpr(1.4426950408889634)


def interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


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


LOWEST = tl.constexpr(-3.4028234663852886e38)  # fp32's lowest finite value


@_device_fn
def _empty(SIZE: tl.constexpr, BACKWARD: tl.constexpr):
    """SIZE lanes of a row's state before any value: (m, d) = (LOWEST, 0) forward, the merge's
    identity (exp(LOWEST - m) is 0 for any m > LOWEST: it overflows to -inf, and -inf states merge as
    -inf would, but m itself is never -inf, which _fold relies on); (sum dy*y or sum dy, live) = (0, 0)
    backward."""
    if BACKWARD:
        return tl.zeros([SIZE], tl.float32), tl.zeros([SIZE], tl.float32)
    else:
        return tl.full([SIZE], LOWEST, tl.float32), tl.zeros([SIZE], tl.float32)


@_device_fn
def _fold(m, d, x):
    """Fold values x into per-lane states (m, d) from _empty with one exp per element:
    x > m:  (x, d * exp(m - x) + 1)      else:  (m, d + exp(x - m)).
    m starts finite (LOWEST) and only grows, so m is never -inf and x - m is -inf for x = -inf, whose
    exp adds nothing (no test of x an element: from -inf states -inf - -inf would be nan); a nan x makes
    d nan for good; +inf makes m = +inf, and the final merge computes exp(inf - inf) = nan for that
    lane. |x - m| times -log2(e), not -|x - m| times log2(e): ptxas folds the abs into the multiply
    (one instruction an element fewer, sm_90 SASS)."""
    e = tl.exp2(tl.abs(x - m) * -LOG2E)
    bigger = x > m
    d = tl.where(bigger, d * e + 1.0, d + e)
    m = tl.where(bigger, x, m)
    return m, d


@_device_fn
def _merge_lanes(m_vec, d_vec):
    """The guarded merge of a vector of states into one: (shift, sum d_i exp(m_i - shift)) with
    shift = max m_i, or 0 when that is -inf (LOWEST when every state is _empty's: no value but -inf)."""
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
        return _softmax_of(z, z, d, LOG)  # no exponential: _softmax_of leaves e unused
    else:
        return _softmax_of(z, tl.exp2(z * LOG2E), d, LOG)


@_device_fn
def _grad(y, dy, s, live, LOG: tl.constexpr):
    """dx from y, dy and the row's reduction s (sum dy*y, or sum dy for log_softmax); `live` is 0
    for a log_softmax row whose y is all -inf, whose gradient is 0."""
    if LOG:
        return tl.where(live > 0, dy - tl.exp2(y * LOG2E) * s, 0.0)
    else:
        return y * (dy - s)


@_device_fn
def _softmax_of(z, e, d, LOG: tl.constexpr):
    """softmax (e / d) or log_softmax (z - log d) from z = x - shift, e = exp(z) and the row's d (broadcast); 0 /
    -inf for an empty row (d = 0)."""
    if LOG:
        return z - tl.log(tl.where(d == 0, 1.0, d))
    else:
        return e * (1.0 / tl.where(d == 0, float("inf"), d))


@_device_fn
def _forward_tile(x, AXIS: tl.constexpr, LOG: tl.constexpr):
    """softmax or log_softmax of a tile of fp32 values along AXIS (whole rows or columns; padding -inf), with one
    exp per element."""
    z = x - tl.expand_dims(_guard(tl.max(x, axis=AXIS)), AXIS)
    e = tl.exp2(z * LOG2E)
    return _softmax_of(z, e, tl.expand_dims(tl.sum(e, axis=AXIS), AXIS), LOG)


@_device_fn
def _live(y):
    """1 where y is not -inf, else 0: a log_softmax row is live (its gradient not 0) where any lane is."""
    return tl.where(y == float("-inf"), 0.0, 1.0)


@_device_fn
def _backward_sums(y, dy, AXIS: tl.constexpr, LOG: tl.constexpr):
    """A tile's part of each row's reduction for the backward: (sum dy, live: 1 where y has a finite value, else 0)
    for log_softmax, (sum dy*y, unused) for softmax. Padding adds nothing (dy 0, y 0 or -inf). Two reductions, not
    one tl.reduce of the pair (e98caf0): that pair halved the bf16 rows at 4095 on an H100 (94 -> 49% of copy,
    benchmarks/results/session64/call1-h100-04d83a7/ab.txt), though it compiled to fewer barriers and instructions."""
    if LOG:
        return tl.sum(dy, axis=AXIS), tl.max(_live(y), axis=AXIS)
    else:
        s = tl.sum(dy * y, axis=AXIS)
        return s, s


@_device_fn
def _backward_tile(y, dy, AXIS: tl.constexpr, LOG: tl.constexpr):
    """dx of a tile of fp32 y and dy along AXIS (whole rows or columns; padding adds nothing: dy 0, and y 0, or
    -inf for log_softmax, which is not live)."""
    s, live = _backward_sums(y, dy, AXIS, LOG)
    return _grad(y, dy, tl.expand_dims(s, AXIS), tl.expand_dims(live, AXIS), LOG)


@_device_fn
def _wait_for(count_ptr, target):
    """Spin until *count_ptr >= target (acquire: the partials published before it are visible)."""
    n = tl.atomic_add(count_ptr, 0, sem="acquire")
    while n < target:
        n = tl.atomic_add(count_ptr, 0, sem="acquire")


# ---------------------------------------------------------------------------------------------
# Regime 1: rows in registers, several rows per tile, one tile a program (the loop walks more than one only on a
#           persistent grid: rules.rows_persistent)
#   forward:  read x once, write y once            2*M*N*size bytes
#   backward: read y and dy once, write dx once    3*M*N*size bytes
# A row is held in one tile of BLOCK_N lanes, or in two (TAIL > 0): BLOCK_N lanes (a power of two) and the TAIL past
#   them (a power of two, masked), so a row of 2^k + 1 takes 2^k + 1 lanes instead of 2^(k+1) (rules.rows_pieces);
#   one reduction over both.
# V > 1: the row's window (rules.rows_window), for rows Triton cannot prove aligned (odd N, a sliced view), whose
#   accesses would be one element each. Every tensor shares one row stride, so row r starts at element
#   start = r*stride of each; lane c holds element a + c, a = start rounded down to a multiple of V (V elements =
#   16 bytes; the pointers are 16-byte aligned), and the row is lanes [s, s + N), s = start - a < V. The lanes up to
#   s + N rounded up to a vector are read as whole vectors (the mask, and the body's store mask, are constant over
#   each vector, which Triton can prove); values outside the row are neighbours' (read, never used: replaced by the
#   padding). The body, lanes s and s + N rounded in, is stored as whole vectors; the < V elements each side of it
#   (the ends) are read again and computed from the row's reduction in a small tile of 2V lanes, one element at a
#   time (a store of them from the big tile would be one predicated instruction per lane; in place, the body's
#   store has left them as they were, and no other row's program writes them). The last row's window
#   may pass the tensor's end: the launcher leaves it to a launch of its own (V = 1) unless it ends on a vector.
# ---------------------------------------------------------------------------------------------
@_device_fn
def _pad(BACKWARD: tl.constexpr, LOG: tl.constexpr):
    """What x (or y) reads outside a row: a value that adds nothing to its reduction (-inf; y of softmax: 0)."""
    if BACKWARD and not LOG:
        return 0.0
    else:
        return float("-inf")


@_device_fn
def _row_ends(k, s, lo, hi, end, V: tl.constexpr):
    """The lanes p of a windowed row's ends, [s, lo) and [hi, end), from k in [0, 2V) (k < V the first end), and the
    mask of the lanes that lie in them (none for k >= 2V)."""
    p = tl.where(k < V, s + k, hi + k - V)
    return p, tl.where(k < V, p < lo, (p < end) & (k < 2 * V))


@_device_fn
def _row_at(row, stride_in, stride_dy, stride_out, N, V: tl.constexpr, BACKWARD: tl.constexpr):
    """Where row `row` lies: its lane 0 in each tensor (elements; dy's 0 forward, whose launches pass no dy and no
    stride_dy), its first lane s, and its lanes [lo, hi) read and stored as whole vectors. V = 1: lane 0 is the row's
    first element, lanes [0, N), no ends. V > 1: the window, lane 0 at the row's start rounded down to a multiple of
    V, the same in every tensor (they share one row stride), the row's lanes [s, s + N), lo and hi s and s + N
    rounded in; its ends are _row_ends(k, s, lo, hi, s + N, V)."""
    if V == 1:
        return row * stride_in, row * stride_dy if BACKWARD else 0, row * stride_out, 0, 0, N
    else:
        start = row * stride_in
        a = start // V * V  # a multiple of V, as Triton sees it
        s = (start - a).to(tl.int32)
        return a, a, a, s, (s + V - 1) // V * V, (s + N) // V * V


@_device_fn
def _load_row(ptr, base, c, read, s, end, pad, V: tl.constexpr):
    """Lanes c of rows whose lane 0 is element `base`, in fp32: `pad` where `read` is false and, V > 1, outside the
    row's lanes [s, end)."""
    v = tl.load(ptr + base + c, mask=read, other=pad).to(tl.float32)
    if V > 1:
        v = tl.where((c >= s) & (c < end), v, pad)
    return v


@_device_fn
def _write_lanes(in_row, dy_row, out_row, cols, ok, total, d_or_live, BACKWARD: tl.constexpr, LOG: tl.constexpr):
    """The outputs at lanes cols (where ok) of rows whose lane 0 is at in_row, dy_row and out_row, from the row's
    reduction: (shift, d) forward, (sum, live) backward. Returns the lanes' y backward, in fp32, _pad where not ok
    (the forward's x: 0 where not ok, whose outputs are not stored, so the load needs no select after its zero fill)."""
    if BACKWARD:
        dy = tl.load(dy_row + cols, mask=ok, other=0.0).to(tl.float32)
        y = tl.load(in_row + cols, mask=ok, other=_pad(BACKWARD, LOG)).to(tl.float32)
        out = _grad(y, dy, total, d_or_live, LOG)
    else:
        y = tl.load(in_row + cols, mask=ok, other=0.0).to(tl.float32)
        out = _normalise(y, total, d_or_live, LOG)
    tl.store(out_row + cols, out.to(out_row.dtype.element_ty), mask=ok)
    return y


@triton.jit
def rows_kernel(in_ptr, dy_ptr, out_ptr, M, N, stride_in, stride_dy, stride_out,
                BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BACKWARD: tl.constexpr, LOG: tl.constexpr,
                NUM_STAGES: tl.constexpr, V: tl.constexpr, TAIL: tl.constexpr, UNIT: tl.constexpr):
    if UNIT > 1:  # rows of whole 16-byte vectors (rules.rows_unit): N and the strides are multiples of UNIT; rounded
        N = N // UNIT * UNIT  # to them, which changes nothing, Triton can prove it (its own specialisation looks for
        stride_in = stride_in // UNIT * UNIT  # multiples of 16 elements) and reads and writes 16 bytes an access
        stride_out = stride_out // UNIT * UNIT
        if BACKWARD:
            stride_dy = stride_dy // UNIT * UNIT
    pid = tl.program_id(0)
    nprog = tl.num_programs(0)
    cols = tl.arange(0, BLOCK_N)[None, :]
    n_blocks = tl.cdiv(M, BLOCK_M)
    pad = _pad(BACKWARD, LOG)
    for rb in tl.range(pid, n_blocks, nprog, num_stages=NUM_STAGES):
        rows = (rb * BLOCK_M + tl.arange(0, BLOCK_M)).to(tl.int64)
        row_ok = (rows < M)[:, None]
        # every row from its first element (V = 1), or from the vector its first element lies in, read up to its
        # last element's vector (stop) as whole vectors
        a_in, a_dy, a_out, s, lo, hi = _row_at(rows[:, None], stride_in, stride_dy, stride_out, N, V, BACKWARD)
        end = s + N
        stop = (end + V - 1) // V * V if V > 1 else N
        read = row_ok & (cols < stop)
        x = _load_row(in_ptr, a_in, cols, read, s, end, pad, V)
        if TAIL > 0:
            tcols = BLOCK_N + tl.arange(0, TAIL)[None, :]
            tread = row_ok & (tcols < stop)
            xt = _load_row(in_ptr, a_in, tcols, tread, s, end, pad, V)
        if BACKWARD:  # the row's reduction (sum dy*y, or sum dy and whether y is live)
            dy = _load_row(dy_ptr, a_dy, cols, read, s, end, 0.0, V)
            total, live = _backward_sums(x, dy, 1, LOG)
            if TAIL > 0:
                dyt = _load_row(dy_ptr, a_dy, tcols, tread, s, end, 0.0, V)
                total_t, live_t = _backward_sums(xt, dyt, 1, LOG)
                total += total_t
                live = tl.maximum(live, live_t)
            total = total[:, None]
            live = live[:, None]
            out = _grad(x, dy, total, live, LOG)
            if TAIL > 0:
                outt = _grad(xt, dyt, total, live, LOG)
        else:  # the row's (shift, d), one exponential an element
            m = tl.max(x, axis=1)
            if TAIL > 0:
                m = tl.maximum(m, tl.max(xt, axis=1))
            shift = _guard(m)[:, None]
            z = x - shift
            e = tl.exp2(z * LOG2E)
            d = tl.sum(e, axis=1)
            if TAIL > 0:
                zt = xt - shift
                et = tl.exp2(zt * LOG2E)
                d += tl.sum(et, axis=1)
            d = d[:, None]
            out = _softmax_of(z, e, d, LOG)
            if TAIL > 0:
                outt = _softmax_of(zt, et, d, LOG)
        if V == 1:
            tl.store(out_ptr + a_out + cols, out.to(out_ptr.dtype.element_ty), mask=read)
            if TAIL > 0:
                tl.store(out_ptr + a_out + tcols, outt.to(out_ptr.dtype.element_ty), mask=tread)
        else:  # the body, lanes [lo, hi), as whole vectors, then the ends
            tl.store(out_ptr + a_out + cols, out.to(out_ptr.dtype.element_ty),
                     mask=row_ok & (cols >= lo) & (cols < hi))
            if TAIL > 0:  # its lanes lie past lo (BLOCK_N >= V >= lo)
                tl.store(out_ptr + a_out + tcols, outt.to(out_ptr.dtype.element_ty), mask=row_ok & (tcols < hi))
            # the ends: lanes [s, lo) and [hi, end), each < V wide, from the row's reduction
            p, ends = _row_ends(tl.arange(0, 2 * V)[None, :], s, lo, hi, end, V)
            if BACKWARD:
                _write_lanes(in_ptr + a_in, dy_ptr + a_dy, out_ptr + a_out, p, row_ok & ends, total, live, BACKWARD,
                             LOG)
            else:
                _write_lanes(in_ptr + a_in, dy_ptr, out_ptr + a_out, p, row_ok & ends, shift, d, BACKWARD, LOG)


# ---------------------------------------------------------------------------------------------
# Columns: a non-last dim of a contiguous (outer, N, inner) tensor, N <= COLS_MAX_N, read where it lies
#   a program holds a [BLOCK_N, BLOCK_I] tile: all N rows of BLOCK_I adjacent columns of one outer index, and
#   reduces along axis 0 (the rows kernel's math); each row of the tile is BLOCK_I contiguous elements
#   forward 1 read + 1 write, backward 2 reads + 1 write (a transpose to rows and back costs two copies more)
# ---------------------------------------------------------------------------------------------
@_device_fn
def _whole_columns(in_ptr, dy_ptr, out_ptr, offs, ok, BACKWARD: tl.constexpr, LOG: tl.constexpr):
    """The op over whole columns: a tile at offs (the dim along axis 0, masked by ok; padding -inf, or 0 for
    softmax's y and dy) read once, reduced along axis 0 and written (both columns kernels)."""
    if BACKWARD:
        dy = tl.load(dy_ptr + offs, mask=ok, other=0.0).to(tl.float32)
        y = tl.load(in_ptr + offs, mask=ok, other=float("-inf") if LOG else 0.0).to(tl.float32)
        out = _backward_tile(y, dy, 0, LOG)
    else:
        out = _forward_tile(tl.load(in_ptr + offs, mask=ok, other=float("-inf")).to(tl.float32), 0, LOG)
    tl.store(out_ptr + offs, out.to(out_ptr.dtype.element_ty), mask=ok)


@triton.jit
def cols_kernel(in_ptr, dy_ptr, out_ptr, N, inner, strips,
                BLOCK_N: tl.constexpr, BLOCK_I: tl.constexpr, BACKWARD: tl.constexpr, LOG: tl.constexpr):
    pid = tl.program_id(0)
    o = (pid // strips).to(tl.int64)
    i = (pid % strips) * BLOCK_I + tl.arange(0, BLOCK_I)
    n = tl.arange(0, BLOCK_N)
    ok = (n < N)[:, None] & (i < inner)[None, :]
    _whole_columns(in_ptr, dy_ptr, out_ptr, o * N * inner + n[:, None].to(tl.int64) * inner + i[None, :], ok,
                   BACKWARD, LOG)


@triton.jit
def cols_stream_kernel(in_ptr, dy_ptr, out_ptr, N, inner, strips, tasks, BLOCK_N: tl.constexpr,
                       BLOCK_I: tl.constexpr, WHOLE: tl.constexpr, BACKWARD: tl.constexpr, LOG: tl.constexpr):
    """A short non-last dim with every column in one thread: BLOCK_I is the program's threads times one 16-byte
    access, so a [BLOCK_N, BLOCK_I] tile keeps its BLOCK_N rows inside each thread and reduces along them with no
    exchange between threads (cols_kernel's tiles spread the rows over the warps and reduce through shared memory,
    with barriers). Persistent: a program takes tasks (outer index, strip of BLOCK_I columns) with a grid stride.
    A dim of at most BLOCK_N rows (WHOLE) is one tile, read once; a longer one is read BLOCK_N rows at a time:
    pass 1 folds every column's state (forward (m, d), one exponential per element and one per tile; backward the
    sums), pass 2 re-reads the rows (the launcher bounds the programs so that what pass 1 read is still in L2) and
    writes."""
    n = tl.arange(0, BLOCK_N)
    for task in tl.range(tl.program_id(0), tasks, tl.num_programs(0)):
        o = (task // strips).to(tl.int64)
        i = (task % strips) * BLOCK_I + tl.arange(0, BLOCK_I)
        base = o * N * inner + i
        if WHOLE:
            ok = (n < N)[:, None] & (i < inner)[None, :]
            _whole_columns(in_ptr, dy_ptr, out_ptr, base[None, :] + n[:, None].to(tl.int64) * inner, ok, BACKWARD,
                           LOG)
        else:
            a, b = _empty(BLOCK_I, BACKWARD)
            for r0 in range(0, N, BLOCK_N):
                ok = (r0 + n < N)[:, None] & (i < inner)[None, :]
                offs = base[None, :] + (r0 + n)[:, None].to(tl.int64) * inner
                if BACKWARD:
                    dy = tl.load(dy_ptr + offs, mask=ok, other=0.0).to(tl.float32)
                    y = tl.load(in_ptr + offs, mask=ok, other=_pad(BACKWARD, LOG)).to(tl.float32)
                    total, live = _backward_sums(y, dy, 0, LOG)
                    a += total
                    if LOG:
                        b = tl.maximum(b, live)
                else:  # (m, d) <- the tile's max, then d rescaled once and the tile's exponentials added
                    x = tl.load(in_ptr + offs, mask=ok, other=float("-inf")).to(tl.float32)
                    m = tl.maximum(a, tl.max(x, 0))
                    shift = _guard(m)
                    b = b * tl.exp2((a - shift) * LOG2E) + tl.sum(tl.exp2((x - shift[None, :]) * LOG2E), 0)
                    a = m
            if not BACKWARD:
                a = _guard(a)
            for k in range(0, N, BLOCK_N):  # last tile first: the likeliest still in cache
                r0 = (N - 1) // BLOCK_N * BLOCK_N - k
                ok = (r0 + n < N)[:, None] & (i < inner)[None, :]
                offs = base[None, :] + (r0 + n)[:, None].to(tl.int64) * inner
                if BACKWARD:
                    dy = tl.load(dy_ptr + offs, mask=ok, other=0.0).to(tl.float32)
                    y = tl.load(in_ptr + offs, mask=ok, other=0.0).to(tl.float32)
                    out = _grad(y, dy, a[None, :], b[None, :], LOG)
                else:
                    x = tl.load(in_ptr + offs, mask=ok, other=float("-inf")).to(tl.float32)
                    out = _normalise(x, a[None, :], b[None, :], LOG)
                tl.store(out_ptr + offs, out.to(out_ptr.dtype.element_ty), mask=ok)


# ---------------------------------------------------------------------------------------------
# Regime 2: one row per program (persistent), chunked reduction, then a re-read
#   forward:  read x twice (second from L2 when it fits), write y   3*M*N*size bytes
#   backward: read y, dy twice, write dx                            5*M*N*size bytes
#             log_softmax's: pass 1 reads dy alone (sum dy); whether a row's y is all -inf (its gradient 0) is found
#             as pass 2 reads y, and such a row is written again, with zeros      4*M*N*size bytes
# V > 1: the row's window (rules.chunk_window), for rows Triton cannot prove aligned (odd N, a sliced view). As in the
#   rows kernel, lane c is element a + c, a = start rounded down to a multiple of V, and the row is lanes [s, s + N);
#   the chunks cover its vector body [lo, hi) (lo, hi: s and s + N rounded in to vectors), read and stored as whole
#   vectors, and the < V elements each side of it (the ends) go through a chunk of their own (_row_ends), first into
#   the row's state, last out: nothing outside the row is read, so the last row needs no launch of its own.
# ---------------------------------------------------------------------------------------------
@_device_fn
def _body(cols, lo, hi, V: tl.constexpr):
    """The lanes cols of a row's body, [lo, hi) (_row_at; [0, N) without windows)."""
    if V == 1:
        return cols < hi
    else:
        return (cols >= lo) & (cols < hi)


@_device_fn
def _online_fold(in_row, dy_row, cols, ok, m_or_s, d_or_live, pad, BACKWARD: tl.constexpr, LOG: tl.constexpr):
    """The lanes' states with the row's elements at cols (where ok) folded in: (m, d) with one exp an element forward;
    (sum dy*y, unused) or (sum dy, unchanged: y not read) backward."""
    if BACKWARD:
        dy = tl.load(dy_row + cols, mask=ok, other=0.0).to(tl.float32)
        if LOG:  # sum dy alone: whether y is live is found as pass 2 reads it (online_kernel)
            return m_or_s + dy, d_or_live
        else:
            y = tl.load(in_row + cols, mask=ok, other=pad).to(tl.float32)
            return m_or_s + dy * y, d_or_live
    else:
        x = tl.load(in_row + cols, mask=ok, other=pad).to(tl.float32)
        return _fold(m_or_s, d_or_live, x)


@_device_fn
def _zero_row(out_row, offs, n_chunks, lo, hi, s, N, CHUNK: tl.constexpr, V: tl.constexpr):
    """0 over a row's lanes, its body and ends (the online kernel's log_softmax backward of a row whose y is all
    -inf)."""
    for i in tl.range(0, n_chunks):
        cols = i * CHUNK + offs
        tl.store(out_row + cols, tl.zeros([CHUNK], out_row.dtype.element_ty), mask=_body(cols, lo, hi, V))
    if V > 1:
        ends, at_end = _row_ends(offs, s, lo, hi, s + N, V)
        tl.store(out_row + ends, tl.zeros([CHUNK], out_row.dtype.element_ty), mask=at_end)


@triton.jit
def online_kernel(in_ptr, dy_ptr, out_ptr, M, N, stride_in, stride_dy, stride_out,
                  CHUNK: tl.constexpr, BACKWARD: tl.constexpr, LOG: tl.constexpr, NUM_STAGES: tl.constexpr,
                  V: tl.constexpr):
    pid = tl.program_id(0)
    nprog = tl.num_programs(0)
    offs = tl.arange(0, CHUNK)
    pad = _pad(BACKWARD, LOG)
    for row in tl.range(pid, M, nprog):
        a_in, a_dy, a_out, s, lo, hi = _row_at(tl.cast(row, tl.int64), stride_in, stride_dy, stride_out, N, V,
                                               BACKWARD)
        in_row = in_ptr + a_in
        dy_row = dy_ptr + a_dy if BACKWARD else dy_ptr
        out_row = out_ptr + a_out
        n_chunks = tl.cdiv(hi, CHUNK)
        # pass 1: the row's state, lane by lane, the ends first
        m_or_s, d_or_live = _empty(CHUNK, BACKWARD)
        if V > 1:
            ends, at_end = _row_ends(offs, s, lo, hi, s + N, V)
            m_or_s, d_or_live = _online_fold(in_row, dy_row, ends, at_end, m_or_s, d_or_live, pad, BACKWARD, LOG)
        for i in tl.range(0, n_chunks, num_stages=NUM_STAGES):
            cols = i * CHUNK + offs
            ok = _body(cols, lo, hi, V)
            m_or_s, d_or_live = _online_fold(in_row, dy_row, cols, ok, m_or_s, d_or_live, pad, BACKWARD, LOG)
        if BACKWARD:
            total = tl.sum(m_or_s, 0)
            d_or_live = 1.0  # pass 2 writes every row as live (log_softmax), and finds out
        else:
            total, d_or_live = _merge_lanes(m_or_s, d_or_live)
        # pass 2: re-read, last chunk first (the likeliest still in L2), write; the ends last
        live = tl.zeros([CHUNK], tl.float32)  # log_softmax backward: the lanes that read a y other than -inf
        for i in tl.range(0, n_chunks, num_stages=NUM_STAGES):
            cols = (n_chunks - 1 - i) * CHUNK + offs
            ok = _body(cols, lo, hi, V)
            y = _write_lanes(in_row, dy_row, out_row, cols, ok, total, d_or_live, BACKWARD, LOG)
            if BACKWARD and LOG:
                live = tl.maximum(live, _live(y))
        if V > 1:  # the ends' lanes again (cheaper than holding them live through both passes)
            ends, at_end = _row_ends(offs, s, lo, hi, s + N, V)
            y = _write_lanes(in_row, dy_row, out_row, ends, at_end, total, d_or_live, BACKWARD, LOG)
            if BACKWARD and LOG:
                live = tl.maximum(live, _live(y))
        if BACKWARD and LOG:
            if tl.max(live, 0) == 0:  # y all -inf: the gradient is 0, not the dy pass 2 wrote (no read: rare)
                _zero_row(out_row, offs, n_chunks, lo, hi, s, N, CHUNK, V)


# ---------------------------------------------------------------------------------------------
# Regime 3: split rows. Chunk tasks handed out by an atomic ticket; ticket t
#   (a) reads chunk t, publishes its partial to ws[t] and counts it in sync[row]   (1 read)
#   (b) re-reads chunk t - LAG, waits for its row's C partials, merges, writes     (1 read, 1 write)
# sync = int32[M + 1]: M per-row counters, then the ticket; zeroed by the launcher.
# A partial state is two floats: (m, d) forward; (sum dy*y or sum dy, live flag) backward.
#   forward:  2 reads + 1 write of M*N*size (the re-read within a LAG-chunk window, in L2)
#   backward: 4 reads + 1 write; plus workspace: 2 floats per chunk, C of them read per chunk
# V > 1: rows through windows, as in the online kernel: the chunks cover each row's vector body (C of them for
#   N + V - 1 lanes), and the tasks of a row's first chunk fold its ends into their partial and write them.
# ---------------------------------------------------------------------------------------------
@triton.jit
def split_kernel(in_ptr, dy_ptr, out_ptr, ws_ptr, sync_ptr, M, N, stride_in, stride_dy, stride_out, C, LAG,
                 CHUNK: tl.constexpr, PBLOCK: tl.constexpr, BACKWARD: tl.constexpr, LOG: tl.constexpr,
                 V: tl.constexpr):
    offs = tl.arange(0, CHUNK)
    pidx = tl.arange(0, PBLOCK)
    k = tl.arange(0, 2 * V)  # V > 1: the lanes of a row's ends, in its first chunk's tasks
    pad = _pad(BACKWARD, LOG)
    n_chunks = M * C
    n_tickets = n_chunks + LAG
    t = tl.atomic_add(sync_ptr + M, 1, sem="relaxed")
    while t < n_tickets:
        # issue the loads of both halves first (masked off when this ticket has no such half) ...
        r_row = t // C  # (a) reads chunk t
        r_first = t - r_row * C == 0
        r_cols = (t - r_row * C) * CHUNK + offs
        r_in, r_dy, r_out, r_s, r_lo, r_hi = _row_at(r_row.to(tl.int64), stride_in, stride_dy,
                                                            stride_out, N, V, BACKWARD)
        r_ok = _body(r_cols, r_lo, r_hi, V) & (t < n_chunks)
        if BACKWARD:
            dyr = tl.load(dy_ptr + r_dy + r_cols, mask=r_ok, other=0.0).to(tl.float32)
            yr = tl.load(in_ptr + r_in + r_cols, mask=r_ok, other=pad).to(tl.float32)
        else:
            xr = tl.load(in_ptr + r_in + r_cols, mask=r_ok, other=pad).to(tl.float32)
        if V > 1:  # the row's ends go into its first chunk's partial
            r_ends, r_at = _row_ends(k, r_s, r_lo, r_hi, r_s + N, V)
            r_at = r_at & r_first & (t < n_chunks)
            if BACKWARD:
                dyre = tl.load(dy_ptr + r_dy + r_ends, mask=r_at, other=0.0).to(tl.float32)
                yre = tl.load(in_ptr + r_in + r_ends, mask=r_at, other=pad).to(tl.float32)
            else:
                xre = tl.load(in_ptr + r_in + r_ends, mask=r_at, other=pad).to(tl.float32)
        g = tl.maximum(t - LAG, 0)  # (b) writes chunk t - LAG
        w_row = g // C
        w_first = g - w_row * C == 0
        w_cols = (g - w_row * C) * CHUNK + offs
        w_in, w_dy, w_out, w_s, w_lo, w_hi = _row_at(w_row.to(tl.int64), stride_in, stride_dy,
                                                            stride_out, N, V, BACKWARD)
        w_ok = _body(w_cols, w_lo, w_hi, V) & (t >= LAG)
        if BACKWARD:
            dyw = tl.load(dy_ptr + w_dy + w_cols, mask=w_ok, other=0.0).to(tl.float32)
            yw = tl.load(in_ptr + w_in + w_cols, mask=w_ok, other=pad).to(tl.float32)
        else:
            xw = tl.load(in_ptr + w_in + w_cols, mask=w_ok, other=pad).to(tl.float32)
        if V > 1:
            w_ends, w_at = _row_ends(k, w_s, w_lo, w_hi, w_s + N, V)
            w_at = w_at & w_first & (t >= LAG)
            if BACKWARD:
                dywe = tl.load(dy_ptr + w_dy + w_ends, mask=w_at, other=0.0).to(tl.float32)
                ywe = tl.load(in_ptr + w_in + w_ends, mask=w_at, other=pad).to(tl.float32)
            else:
                xwe = tl.load(in_ptr + w_in + w_ends, mask=w_at, other=pad).to(tl.float32)
        # ... so that the next ticket's round trip overlaps them
        t_next = tl.atomic_add(sync_ptr + M, 1, sem="relaxed")
        # (a) publish the partial state of chunk t, then count it
        if t < n_chunks:
            if BACKWARD:
                m_or_s, d_or_live = _backward_sums(yr, dyr, 0, LOG)
                if V > 1:
                    s_e, live_e = _backward_sums(yre, dyre, 0, LOG)
                    m_or_s += s_e
                    d_or_live = tl.maximum(d_or_live, live_e)
            else:
                m_or_s = tl.max(xr, 0)
                if V > 1:
                    m_or_s = tl.maximum(m_or_s, tl.max(xre, 0))
                d_or_live = tl.sum(tl.exp2((xr - _guard(m_or_s)) * LOG2E), 0)
                if V > 1:
                    d_or_live += tl.sum(tl.exp2((xre - _guard(m_or_s)) * LOG2E), 0)
            tl.store(ws_ptr + 2 * t, m_or_s)
            tl.store(ws_ptr + 2 * t + 1, d_or_live)
            tl.debug_barrier()
            tl.atomic_add(sync_ptr + r_row, 1, sem="release")
        # (b) merge the C partials of row w_row (all from tickets < t), write chunk t - LAG
        if t >= LAG:
            _wait_for(sync_ptr + w_row, C)
            m_or_s, d_or_live = _empty(PBLOCK, BACKWARD)
            for p0 in range(0, C, PBLOCK):
                p = p0 + pidx
                part = ws_ptr + 2 * (w_row * C + p)
                if BACKWARD:
                    m_or_s += tl.load(part, mask=p < C, other=0.0, cache_modifier=".cg")
                    d_or_live = tl.maximum(d_or_live, tl.load(part + 1, mask=p < C, other=0.0, cache_modifier=".cg"))
                else:
                    pm = tl.load(part, mask=p < C, other=float("-inf"), cache_modifier=".cg")
                    pd = tl.load(part + 1, mask=p < C, other=0.0, cache_modifier=".cg")
                    m_new = tl.maximum(m_or_s, pm)
                    s_new = _guard(m_new)
                    d_or_live = d_or_live * tl.exp2((m_or_s - s_new) * LOG2E) + pd * tl.exp2((pm - s_new) * LOG2E)
                    m_or_s = m_new
            if BACKWARD:
                total = tl.sum(m_or_s, 0)
                live = tl.max(d_or_live, 0)
                out = _grad(yw, dyw, total, live, LOG)
                if V > 1:
                    oute = _grad(ywe, dywe, total, live, LOG)
            else:
                shift, d = _merge_lanes(m_or_s, d_or_live)
                out = _normalise(xw, shift, d, LOG)
                if V > 1:
                    oute = _normalise(xwe, shift, d, LOG)
            tl.store(out_ptr + w_out + w_cols, out.to(out_ptr.dtype.element_ty), mask=w_ok)
            if V > 1:
                tl.store(out_ptr + w_out + w_ends, oute.to(out_ptr.dtype.element_ty), mask=w_at)
        t = t_next

"""The Triton cross-entropy kernels: the online (m, d) fold of each row of logits, its target logit and
(for label smoothing) its sum, and the gradient of the loss written from the final state.

The op is a compile-time policy, MODE:

    MODE 0  no gradient: the row's final state                                          1 read
    MODE 1  fused:       the row's final state, and the gradient of the loss -> grad       1 read (+ 1 from L2), 1 write
    MODE 2  grad:        the gradient from a given lse per row (vocab-parallel, after the collective)

The row's final state goes out as its stats (STATS: (m, d, x[target], sum x), fp32, merged across shards by
the vocab-parallel op) and/or its loss and lse (LOSS). With lse = m + log d, p = exp(x - lse), a valid row's
gradient is

    dL/dx = scale * ((1 + 2 z lse) p - eps / V_total - (1 - eps) [col == target])   (* (1 - t^2) with softcap)

scale: the reduction's factor (1 / non-ignored rows for "mean", else 1) read from a device scalar, so no
host sync; an ignored row has gradient 0. Softcap replaces x by cap * tanh(x / cap) when it is loaded;
its gradient is multiplied by 1 - tanh^2.

Two kernels:
- rows_kernel: the whole row in registers (V <= the block): read once, written once; the exp is computed twice
  (for d, then for p) rather than held (ptxas sm_90, 32768 logits at 32 warps: 40 bytes of spill instead of 156).
  A persistent grid walks the rows (Triton 3.6 does not pipeline this loop's load: no prefetch of the next row).
- split_kernel: a row cut into C segments of SEG_CHUNKS chunks; tasks handed out in order by an atomic ticket
  (as the softmax split regime): ticket t folds segment t, publishes its partial (m, d, sum x, and x[target]
  if it holds it) to ws and counts it in sync[row]; it then takes segment t - LAG (LAG >= C: every partial it
  waits for comes from an earlier ticket, which publishes before it ever waits, so no deadlock whatever the
  residency, and the interpreter works too), merges the row's C partials and re-reads the segment to write its
  gradient. The re-read comes LAG segments after the first read, a window of LAG * SEG * size bytes that stays in
  L2. Each loop loads its next chunk before it converts and uses the current one (two chunks in flight; Triton
  3.6 does not software-pipeline these loops itself). The fold of a segment: LANES, per-lane states
  (softmax_kernels._fold: no block reduction until the segment ends), or a scalar state (the chunk's max, then one
  exp per element and a sum: two block reductions a chunk).

Semantics: reference.cross_entropy (float64). A nan or +inf logit makes its row's d nan (exp of nan, or
exp(inf - inf)), so its loss and gradient are nan, as in torch; -inf logits add nothing.

Import this module only after TRITON_INTERPRET is set (if it is to be set).
"""

from __future__ import annotations

import triton
import triton.language as tl

from .softmax_kernels import LOG2E, _device_fn, _empty, _fold, _guard, _merge_lanes, _wait_for


@_device_fn
def _logits(raw, ok, cap, SOFTCAP: tl.constexpr):
    """Loaded logits in fp32 (-inf where masked); with softcap, cap * tanh(x / cap) (tanh by exp2, as the
    interpreter and the GPU share it: 1 - 2 / (exp(2u) + 1))."""
    x = raw.to(tl.float32)
    if SOFTCAP:
        e = tl.exp2(x * (2.0 * LOG2E / cap))
        x = tl.where(ok, cap - (2.0 * cap) / (e + 1.0), float("-inf"))
    return x


@_device_fn
def _load_logits(row_ptr, cols, ok, cap, SOFTCAP: tl.constexpr):
    return _logits(tl.load(row_ptr + cols, mask=ok, other=float("-inf")), ok, cap, SOFTCAP)


@_device_fn
def _fold_chunk(m, d, x):
    """Fold a chunk into the scalar state (m, d): the chunk's max first, then one exp per element."""
    m_new = tl.maximum(m, tl.max(x, 0))
    shift = _guard(m_new)
    d = d * tl.exp2((m - shift) * LOG2E) + tl.sum(tl.exp2((x - shift) * LOG2E), 0)
    return m_new, d


@_device_fn
def _row_target(tgt_ptr, row, ignore_index, offset):
    """(target - offset, valid): the target's column in this shard (out of [0, V) when elsewhere) and
    whether the row counts (target != ignore_index)."""
    tgt = tl.load(tgt_ptr + row)
    return (tgt - offset).to(tl.int32), tgt != ignore_index


@_device_fn
def _grad(p, x, cols, local, valid, lse, scale, inv_v, eps, z, cap, SOFTCAP: tl.constexpr):
    """The gradient of a chunk from p = exp(x - lse); 0 for an ignored row."""
    g = scale * ((1.0 + 2.0 * z * lse) * p - eps * inv_v - tl.where(cols == local, 1.0 - eps, 0.0))
    if SOFTCAP:
        t = x / cap
        g = g * (1.0 - t * t)
    return tl.where(valid, g, 0.0)


@_device_fn
def _finish_row(stats_ptr, loss_ptr, lse_ptr, row, m, d, xt, sx, valid, eps, inv_v, z, STATS: tl.constexpr,
                LOSS: tl.constexpr):
    """A row's final state: its stats (m, d, x[target], sum x) for a merge across shards, and/or its loss and lse:
    loss = lse - (1 - eps) x[target] - eps / V sum x + z lse^2, 0 for an ignored row (ops/cross_entropy.loss_rows,
    the same formula in torch ops)."""
    if STATS:
        base = stats_ptr + row * 4
        tl.store(base, m)
        tl.store(base + 1, d)
        tl.store(base + 2, xt)
        tl.store(base + 3, sx)
    if LOSS:
        lse = _guard(m) + tl.log(d)
        loss = lse - (1.0 - eps) * xt - eps * inv_v * sx + z * lse * lse
        tl.store(loss_ptr + row, tl.where(valid, loss, 0.0))
        tl.store(lse_ptr + row, lse)


@triton.jit
def target_kernel(tgt_ptr, info_ptr, M, V, ignore_index, MEAN: tl.constexpr, BLOCK: tl.constexpr):
    """One program over the targets: info = (the gradient's scale: 1 / non-ignored rows for "mean", else 1;
    the non-ignored rows; 1 if a target is out of [0, V) and not ignore_index, else 0)."""
    offs = tl.arange(0, BLOCK)
    count = tl.zeros([BLOCK], tl.int32)
    bad = tl.zeros([BLOCK], tl.int32)
    for start in tl.range(0, M, BLOCK):
        i = start + offs
        t = tl.load(tgt_ptr + i, mask=i < M, other=ignore_index)
        valid = (i < M) & (t != ignore_index)  # `other` takes the targets' dtype: -100 is no ignore_index in uint8
        count += valid.to(tl.int32)
        bad = tl.maximum(bad, (valid & ((t < 0) | (t >= V))).to(tl.int32))
    n = tl.sum(count, 0).to(tl.float32)
    if MEAN:
        tl.store(info_ptr, 1.0 / n)
    else:
        tl.store(info_ptr, 1.0)
    tl.store(info_ptr + 1, n)
    tl.store(info_ptr + 2, tl.max(bad, 0).to(tl.float32))


# ---------------------------------------------------------------------------------------------
# Whole rows in registers: 1 read + 1 write
# ---------------------------------------------------------------------------------------------
@triton.jit
def rows_kernel(x_ptr, g_ptr, tgt_ptr, stats_ptr, loss_ptr, lse_ptr, scale_ptr, M, V, stride_x, stride_g,
                ignore_index, offset, inv_v, eps, z, cap,
                BLOCK: tl.constexpr, MODE: tl.constexpr, SOFTCAP: tl.constexpr, SMOOTH: tl.constexpr,
                STATS: tl.constexpr, LOSS: tl.constexpr, NUM_STAGES: tl.constexpr):
    pid = tl.program_id(0)
    nprog = tl.num_programs(0)
    cols = tl.arange(0, BLOCK)
    ok = cols < V
    if MODE != 0:
        scale = tl.load(scale_ptr)
    for row in tl.range(pid, M, nprog, num_stages=NUM_STAGES):
        r64 = tl.cast(row, tl.int64)
        x = _load_logits(x_ptr + r64 * stride_x, cols, ok, cap, SOFTCAP)
        local, valid = _row_target(tgt_ptr, row, ignore_index, offset)
        if MODE == 2:
            lse = tl.load(lse_ptr + row)
            p = tl.exp2((x - lse) * LOG2E)
        else:
            m = tl.max(x, 0)
            shift = _guard(m)
            d = tl.sum(tl.exp2((x - shift) * LOG2E), 0)
            xt = tl.sum(tl.where((cols == local) & ok, x, 0.0), 0)  # a later shard's target lands past V
            if SMOOTH:
                sx = tl.sum(tl.where(ok, x, 0.0), 0)
            else:
                sx = 0.0
            _finish_row(stats_ptr, loss_ptr, lse_ptr, row, m, d, xt, sx, valid, eps, inv_v, z, STATS, LOSS)
            lse = shift + tl.log(d)
            p = tl.exp2((x - lse) * LOG2E)
        if MODE != 0:
            g = _grad(p, x, cols, local, valid, lse, scale, inv_v, eps, z, cap, SOFTCAP)
            tl.store(g_ptr + r64 * stride_g + cols, g.to(g_ptr.dtype.element_ty), mask=ok)


# ---------------------------------------------------------------------------------------------
# Split rows, ordered tickets: 1 read + 1 re-read within an L2 window + 1 write
# ws: 4 floats per segment (m, d, sum x, x[target] or 0); sync: int32[M + 1], M per-row counters then the ticket
# ---------------------------------------------------------------------------------------------
@triton.jit
def split_kernel(x_ptr, g_ptr, tgt_ptr, stats_ptr, loss_ptr, lse_ptr, scale_ptr, ws_ptr, sync_ptr, M, V, stride_x,
                 stride_g, C, LAG, ignore_index, offset, inv_v, eps, z, cap,
                 CHUNK: tl.constexpr, SEG_CHUNKS: tl.constexpr, PBLOCK: tl.constexpr, MODE: tl.constexpr,
                 SOFTCAP: tl.constexpr, SMOOTH: tl.constexpr, STATS: tl.constexpr, LOSS: tl.constexpr,
                 LANES: tl.constexpr):
    offs = tl.arange(0, CHUNK)
    pidx = tl.arange(0, PBLOCK)
    SEG: tl.constexpr = CHUNK * SEG_CHUNKS
    n_tasks = M * C
    n_tickets = n_tasks + LAG
    if MODE != 0:
        scale = tl.load(scale_ptr)
    t = tl.atomic_add(sync_ptr + M, 1, sem="relaxed")
    while t < n_tickets:
        # the first chunks of both segments of this ticket are loaded together; every loop below loads its next
        # chunk (raw, converted only when used) before it works on the current one: two chunks in flight
        a_row = t // C
        a_base = (t - a_row * C) * SEG
        a_ptr = x_ptr + tl.cast(a_row, tl.int64) * stride_x
        a_cols = a_base + offs
        a_raw = tl.load(a_ptr + a_cols, mask=(a_cols < V) & (t < n_tasks) & (MODE != 2), other=float("-inf"))
        w = tl.maximum(t - LAG, 0)
        b_row = w // C
        seg = w - b_row * C
        b_ptr = x_ptr + tl.cast(b_row, tl.int64) * stride_x
        b_cols = seg * SEG + offs
        b_raw = tl.load(b_ptr + b_cols, mask=(b_cols < V) & (t >= LAG) & (MODE != 0), other=float("-inf"))
        # (a) fold segment t, publish its partial, count it
        if MODE != 2:
            if t < n_tasks:
                if LANES:  # per-lane states, one block reduction per segment
                    m_vec, d_vec = _empty(CHUNK, False)
                else:  # a scalar state, the chunk's max and sum reduced per chunk
                    m = tl.full([], float("-inf"), tl.float32)
                    d = tl.zeros([], tl.float32)
                sx = tl.zeros([], tl.float32)
                # the target logit, by the segment that holds it, before any gradient is written over it
                # (the gradient may be written in place of the logits)
                local, valid = _row_target(tgt_ptr, a_row, ignore_index, offset)
                hit = (local >= a_base) & (local < a_base + SEG) & (local < V)
                xt = _logits(tl.load(a_ptr + local, mask=hit, other=0.0), hit, cap, SOFTCAP)
                xt = tl.where(hit, xt, 0.0)
                for k in tl.range(0, SEG_CHUNKS):
                    ok = a_cols < V
                    nxt = a_cols + CHUNK
                    a_next = tl.load(a_ptr + nxt, mask=(nxt < V) & (k + 1 < SEG_CHUNKS), other=float("-inf"))
                    x = _logits(a_raw, ok, cap, SOFTCAP)
                    if LANES:
                        m_vec, d_vec = _fold(m_vec, d_vec, x)
                    else:
                        m, d = _fold_chunk(m, d, x)
                    if SMOOTH:
                        sx += tl.sum(tl.where(ok, x, 0.0), 0)
                    a_raw = a_next
                    a_cols = nxt
                if LANES:
                    m = tl.max(m_vec, 0)
                    _shift, d = _merge_lanes(m_vec, d_vec)
                part = ws_ptr + 4 * tl.cast(t, tl.int64)
                tl.store(part, m)
                tl.store(part + 1, d)
                tl.store(part + 2, sx)
                tl.store(part + 3, xt)
                tl.debug_barrier()
                tl.atomic_add(sync_ptr + a_row, 1, sem="release")
        t_next = tl.atomic_add(sync_ptr + M, 1, sem="relaxed")
        # (b) segment t - LAG: merge its row's C partials (stats), then re-read it and write the gradient
        if t >= LAG:
            local, valid = _row_target(tgt_ptr, b_row, ignore_index, offset)
            if MODE == 2:
                lse = tl.load(lse_ptr + b_row)
            else:
                _wait_for(sync_ptr + b_row, C)
                part = ws_ptr + 4 * (tl.cast(b_row, tl.int64) * C + pidx)
                pm = tl.load(part, mask=pidx < C, other=float("-inf"), cache_modifier=".cg")
                pd = tl.load(part + 1, mask=pidx < C, other=0.0, cache_modifier=".cg")
                m = tl.max(pm, 0)
                shift = _guard(m)
                d = tl.sum(pd * tl.exp2((pm - shift) * LOG2E), 0)
                lse = shift + tl.log(d)
                if seg == 0:
                    sx = tl.sum(tl.load(part + 2, mask=pidx < C, other=0.0, cache_modifier=".cg"), 0)
                    xt = tl.sum(tl.load(part + 3, mask=pidx < C, other=0.0, cache_modifier=".cg"), 0)
                    _finish_row(stats_ptr, loss_ptr, lse_ptr, b_row, m, d, xt, sx, valid, eps, inv_v, z, STATS, LOSS)
            if MODE != 0:
                g_row = g_ptr + tl.cast(b_row, tl.int64) * stride_g
                for k in tl.range(0, SEG_CHUNKS):
                    ok = b_cols < V
                    nxt = b_cols + CHUNK
                    b_next = tl.load(b_ptr + nxt, mask=(nxt < V) & (k + 1 < SEG_CHUNKS), other=float("-inf"))
                    x = _logits(b_raw, ok, cap, SOFTCAP)
                    p = tl.exp2((x - lse) * LOG2E)
                    g = _grad(p, x, b_cols, local, valid, lse, scale, inv_v, eps, z, cap, SOFTCAP)
                    tl.store(g_row + b_cols, g.to(g_ptr.dtype.element_ty), mask=ok)
                    b_raw = b_next
                    b_cols = nxt
        t = t_next


# ---------------------------------------------------------------------------------------------
# The backward's scaling by grad_output, skipped on the device where it is 1 (the usual loss.backward())
# ---------------------------------------------------------------------------------------------
@triton.jit
def scale_rows_kernel(g_ptr, go_ptr, M, N, stride_g, stride_go, BLOCK: tl.constexpr, SCALAR: tl.constexpr):
    """g[row] *= go[row * stride_go] (SCALAR: one factor, read once), rows whose factor is 1 left untouched."""
    pid = tl.program_id(0)
    nprog = tl.num_programs(0)
    offs = tl.arange(0, BLOCK)
    if SCALAR:
        first = tl.load(go_ptr).to(tl.float32)
        if first == 1.0:
            return
    for row in tl.range(pid, M, nprog):
        s = tl.load(go_ptr + row * stride_go).to(tl.float32)
        if s != 1.0:
            g_row = g_ptr + tl.cast(row, tl.int64) * stride_g
            for c in tl.range(0, N, BLOCK):
                cols = c + offs
                ok = cols < N
                g = tl.load(g_row + cols, mask=ok, other=0.0).to(tl.float32)
                tl.store(g_row + cols, (g * s).to(g_ptr.dtype.element_ty), mask=ok)

"""The Triton attention kernels: FlashAttention-2's forward and backward, on (B, H, S, D) fp16/bf16
tensors with unit stride along D, grouped-query heads (query head h reads key/value head
h // GROUP) and Sq != Sk with the causal mask aligned to the bottom right (query i sees key j iff
j <= i + Sk - Sq, as flash-attn).

Forward: one program per (query tile, batch * head). The key/value tiles stream through the online
(m, l) fold of state.py, in the exp2 domain with the softmax scale folded into log2 e, and the output
accumulator is rescaled by 2^(m_old - m_new) (seed 001 §5). The key loop runs in two stages: the
tiles every row of the program sees in full (no mask, no bounds check, the guard-free update), then
the causal diagonal and the ragged last tile (the masked update). LSE is written twice: in natural log
(the op's output) and in base 2 as the fold left it, m + log2 l, for the backward: converting the natural
log back would add two roundings at the logits' magnitude (2^-10 near 1e4), which the backward's dS = P (dP -
delta) amplifies when logits are large.

Rows with no visible key (Sk = 0, or causal with Sq > Sk) keep the empty state (-inf, 0) of
state.py: the masked update shifts by 0 instead of -inf (exp(-inf - -inf) = nan is the seeds'
pitfall), and the epilogue writes O = 0, LSE = -inf.

Backward (FA2, no atomics): `bwd_preprocess` writes delta = rowsum(dO * O) - dLSE (the LSE's own
gradient folds in there: dS = P * (dP - delta)) and the forward's base-2 LSE, with +inf for an
empty row so that P = 2^(s - m) = 0 there. `bwd_dkdv` holds one key/value tile and streams the
query tiles of every head of its group (the GQA sum stays in registers); `bwd_dq` holds one query
tile and streams the key tiles. Both recompute P.

Import this module only after TRITON_INTERPRET is set (if it is to be set).
"""

from __future__ import annotations

import os

import triton
import triton.language as tl

from . import attention_rules as rules

LN2 = tl.constexpr(0.6931471805599453)


def interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET") == "1"


def _configs(kernel: str) -> list:
    return [triton.Config({"BLOCK_M": c.BLOCK_M, "BLOCK_N": c.BLOCK_N}, num_warps=c.num_warps,
                          num_stages=c.num_stages) for c in rules.KERNELS[kernel]]


def _pruner(kernel: str):
    def prune(configs, named_args, **kwargs):
        keep = set(rules.candidates(kernel, kwargs.get("HEAD_D", named_args.get("HEAD_D"))))
        return [c for c in configs if rules.Candidate(c.kwargs["BLOCK_M"], c.kwargs["BLOCK_N"], c.num_warps,
                                                      c.num_stages) in keep]
    return {"early_config_prune": prune}


def _bench(kernel_call, quantiles):
    # autotuning times each candidate briefly: a few candidates, a few keys, seconds in all
    return triton.testing.do_bench(kernel_call, warmup=5, rep=20, quantiles=quantiles)


def _tuned(kernel: str, key: list):
    def wrap(fn):
        return triton.autotune(_configs(kernel), key=key, prune_configs_by=_pruner(kernel), do_bench=_bench)(fn)
    return wrap


@triton.jit
def _key_stages(start_m, SQ, SK, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr):
    """For the query tile at start_m: keys [0, lo) are whole tiles every row sees; [lo, hi) need the mask."""
    full = (SK // BLOCK_N) * BLOCK_N
    if CAUSAL:
        offset = SK - SQ
        hi = tl.maximum(tl.minimum(start_m + BLOCK_M + offset, SK), 0)
        lo = tl.minimum(tl.maximum(start_m + offset + 1, 0) // BLOCK_N * BLOCK_N, full)
        lo = tl.minimum(lo, hi)
    else:
        lo = full
        hi = SK
    return lo, hi


@triton.jit
def _visible(offs_m, cols, SQ, SK, CAUSAL: tl.constexpr):
    """(queries, keys) of a masked tile: a key exists (col < SK) and, causal, query i sees key j iff
    j <= i + SK - SQ (bottom-right aligned)."""
    keep = cols[None, :] < SK
    if CAUSAL:
        keep = keep & (cols[None, :] <= offs_m[:, None] + (SK - SQ))
    return keep


@triton.jit
def _query_tile(H, GROUP, BLOCK_M: tl.constexpr, CAUSAL: tl.constexpr):
    """The program's (batch * head, batch, query head, key/value head, first query row): grid axis 0 the query
    tiles (causal: the longest first, so the last wave is short ones), axis 1 batch * heads."""
    pid_m = tl.program_id(0)
    if CAUSAL:
        pid_m = tl.num_programs(0) - 1 - pid_m
    pid_bh = tl.program_id(1)
    off_b = (pid_bh // H).to(tl.int64)
    off_h = pid_bh % H
    off_hk = (off_h // GROUP).to(tl.int64)
    return pid_bh, off_b, off_h.to(tl.int64), off_hk, pid_m * BLOCK_M


@triton.jit
def _fwd_stage(acc, l_i, m_i, q, k_base, v_base, stride_ks, stride_vs, offs_m, offs_d, lo, hi, qk_scale,
               SQ, SK, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr, MASKED: tl.constexpr):
    offs_n = tl.arange(0, BLOCK_N)
    for start_n in range(lo, hi, BLOCK_N):
        start_n = tl.multiple_of(start_n, BLOCK_N)
        cols = start_n + offs_n
        k_ptrs = k_base + cols[:, None] * stride_ks + offs_d[None, :]
        v_ptrs = v_base + cols[:, None] * stride_vs + offs_d[None, :]
        if MASKED:
            k = tl.load(k_ptrs, mask=cols[:, None] < SK, other=0.0)
        else:
            k = tl.load(k_ptrs)
        qk = tl.dot(q, tl.trans(k))
        if MASKED:
            s = tl.where(_visible(offs_m, cols, SQ, SK, CAUSAL), qk * qk_scale, float("-inf"))
            m_new = tl.maximum(m_i, tl.max(s, 1))
            shift = tl.where(m_new == float("-inf"), 0.0, m_new)  # state.safe_shift: an empty row stays empty
            p = tl.math.exp2(s - shift[:, None])
            alpha = tl.math.exp2(m_i - shift)
            v = tl.load(v_ptrs, mask=cols[:, None] < SK, other=0.0)
        else:  # every score visible and finite: m_new is finite, no guard
            m_new = tl.maximum(m_i, tl.max(qk, 1) * qk_scale)
            p = tl.math.exp2(qk * qk_scale - m_new[:, None])
            alpha = tl.math.exp2(m_i - m_new)
            v = tl.load(v_ptrs)
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None]
        acc = tl.dot(p.to(v.dtype), v, acc)
        m_i = m_new
    return acc, l_i, m_i


# lengths, head counts and tuning keys are not specialised: a new ragged length reuses the compiled kernel
PLAIN_INTS = ["H", "HKV", "GROUP", "SQ", "SK", "SQ_KEY", "SK_KEY"]


@triton.jit(do_not_specialize=[n for n in PLAIN_INTS if n != "HKV"])
def _fwd(Q, K, V, O, LSE, LSE2, qk_scale,
         stride_qb, stride_qh, stride_qs, stride_kb, stride_kh, stride_ks,
         stride_vb, stride_vh, stride_vs, stride_ob, stride_oh, stride_os,
         H, GROUP, SQ, SK, SQ_KEY, SK_KEY,
         HEAD_D: tl.constexpr, CAUSAL: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    pid_bh, off_b, off_h, off_hk, start_m = _query_tile(H, GROUP, BLOCK_M, CAUSAL)
    offs_m = start_m + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_D)
    q = tl.load(Q + off_b * stride_qb + off_h * stride_qh + offs_m[:, None] * stride_qs + offs_d[None, :],
                mask=offs_m[:, None] < SQ, other=0.0)
    k_base = K + off_b * stride_kb + off_hk * stride_kh
    v_base = V + off_b * stride_vb + off_hk * stride_vh
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_D], tl.float32)
    lo, hi = _key_stages(start_m, SQ, SK, BLOCK_M, BLOCK_N, CAUSAL)
    acc, l_i, m_i = _fwd_stage(acc, l_i, m_i, q, k_base, v_base, stride_ks, stride_vs, offs_m, offs_d, 0, lo,
                               qk_scale, SQ, SK, BLOCK_N, CAUSAL, False)
    acc, l_i, m_i = _fwd_stage(acc, l_i, m_i, q, k_base, v_base, stride_ks, stride_vs, offs_m, offs_d, lo, hi,
                               qk_scale, SQ, SK, BLOCK_N, CAUSAL, True)
    empty = l_i == 0.0
    l_safe = tl.where(empty, 1.0, l_i)
    o = acc / l_safe[:, None]
    lse2 = tl.where(empty, float("-inf"), m_i + tl.math.log2(l_safe))
    rows = offs_m < SQ
    tl.store(O + off_b * stride_ob + off_h * stride_oh + offs_m[:, None] * stride_os + offs_d[None, :],
             o.to(O.dtype.element_ty), mask=rows[:, None])
    tl.store(LSE + pid_bh.to(tl.int64) * SQ + offs_m, lse2 * LN2, mask=rows)
    tl.store(LSE2 + pid_bh.to(tl.int64) * SQ + offs_m, lse2, mask=rows)


fwd_kernel = _fwd
fwd_tuned = _tuned("forward", ["HEAD_D", "CAUSAL", "SQ_KEY", "SK_KEY"])(_fwd)


@triton.jit(do_not_specialize=["H", "SQ"])
def bwd_preprocess(O, DO, LSE2, DLSE, DELTA, MLOG2, stride_ob, stride_oh, stride_os,
                   stride_dob, stride_doh, stride_dos, H, SQ, HEAD_D: tl.constexpr, BLOCK_M: tl.constexpr):
    """delta = rowsum(dO * O) - dLSE and m = the forward's base-2 LSE (+inf for an empty row), fp32 (B * H, SQ)."""
    pid_bh = tl.program_id(1)
    off_b = (pid_bh // H).to(tl.int64)
    off_h = (pid_bh % H).to(tl.int64)
    offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_D)
    rows = offs_m < SQ
    o = tl.load(O + off_b * stride_ob + off_h * stride_oh + offs_m[:, None] * stride_os + offs_d[None, :],
                mask=rows[:, None], other=0.0).to(tl.float32)
    do = tl.load(DO + off_b * stride_dob + off_h * stride_doh + offs_m[:, None] * stride_dos + offs_d[None, :],
                 mask=rows[:, None], other=0.0).to(tl.float32)
    row = pid_bh.to(tl.int64) * SQ + offs_m
    delta = tl.sum(o * do, 1)
    if DLSE is not None:
        delta -= tl.load(DLSE + row, mask=rows, other=0.0)
    lse2 = tl.load(LSE2 + row, mask=rows, other=0.0)
    tl.store(DELTA + row, delta, mask=rows)
    tl.store(MLOG2 + row, tl.where(lse2 == float("-inf"), float("inf"), lse2), mask=rows)


@triton.jit
def _dkdv_stage(dk, dv, k, v, q_base, do_base, m_base, d_base, stride_qs, stride_dos, offs_n, offs_d, lo, hi,
                qk_scale, SQ, SK, BLOCK_M: tl.constexpr, MASKED: tl.constexpr):
    offs_mb = tl.arange(0, BLOCK_M)
    for start_m in range(lo, hi, BLOCK_M):
        start_m = tl.multiple_of(start_m, BLOCK_M)
        offs_m = start_m + offs_mb
        rows = offs_m < SQ
        q = tl.load(q_base + offs_m[:, None] * stride_qs + offs_d[None, :], mask=rows[:, None], other=0.0)
        do = tl.load(do_base + offs_m[:, None] * stride_dos + offs_d[None, :], mask=rows[:, None], other=0.0)
        m = tl.load(m_base + offs_m, mask=rows, other=float("inf"))  # a padded row: P = 0
        delta = tl.load(d_base + offs_m, mask=rows, other=0.0)
        pT = tl.math.exp2(tl.dot(k, tl.trans(q)) * qk_scale - m[None, :])
        if MASKED:  # the causal diagonal: key j seen by query i iff j <= i + SK - SQ
            pT = tl.where(offs_n[:, None] <= offs_m[None, :] + (SK - SQ), pT, 0.0)
        dv = tl.dot(pT.to(do.dtype), do, dv)
        dpT = tl.dot(v, tl.trans(do))
        dsT = pT * (dpT - delta[None, :])
        dk = tl.dot(dsT.to(q.dtype), q, dk)
    return dk, dv


@triton.jit(do_not_specialize=PLAIN_INTS)
def _bwd_dkdv(Q, K, V, DO, DK, DV, MLOG2, DELTA, qk_scale, sm_scale,
              stride_qb, stride_qh, stride_qs, stride_kb, stride_kh, stride_ks,
              stride_vb, stride_vh, stride_vs, stride_dob, stride_doh, stride_dos,
              stride_dkb, stride_dkh, stride_dks, stride_dvb, stride_dvh, stride_dvs,
              H, HKV, GROUP, SQ, SK, SQ_KEY, SK_KEY, HEAD_D: tl.constexpr, CAUSAL: tl.constexpr,
              HEADS_FIRST: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    # The key tiles on grid axis 0 and the (batch, key/value head) pairs on axis 1: blocks start axis 0 fastest, so
    # the programs running at once share one head's Q and dO in L2. HEADS_FIRST swaps the axes: the first key tile
    # of every head starts before any second one. Causal, the first tiles see the most query rows, and with grouped
    # heads a program is GROUP times longer: run longest first, so the last wave is short programs.
    if HEADS_FIRST:
        pid_bh = tl.program_id(0)
        start_n = tl.program_id(1) * BLOCK_N
    else:
        pid_bh = tl.program_id(1)
        start_n = tl.program_id(0) * BLOCK_N
    off_b = (pid_bh // HKV).to(tl.int64)
    off_hk = (pid_bh % HKV).to(tl.int64)
    offs_n = start_n + tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_D)
    keys = offs_n < SK
    k = tl.load(K + off_b * stride_kb + off_hk * stride_kh + offs_n[:, None] * stride_ks + offs_d[None, :],
                mask=keys[:, None], other=0.0)
    v = tl.load(V + off_b * stride_vb + off_hk * stride_vh + offs_n[:, None] * stride_vs + offs_d[None, :],
                mask=keys[:, None], other=0.0)
    dk = tl.zeros([BLOCK_N, HEAD_D], tl.float32)
    dv = tl.zeros([BLOCK_N, HEAD_D], tl.float32)
    # the query tiles [lo, mid) cross the causal diagonal of this key tile; [mid, end) see all of it
    end = tl.cdiv(SQ, BLOCK_M) * BLOCK_M
    if CAUSAL:
        offset = SK - SQ
        mid = tl.minimum(tl.cdiv(tl.maximum(start_n + BLOCK_N - 1 - offset, 0), BLOCK_M) * BLOCK_M, end)
        lo = tl.minimum(tl.maximum(start_n - offset, 0) // BLOCK_M * BLOCK_M, mid)
    else:
        mid = 0
        lo = 0
    for g in range(0, GROUP):  # the query heads that share this key/value head
        off_h = off_hk * GROUP + g
        q_base = Q + off_b * stride_qb + off_h * stride_qh
        do_base = DO + off_b * stride_dob + off_h * stride_doh
        row0 = (off_b * H + off_h) * SQ
        dk, dv = _dkdv_stage(dk, dv, k, v, q_base, do_base, MLOG2 + row0, DELTA + row0, stride_qs, stride_dos,
                             offs_n, offs_d, lo, mid, qk_scale, SQ, SK, BLOCK_M, True)
        dk, dv = _dkdv_stage(dk, dv, k, v, q_base, do_base, MLOG2 + row0, DELTA + row0, stride_qs, stride_dos,
                             offs_n, offs_d, mid, end, qk_scale, SQ, SK, BLOCK_M, False)
    dk *= sm_scale
    tl.store(DK + off_b * stride_dkb + off_hk * stride_dkh + offs_n[:, None] * stride_dks + offs_d[None, :],
             dk.to(DK.dtype.element_ty), mask=keys[:, None])
    tl.store(DV + off_b * stride_dvb + off_hk * stride_dvh + offs_n[:, None] * stride_dvs + offs_d[None, :],
             dv.to(DV.dtype.element_ty), mask=keys[:, None])


dkdv_kernel = _bwd_dkdv
dkdv_tuned = _tuned("dkdv", ["HEAD_D", "CAUSAL", "HEADS_FIRST", "SQ_KEY", "SK_KEY"])(_bwd_dkdv)


@triton.jit
def _dq_stage(dq, q, do, m, delta, k_base, v_base, stride_ks, stride_vs, offs_m, offs_d, lo, hi, qk_scale,
              SQ, SK, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr, MASKED: tl.constexpr):
    offs_nb = tl.arange(0, BLOCK_N)
    for start_n in range(lo, hi, BLOCK_N):
        start_n = tl.multiple_of(start_n, BLOCK_N)
        cols = start_n + offs_nb
        k_ptrs = k_base + cols[:, None] * stride_ks + offs_d[None, :]
        v_ptrs = v_base + cols[:, None] * stride_vs + offs_d[None, :]
        if MASKED:
            k = tl.load(k_ptrs, mask=cols[:, None] < SK, other=0.0)
            v = tl.load(v_ptrs, mask=cols[:, None] < SK, other=0.0)
        else:
            k = tl.load(k_ptrs)
            v = tl.load(v_ptrs)
        p = tl.math.exp2(tl.dot(q, tl.trans(k)) * qk_scale - m[:, None])
        if MASKED:  # a padded key must give P = 0 (its score 0 may exceed the row max)
            p = tl.where(_visible(offs_m, cols, SQ, SK, CAUSAL), p, 0.0)
        dp = tl.dot(do, tl.trans(v))
        ds = p * (dp - delta[:, None])
        dq = tl.dot(ds.to(k.dtype), k, dq)
    return dq


@triton.jit(do_not_specialize=[n for n in PLAIN_INTS if n != "HKV"])
def _bwd_dq(Q, K, V, DO, DQ, MLOG2, DELTA, qk_scale, sm_scale,
            stride_qb, stride_qh, stride_qs, stride_kb, stride_kh, stride_ks,
            stride_vb, stride_vh, stride_vs, stride_dob, stride_doh, stride_dos,
            stride_dqb, stride_dqh, stride_dqs,
            H, GROUP, SQ, SK, SQ_KEY, SK_KEY,
            HEAD_D: tl.constexpr, CAUSAL: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    pid_bh, off_b, off_h, off_hk, start_m = _query_tile(H, GROUP, BLOCK_M, CAUSAL)
    offs_m = start_m + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_D)
    rows = offs_m < SQ
    q = tl.load(Q + off_b * stride_qb + off_h * stride_qh + offs_m[:, None] * stride_qs + offs_d[None, :],
                mask=rows[:, None], other=0.0)
    do = tl.load(DO + off_b * stride_dob + off_h * stride_doh + offs_m[:, None] * stride_dos + offs_d[None, :],
                 mask=rows[:, None], other=0.0)
    row = pid_bh.to(tl.int64) * SQ + offs_m
    m = tl.load(MLOG2 + row, mask=rows, other=float("inf"))
    delta = tl.load(DELTA + row, mask=rows, other=0.0)
    k_base = K + off_b * stride_kb + off_hk * stride_kh
    v_base = V + off_b * stride_vb + off_hk * stride_vh
    dq = tl.zeros([BLOCK_M, HEAD_D], tl.float32)
    lo, hi = _key_stages(start_m, SQ, SK, BLOCK_M, BLOCK_N, CAUSAL)
    dq = _dq_stage(dq, q, do, m, delta, k_base, v_base, stride_ks, stride_vs, offs_m, offs_d, 0, lo, qk_scale,
                   SQ, SK, BLOCK_N, CAUSAL, False)
    dq = _dq_stage(dq, q, do, m, delta, k_base, v_base, stride_ks, stride_vs, offs_m, offs_d, lo, hi, qk_scale,
                   SQ, SK, BLOCK_N, CAUSAL, True)
    dq *= sm_scale
    tl.store(DQ + off_b * stride_dqb + off_h * stride_dqh + offs_m[:, None] * stride_dqs + offs_d[None, :],
             dq.to(DQ.dtype.element_ty), mask=rows[:, None])


dq_kernel = _bwd_dq
dq_tuned = _tuned("dq", ["HEAD_D", "CAUSAL", "SQ_KEY", "SK_KEY"])(_bwd_dq)

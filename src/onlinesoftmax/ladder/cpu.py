"""The CPU algorithm ladder: one NumPy implementation per algorithm the seeds describe.

Rows are independent, so every rung is vectorised across rows (as a GPU gives each row its own
thread or block) and keeps the seed's structure along the row, where the algorithms differ:

  baseline        seed 003's CPU code: three loops over the row (max, exp+sum, scale)
  safe_3pass      three whole-array passes (max, exp, sum, scale) in NumPy
  online_2pass    the per-element (m, d) recurrence, then a normalising pass (V0's algorithm)
  online_blocked  256 "threads" each fold a strided slice, then a tree merge (V1's algorithm)
  split_row       the row cut into 8 pieces whose states merge (split rows for huge vocabularies)
  cached_1pass    blocks of rows small enough to stay in cache: one DRAM read + one write (V3's idea)
  tree_sum        the sum reduction by sequential-addressing halving (Harris K2), for op "sum"

The online rungs fold with `state.merge` and the others shift by `state.safe_shift`, so the -inf guard lives
in one place (state.py).
"""

from __future__ import annotations

import numpy as np

from .. import state
from ..registry import Variant, register

THREADS = 256  # online_blocked: "threads" per row, as a 256-thread block
PIECES = 8  # split_row: pieces per row
CACHE_BYTES = 256 << 10  # cached_1pass: rows processed per block fit in a 256 KB cache


def _np(inputs, out):
    return inputs[0].numpy(), out.numpy()


def _normalise_into(x, st, y):
    y[...] = state.probabilities(x, st)


def baseline(x, y):
    M, N = x.shape
    maxval = np.full(M, -np.inf, dtype=x.dtype)
    for j in range(N):  # loop 1: max (NaN compares false and is skipped, as in the C code)
        maxval = np.where(x[:, j] > maxval, x[:, j], maxval)
    shift = state.safe_shift(maxval)
    total = np.zeros(M, dtype=x.dtype)
    for j in range(N):  # loop 2: exp and sum
        y[:, j] = np.exp(x[:, j] - shift)
        total += y[:, j]
    with np.errstate(divide="ignore"):
        norm = np.where(total == 0, 0, 1 / total).astype(x.dtype)
    for j in range(N):  # loop 3: scale
        y[:, j] *= norm


def safe_3pass(x, y):
    m = x.max(axis=1, keepdims=True)
    np.subtract(x, state.safe_shift(m), out=y)
    np.exp(y, out=y)
    d = y.sum(axis=1, keepdims=True)
    with np.errstate(divide="ignore"):
        y *= np.where(d == 0, 0, 1 / d).astype(x.dtype)


def online_2pass(x, y):
    M, N = x.shape
    st = state.identity_like(np.empty(M, dtype=x.dtype))
    one = np.ones(M, dtype=x.dtype)
    for j in range(N):
        st = state.merge(st, (x[:, j], one))
    _normalise_into(x, (st[0][:, None], st[1][:, None]), y)


def online_blocked(x, y):
    M, N = x.shape
    per_thread = -(-N // THREADS)
    padded = np.full((M, per_thread * THREADS), -np.inf, dtype=x.dtype)
    padded[:, :N] = x
    lanes = padded.reshape(M, per_thread, THREADS)  # element k*THREADS + t belongs to thread t
    st = state.identity_like(lanes[:, 0, :])
    one = np.ones_like(lanes[:, 0, :])
    for k in range(per_thread):  # each thread folds its strided slice serially
        st = state.merge(st, (lanes[:, k, :], one))
    width = THREADS
    while width > 1:  # tree merge, as shuffles (offset 16, 8, ...) and then across warps
        width //= 2
        st = state.merge((st[0][:, :width], st[1][:, :width]), (st[0][:, width:], st[1][:, width:]))
    _normalise_into(x, st, y)


def split_row(x, y):
    M, N = x.shape
    size = -(-N // PIECES)
    padded = np.full((M, size * PIECES), -np.inf, dtype=x.dtype)
    padded[:, :N] = x
    pieces = padded.reshape(M, PIECES, size)
    m, d = state.of_values(pieces, axis=2)  # each piece's state, as separate CTAs would
    st = (m[:, 0], d[:, 0])
    for p in range(1, PIECES):  # phase 2: merge the partial states
        st = state.merge(st, (m[:, p], d[:, p]))
    _normalise_into(x, st, y)


def cached_1pass(x, y):
    M, N = x.shape
    rows = max(1, CACHE_BYTES // (N * x.itemsize))
    for r in range(0, M, rows):
        block = x[r : r + rows]
        _normalise_into(block, state.of_values(block), y[r : r + rows])


def tree_sum(x, out):
    a = x.reshape(-1)
    n = 1 << max(0, (a.size - 1).bit_length())
    work = np.zeros(n, dtype=x.dtype)
    work[: a.size] = a
    while n > 1:
        n //= 2
        work[:n] += work[n : 2 * n]
    out[0] = work[0]


def _softmax_variant(fn, name, rung, seed_ref, summary, passes, serial_rows=False):
    """passes: (reads, writes) of the whole array the NumPy code really makes; serial_rows: a row's sum is one chain
    of additions (Variant.serial_rows)."""
    reads, writes = passes

    def run(inputs, out):
        # x - m overflows to -inf for |x| near the dtype's max (exp gives the right 0), and
        # inf - inf is the nan that +inf rows must produce: both are expected here.
        with np.errstate(over="ignore", invalid="ignore"):
            fn(*_np(inputs, out))

    register(Variant(
        name=f"cpu.{name}", op="softmax", backend="numpy", rung=rung, seed_ref=seed_ref,
        summary=summary, run=run, algo_bytes=lambda M, N, s: (reads + writes) * M * N * s, serial_rows=serial_rows,
    ))


_softmax_variant(baseline, "baseline", "CPU baseline (3 loops)", "seed 003 CPU",
                 "three loops per row: max, exp and sum, scale", (3, 2), serial_rows=True)
_softmax_variant(safe_3pass, "safe_3pass", "safe softmax, 3 passes", "seed 001 §2.3",
                 "whole-array passes: max, subtract, exp, sum, scale", (5, 3))
_softmax_variant(online_2pass, "online_2pass", "online, per-element (m, d)", "seed 000 §1, V0",
                 "the (m, d) recurrence element by element, then normalise", (2, 1), serial_rows=True)
_softmax_variant(online_blocked, "online_blocked", "online, 256 lanes + tree merge", "seed 002 §4, V1",
                 "256 strided lanes fold (m, d), merged as a tree like warp shuffles", (2, 1))
_softmax_variant(split_row, "split_row", "online, split row (8 pieces)", "seed 002 §7.1",
                 "8 pieces per row reduced independently, partial states merged", (3, 1))
_softmax_variant(cached_1pass, "cached_1pass", "1-pass, rows cached", "seed 002 §6, V3",
                 "row blocks small enough to stay in cache: one DRAM read and one write", (1, 1))

register(Variant(
    name="cpu.tree_sum", op="sum", backend="numpy", rung="tree sum (sequential addressing)",
    seed_ref="seed 001 §1.2, K2", summary="pairwise halving of a zero-padded power-of-two buffer",
    run=lambda inputs, out: tree_sum(*_np(inputs, out)),
    algo_bytes=lambda M, N, s: 3 * M * N * s,
))

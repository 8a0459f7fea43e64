"""Two targets of the production op that are not rows of the sweep (issue 4), on the GPU:

- softmax over dim 0 of an 8192 x 8192 fp32 tensor: ours (the columns kernel, no transpose copy), the Triton
  backend (which moves the dim last with a copy each way) and torch.softmax(x, 0); % of copy bandwidth on the ideal
  bytes (one read + one write), each output checked against float64 on a strip of columns; the same for the
  softmax backward over dim 0 (ours: the two-pass strided kernel; 2 reads + 1 write), which has no target;
- host overhead per eager call on a 1 x 1024 input: mean wall time per call (many calls back to back, one
  synchronize at the end; median of 5 runs) minus the kernel time. The kernel time is the GPU time of the same
  calls queued behind a sleeping kernel (bench.queued_ms: the GPU runs them back to back whatever the host does).
  Ours eager, ours through the custom-op dispatcher (what torch.compile sees; shown to explain why eager calls
  bypass it), the Triton backend, torch.softmax.
"""

from __future__ import annotations

import statistics
import time

import torch

from ..ops import softmax as ops
from ..reference import reference
from .bench import gbps, median_ms, queued_ms
from .check import compare, error_scale

DIM0_SHAPE = (8192, 8192)
DIM0_CHECK_COLUMNS = 64
HOST_SHAPE = (1, 1024)
HOST_CALLS = 2000
HOST_TRIALS = 5


def _dim0_impls(op: str) -> dict:
    if op == "softmax":
        return {
            "api.cuda.softmax": ("cuda", lambda x: ops.softmax(x, 0, backend="cuda")),
            "api.triton.softmax": ("triton", lambda x: ops.softmax(x, 0, backend="triton")),
            "torch.softmax": ("baseline", lambda x: torch.softmax(x, 0)),
        }
    return {  # softmax_backward: the inputs are (y, dy)
        "api.cuda.softmax_backward": ("cuda", lambda y, dy: ops.backward(y, dy, 0, False, "cuda")),
        "api.triton.softmax_backward": ("triton", lambda y, dy: ops.backward(y, dy, 0, False, "triton")),
        "torch.softmax_backward": ("baseline", lambda y, dy: torch._softmax_backward_data(dy, y, 0, y.dtype)),
    }


def dim0_rows(copy: float, seed: int = 0, op: str = "softmax") -> list[dict]:
    """`op` (softmax or softmax_backward) over dim 0 of DIM0_SHAPE fp32: one row per implementation (results.FIELDS
    keys). Ideal bytes: 1 read + 1 write forward, 2 reads + 1 write backward."""
    R, C = DIM0_SHAPE
    gen = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(DIM0_SHAPE, generator=gen, device="cuda")
    ins = (x,) if op == "softmax" else (torch.softmax(x, 0), torch.randn(DIM0_SHAPE, generator=gen, device="cuda"))
    strips = tuple(t[:, :DIM0_CHECK_COLUMNS].T.contiguous().cpu() for t in ins)  # columns as rows for float64
    ref = reference(op, strips)
    nbytes = (1 + len(ins)) * R * C * 4
    rows = []
    for name, (backend, fn) in _dim0_impls(op).items():
        row = dict(op=f"{op}_dim0", variant=name, backend=backend, rung=f"{op} over dim 0 (strided)",
                   M=C, N=R, dtype="float32", copy_gbps=copy, group=f"{op} dim 0 of {R} x {C} float32",
                   ideal_bytes=nbytes, algo_bytes=nbytes)
        try:
            out = fn(*ins)
            rep = compare(out[:, :DIM0_CHECK_COLUMNS].T.contiguous().cpu(), ref, torch.float32,
                          error_scale(op, strips, ref))
            ms = median_ms(lambda: fn(*ins), "cuda")
        except Exception as exc:  # a backend missing here is a row with a note, not a crash
            row.update(note=f"error: {type(exc).__name__}: {exc}", ok=False)
            rows.append(row)
            continue
        row.update(time_ms=ms, gbps_ideal=gbps(nbytes, ms), gbps_algo=gbps(nbytes, ms),
                   pct_copy=100 * gbps(nbytes, ms) / copy, rel_err=rep.rel_err, max_abs_err=rep.max_abs_err,
                   ok=rep.ok)
        rows.append(row)
    return rows


def _host_impls() -> dict:
    fwd = torch.ops.onlinesoftmax.softmax_forward
    return {
        "api.cuda.softmax": ("cuda", "eager", lambda x: ops.softmax(x, backend="cuda")),
        "op.cuda.softmax_forward": ("cuda", "through torch.ops (custom-op dispatch)",
                                    lambda x: fwd(x, 1, False, "cuda")),
        "api.triton.softmax": ("triton", "eager", lambda x: ops.softmax(x, backend="triton")),
        "torch.softmax": ("baseline", "eager", lambda x: torch.softmax(x, -1)),
    }


def wall_us(fn, x, calls: int = HOST_CALLS, trials: int = HOST_TRIALS) -> float:
    """Mean wall time per call, calls back to back, one synchronize at the end (after a warm-up); the median of
    `trials` such runs (the host is shared: one run can catch a hiccup)."""
    for _ in range(50):
        fn(x)
    runs = []
    for _ in range(trials):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(calls):
            fn(x)
        torch.cuda.synchronize()
        runs.append((time.perf_counter() - t0) / calls * 1e6)
    return statistics.median(runs)


def host_rows(seed: int = 0) -> list[dict]:
    """Host overhead per call on HOST_SHAPE fp32, one row per way in (results.FIELDS keys; times in µs)."""
    gen = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(HOST_SHAPE, generator=gen, device="cuda")
    ref = reference("softmax", (x.cpu(),))
    rows = []
    for name, (backend, how, fn) in _host_impls().items():
        row = dict(op="softmax_host", variant=name, backend=backend, rung=f"host overhead, {how}",
                   M=HOST_SHAPE[0], N=HOST_SHAPE[1], dtype="float32",
                   group=f"host overhead per call, {HOST_SHAPE[0]} x {HOST_SHAPE[1]} float32")
        try:
            rep = compare(fn(x).cpu(), ref, torch.float32, error_scale("softmax", (x.cpu(),), ref))
            wall, kern = wall_us(fn, x), 1e3 * queued_ms([lambda: fn(x)])
        except Exception as exc:
            row.update(note=f"error: {type(exc).__name__}: {exc}", ok=False)
            rows.append(row)
            continue
        row.update(time_ms=kern * 1e-3, wall_us=wall, kernel_us=kern, host_us=wall - kern, ok=rep.ok,
                   rel_err=rep.rel_err, max_abs_err=rep.max_abs_err)
        rows.append(row)
    return rows

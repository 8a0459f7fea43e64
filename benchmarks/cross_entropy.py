"""Cross-entropy forward + backward on one GPU: onlinesoftmax (its default: the CUDA row kernel where it applies;
"inplace": the gradient over the logits; "triton": the Triton kernels alone) against torch, torch.compile and
Liger, at the anchor rows (BT x V x dtype, ../shared/anchors/h200-wave2.md) and an odd GPT-2 vocabulary; then
linear + cross-entropy; CSV + text out.

    python benchmarks/cross_entropy.py --out benchmarks/results/h200x2-cross-entropy [--sweep] [--quick]
    python benchmarks/cross_entropy.py --rows 8192x32000:bfloat16,8192x50257:bfloat16 --out ...   those rows only
    python benchmarks/cross_entropy.py --profile 8192x32000:bfloat16      where the op's time goes beyond its kernel
    python benchmarks/cross_entropy.py --host 8192x32000:bfloat16         the host's cost of a step, and why
    python benchmarks/cross_entropy.py --pieces 8192x32000:bfloat16       the host's cost of each piece of a step

% of 1R+1W = (one read of the logits + one write of their gradient) / time / the same-run copy's bandwidth, and
also against the 4.249 TB/s of the anchors. torch and torch.compile upcast with .float() first (as the anchors,
as HF models do). Extra memory = peak allocated during forward + backward above what was allocated before
(the inputs), the logits' gradient included: ours out of place (+1x logits) and in place (inplace_grad: +0).
--sweep first times a few split-kernel configurations at two long-row shapes and keeps the fastest for the
rest of the run (the winner is printed; rules' defaults are set from it).
"""

from __future__ import annotations

import argparse
import csv
import os
import sys
import time

import torch
import torch.nn.functional as F
import triton
from triton.testing import do_bench

import onlinesoftmax as osm
from onlinesoftmax.engines.triton import cross_entropy_rules as rules
from onlinesoftmax.harness.bench import gpu_activities

ANCHOR_TBPS = 4.249
ROWS = [(8192, 32000, torch.bfloat16), (8192, 32000, torch.float32), (8192, 50257, torch.bfloat16),
        (32768, 32000, torch.bfloat16),
        (32768, 32000, torch.float32), (8192, 128256, torch.bfloat16), (8192, 128256, torch.float32),
        (32768, 128256, torch.bfloat16), (8192, 256000, torch.bfloat16), (8192, 256000, torch.float32),
        (32768, 256000, torch.bfloat16)]
COMPILE_ROWS = {(8192, 32000, torch.bfloat16)}  # each shape costs a compile (the other rows: the anchors)
LINEAR_ROWS = [(8192, 4096, 128256), (8192, 4096, 256000)]
FLUSH = None  # writes the CSV and text so far (set in main)


def bench(fn, rep=60):
    """Median of do_bench (L2 flushed) after 0.5 s of the same calls, for every implementation alike: the small rows'
    steps are bound by the host, whose cost per step varies between processes and over their first seconds
    (h200-cross-entropy-rows-655a8ee-{1,2}.txt: 8192 x 32000 bf16 0.353 ms in one process, 0.280 in the next)."""
    return do_bench(fn, warmup=500, rep=rep, return_mode="median")


def peak_extra(fn, clear=None):
    if clear is not None:
        clear()  # gradients of an earlier call are not part of the base
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    fn()
    torch.cuda.synchronize()
    return (torch.cuda.max_memory_allocated() - base) / 2**20


def copy_gbps(nbytes):
    a = torch.empty(nbytes // 2, dtype=torch.bfloat16, device="cuda")
    b = torch.empty_like(a)
    ms = bench(lambda: b.copy_(a))
    a = b = None  # noqa: F841 (free them before the next allocation)
    return 2 * nbytes / ms / 1e6


def liger():
    try:
        from liger_kernel.transformers.cross_entropy import LigerCrossEntropyLoss
        from liger_kernel.transformers.fused_linear_cross_entropy import LigerFusedLinearCrossEntropyLoss
        return LigerCrossEntropyLoss(), LigerFusedLinearCrossEntropyLoss()
    except Exception as exc:  # noqa: BLE001
        print("Liger unavailable:", exc)
        return None, None


def ce_impls(lg):
    def ours(x, t):
        x.grad = None
        osm.cross_entropy(x, t).backward()

    def ours_inplace(x, t):
        x.grad = None
        osm.cross_entropy(x, t, inplace_grad=True).backward()

    def ours_triton(x, t):
        x.grad = None
        osm.cross_entropy(x, t, backend="triton").backward()

    def torch_ce(x, t):
        x.grad = None
        F.cross_entropy(x.float(), t).backward()

    compiled = torch.compile(lambda x, t: F.cross_entropy(x.float(), t))

    def compile_ce(x, t):
        x.grad = None
        compiled(x, t).backward()

    impls = {"onlinesoftmax": ours, "onlinesoftmax inplace": ours_inplace, "onlinesoftmax triton": ours_triton,
             "torch": torch_ce,
             "torch.compile": compile_ce}
    if lg is not None:
        def liger_ce(x, t):
            x.grad = None
            lg(x, t).backward()
        impls["liger"] = liger_ce
    return impls


KNOBS = ("SPLIT_CHUNK", "SPLIT_SEG_BYTES", "SPLIT_WARPS", "SPLIT_PROGRAMS_PER_SM", "SPLIT_LANES")
# (CHUNK, SEG_BYTES, WARPS, PROGRAMS_PER_SM: what fits in the registers (ptxas sm_90: ~94 per thread), LANES)
SWEEP = [(4096, 32768, 8, 2, False), (2048, 32768, 4, 5, False), (2048, 16384, 4, 5, False),
         (4096, 65536, 8, 2, False), (8192, 65536, 16, 1, False), (2048, 32768, 4, 4, True),
         (1024, 16384, 2, 10, False)]


def _time_ours(BT, V, dt, rep=40):
    x = torch.randn(BT, V, device="cuda", dtype=dt, requires_grad=True)
    t = torch.randint(0, V, (BT,), device="cuda")

    def run():
        x.grad = None
        osm.cross_entropy(x, t).backward()
    ms = bench(run, rep=rep)
    return ms, 2 * x.numel() * x.element_size() / ms / 1e9 / ANCHOR_TBPS * 100


def sweep(out_lines):
    """The split kernel's knobs at two long rows, the fastest (summed time) kept for the run; then, at V = 32000,
    the rows kernel against the split kernel (ROWS_MAX_V)."""
    shapes = [(8192, 128256, torch.bfloat16), (8192, 256000, torch.float32)]
    best = None
    for knobs in SWEEP:
        for name, value in zip(KNOBS, knobs):
            setattr(rules, name, value)
        total, parts = 0.0, []
        for BT, V, dt in shapes:
            ms, pct = _time_ours(BT, V, dt)
            total += ms
            parts.append(f"{BT}x{V} {str(dt)[6:]} {ms:.3f} ms {pct:.1f}%")
        line = "sweep " + " ".join(f"{n}={v}" for n, v in zip(KNOBS, knobs)) + ": " + "; ".join(parts)
        print(line, flush=True)
        out_lines.append(line)
        if best is None or total < best[0]:
            best = (total, knobs)
    for name, value in zip(KNOBS, best[1]):
        setattr(rules, name, value)
    results = {}
    for rows_max in (32768, 0):
        rules.ROWS_MAX_V = rows_max
        results[rows_max] = [_time_ours(BT, 32000, dt) for BT, dt in ((8192, torch.bfloat16), (8192, torch.float32))]
        line = f"sweep ROWS_MAX_V={rows_max} at V=32000 (bf16, fp32): " + "; ".join(
            f"{ms:.3f} ms {pct:.1f}%" for ms, pct in results[rows_max])
        print(line, flush=True)
        out_lines.append(line)
    rules.ROWS_MAX_V = min(results, key=lambda k: sum(ms for ms, _ in results[k])) or 0
    line = "sweep winner: " + " ".join(f"{n}={getattr(rules, n)}" for n in KNOBS + ("ROWS_MAX_V",))
    print(line, flush=True)
    out_lines.append(line)


def check(x, t):
    """Loss and gradient against float64 on the first 64 rows."""
    xs, ts = x[:64].detach().clone().requires_grad_(), t[:64]
    osm.cross_entropy(xs, ts, reduction="sum").backward()
    ref = xs.detach().double().requires_grad_()
    loss = F.cross_entropy(ref, ts, reduction="sum")
    loss.backward()
    got = osm.cross_entropy(xs.detach(), ts, reduction="sum").double()
    return float((got - loss).abs() / loss.abs()), float((xs.grad.double() - ref.grad).abs().max())


def ce_row_only(x, t):
    """The CUDA cross-entropy kernel alone (loss, lse and gradient of every row), or None where it has no plan."""
    from onlinesoftmax.engines.cuda import run as cuda_run

    g, rows, lse, info = torch.empty_like(x), torch.empty(x.shape[0], device="cuda"), torch.empty(
        x.shape[0], device="cuda"), torch.ones(4, device="cuda")
    launch = lambda: cuda_run.cross_entropy(x, t, g, rows, lse, info, -100, 0.0, 0.0)  # noqa: E731
    return bench(launch) if launch() else None


def ce_rows(rows, writer, lines, lg, quick):
    for BT, V, dt in rows:
        x = torch.randn(BT, V, device="cuda", dtype=dt) * 2
        x.requires_grad_()
        t = torch.randint(0, V, (BT,), device="cuda")
        t[::17] = -100
        nbytes = 2 * x.numel() * x.element_size()
        copy = copy_gbps(nbytes // 2)
        rel_loss, max_grad = check(x, t)
        results = {}
        for name, fn in ce_impls(lg).items():
            if name == "torch.compile" and ((BT, V, dt) not in COMPILE_ROWS or quick):
                continue
            if name == "torch" and quick:
                continue
            try:
                x.grad = None
                mem = peak_extra(lambda: fn(x, t))
                ms = bench(lambda: fn(x, t))
            except torch.OutOfMemoryError:
                torch.cuda.empty_cache()
                results[name] = None
                continue
            results[name] = ms
            gbps = nbytes / ms / 1e6
            row = dict(BT=BT, V=V, dtype=str(dt)[6:], impl=name, ms=round(ms, 4),
                       pct_floor=round(gbps / ANCHOR_TBPS / 10, 1),
                       pct_copy=round(gbps / copy * 100, 1), copy_gbps=round(copy, 1), extra_mb=round(mem),
                       rel_err_loss=rel_loss, max_err_grad=max_grad)
            writer.writerow(row)
            FLUSH()
            x.grad = None
        kernel_ms = ce_row_only(x.detach(), t)
        if kernel_ms:  # what the op adds around its kernel: the target check, the loss's sum, the backward's launch
            results["ce_row kernel only"] = kernel_ms
            writer.writerow(dict(BT=BT, V=V, dtype=str(dt)[6:], impl="ce_row kernel only", ms=round(kernel_ms, 4),
                                 pct_floor=round(nbytes / kernel_ms / 1e6 / ANCHOR_TBPS / 10, 1),
                                 pct_copy=round(nbytes / kernel_ms / 1e6 / copy * 100, 1), copy_gbps=round(copy, 1)))
        ours, lig = results.get("onlinesoftmax"), results.get("liger")
        line = (f"{BT} x {V} {str(dt)[6:]:>8}: " + ", ".join(
            f"{k} {v:.3f} ms ({nbytes / v / 1e6 / ANCHOR_TBPS / 10:.1f}%)" for k, v in results.items() if v)
            + (f"; ours vs Liger {lig / ours:.2f}x" if ours and lig else "")
            + f"; copy {copy:.0f} GB/s; ours = {nbytes / ours / 1e6 / copy * 100:.1f}% of copy"
            + f"; err loss {rel_loss:.1e} grad {max_grad:.1e}")
        print(line, flush=True)
        lines.append(line)
        FLUSH()
        x = None  # noqa: F841 (free the logits before the next row's)
        torch.cuda.empty_cache()


def linear_rows(writer, lines, flce):
    for BT, H, V in LINEAR_ROWS:
        h = (torch.randn(BT, H, device="cuda", dtype=torch.bfloat16) * 0.5).requires_grad_()
        w = (torch.randn(V, H, device="cuda", dtype=torch.bfloat16) * 0.02).requires_grad_()
        t = torch.randint(0, V, (BT,), device="cuda")

        def clear():
            h.grad = w.grad = None

        def ours():
            clear()
            osm.linear_cross_entropy(h, w, t).backward()

        def torch_lin():
            clear()
            F.cross_entropy((h @ w.t()).float(), t).backward()

        impls = {"onlinesoftmax": ours, "torch": torch_lin}
        if flce is not None:
            def liger_lin():
                clear()
                flce(w, h, t).backward()
            impls["liger"] = liger_lin
        grads = h.numel() * 2 + w.numel() * 2  # the gradients themselves, not counted as extra
        res = {}
        for name, fn in impls.items():
            fn()
            mem = peak_extra(fn, clear) - grads / 2**20
            ms = bench(fn, rep=200)
            res[name] = (ms, mem)
            flops = 6 * BT * H * V
            writer.writerow(dict(BT=BT, V=V, dtype=f"linear H={H} bfloat16", impl=name, ms=round(ms, 3),
                                 pct_floor=round(flops / ms / 1e9, 1), pct_copy="", copy_gbps="", extra_mb=round(mem),
                                 rel_err_loss="", max_err_grad=""))
        clear()
        lo = osm.linear_cross_entropy(h.detach(), w.detach(), t).float()
        lt = F.cross_entropy((h.detach() @ w.detach().t()).float(), t)
        line = (f"linear BT={BT} H={H} V={V}: " + ", ".join(
            f"{k} {ms:.2f} ms +{mem:.0f} MB ({6 * BT * H * V / ms / 1e9:.0f} TFLOP/s)" for k, (ms, mem) in res.items())
            + f"; ours/torch time {res['onlinesoftmax'][0] / res['torch'][0]:.3f}, memory "
            f"{res['onlinesoftmax'][1] / res['torch'][1]:.4f}; loss ours {float(lo):.5f} torch {float(lt):.5f}")
        print(line, flush=True)
        lines.append(line)
        FLUSH()
        h = w = None  # noqa: F841
        torch.cuda.empty_cache()


def train_step(x, loss_fn):
    """A training step's part that is ours: x's gradient dropped, loss_fn()'s backward."""
    def step():
        x.grad = None
        loss_fn().backward()
    return step


def time_backward(records: list):
    """Our autograd Function's backward wrapped so that each call appends (seconds of its body, the native id of the
    thread it ran on) to `records`; returns the backward as it was, to put back."""
    import threading

    from onlinesoftmax.ops import cross_entropy as ce

    backward = ce._CrossEntropy.backward

    def timed(ctx, *grads):
        t0 = time.perf_counter()
        try:
            return backward(ctx, *grads)
        finally:
            records.append((time.perf_counter() - t0, threading.get_native_id()))
    ce._CrossEntropy.backward = staticmethod(timed)
    return backward


def autograd_floor(held: torch.Tensor):
    """An autograd Function whose forward makes an empty scalar and whose backward hands over `held`: a step of it
    is autograd's own cost (the grad_output fill, the worker thread's hand-over, the gradient's accumulation)."""
    class Floor(torch.autograd.Function):
        @staticmethod
        def forward(ctx, a):
            return a.new_empty(())

        @staticmethod
        def backward(ctx, g):
            return held
    return Floor


def host_wall(fn, n: int, warm: int) -> tuple[float, float]:
    """us per call of fn after `warm` calls: the host's time for n calls without a sync, and the wall time until
    the GPU has run them."""
    for _ in range(warm):
        fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    t1 = time.perf_counter()
    torch.cuda.synchronize()
    t2 = time.perf_counter()
    return 1e6 * (t1 - t0) / n, 1e6 * (t2 - t0) / n


def profile(spec: str) -> None:
    """One shape's forward + backward: host time per call (no sync) against the wall time per call, and the GPU
    kernels of 20 calls (torch.profiler), with and without the target check's wait; beside it torch's and Liger's
    steps, the forward alone, and autograd's own cost (a Function with an empty forward whose backward hands over
    a tensor): what a step's host time is made of."""
    from onlinesoftmax.ops import cross_entropy as ce

    BT, V, dtype = parse_row(spec)
    dt = str(dtype)[6:]
    x = torch.randn(BT, V, device="cuda", dtype=dtype, requires_grad=True)
    t = torch.randint(0, V, (BT,), device="cuda")
    Floor = autograd_floor(torch.empty_like(x))
    step = train_step(x, lambda: osm.cross_entropy(x, t))

    def timed(label, fn=step):
        host, wall = host_wall(fn, 50, 5)
        print(f"{label}: host {host:.1f} us per call, wall {wall:.1f} us per call", flush=True)

    # the host's own costs first (the profiler below leaves the process slower): a step whose GPU part is a few us,
    # and single launches (none waits on the GPU)
    small = torch.randn(64, V, device="cuda", dtype=x.dtype, requires_grad=True)
    timed(f"64x{V}:{dt} (the host's own cost a step: the GPU's part is a few us)",
          train_step(small, lambda: osm.cross_entropy(small, t[:64])))
    from onlinesoftmax.engines.cuda import run as cuda_run

    g1, one = torch.empty(64, 8, device="cuda", dtype=torch.bfloat16), torch.ones((), device="cuda",
                                                                                  dtype=torch.bfloat16)
    timed("a prepared launch (ce_scale, grad_output 1: returns at once)", lambda: cuda_run.cross_entropy_scale(g1, one))
    timed("torch.ones_like of a scalar (one torch launch)", lambda: torch.ones_like(one))
    timed("torch.empty(3) on the GPU (no launch)", lambda: torch.empty(3, device="cuda"))
    timed(f"{spec}")
    lg, _ = liger()
    others = {"torch F.cross_entropy": lambda: F.cross_entropy(x, t),
              "liger": (lambda: lg(x, t)) if lg is not None else None,
              "autograd floor": lambda: Floor.apply(x),
              "onlinesoftmax inplace_grad": lambda: osm.cross_entropy(x, t, inplace_grad=True)}
    for label, fn in others.items():
        if fn is not None:
            timed(f"{spec} {label}", train_step(x, fn))
    timed(f"{spec} forward only (graph dropped)", lambda: osm.cross_entropy(x, t))
    x.data.normal_()  # inplace_grad left gradients there
    with torch.autograd.set_multithreading_enabled(False):  # backward on this thread: no hand-over to autograd's
        timed(f"{spec} autograd multithreading off")
        timed(f"{spec} autograd floor, multithreading off", train_step(x, others["autograd floor"]))
    import cProfile
    import pstats
    pr = cProfile.Profile()
    pr.enable()
    for _ in range(200):
        step()
    pr.disable()
    torch.cuda.synchronize()
    print("cProfile of 200 steps (this thread: the forward, and the backward's wait in torch.Tensor.backward)")
    pstats.Stats(pr).sort_stats("tottime").print_stats(22)
    done = ce.TargetCheck.done

    def no_wait(check):  # what the wait for the target check's flag costs: the slot back to the pool, unread
        if check.slot is not None:
            ce._give_slot(check.device, check.slot)
            check.slot = None
    ce.TargetCheck.done = no_wait
    timed(f"{spec} without the target check's wait")
    ce.TargetCheck.done = done
    from onlinesoftmax.engines.cuda import run as cuda_run

    spent = {}  # host time of the op's pieces, wrapped in timers (no profiler: its own overhead hides them)

    def timer(owner, name):
        fn = getattr(owner, name)

        def timed_fn(*a, **k):
            t0 = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                spent[name] = spent.get(name, 0.0) + time.perf_counter() - t0
        setattr(owner, name, timed_fn)
        return fn

    pieces = [(osm, "cross_entropy"), (ce, "check_logits_target"), (ce.TargetCheck, "__init__"),
              (ce.TargetCheck, "done"), (ce, "fused_forward"), (cuda_run, "cross_entropy"),
              (ce, "scale_grad"), (torch.Tensor, "backward")]
    saved = [timer(o, n) for o, n in pieces]
    for _ in range(50):
        step()
    torch.cuda.synchronize()
    for (o, n), fn in zip(pieces, saved):
        setattr(o, n, fn)
    print("host us per step: " + ", ".join(f"{n} {1e6 * v / 50:.1f}" for n, v in spent.items()), flush=True)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU,
                                            torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(20):
            step()
        torch.cuda.synchronize()
    print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=14), flush=True)
    gpu_timeline(prof, 20)


def host_costs(spec: str) -> None:
    """The host's cost of a training step (x.grad = None; loss.backward()), two rounds: at the spec's shape and at
    64 rows of it (a few us of GPU work: the host's own cost), with autograd's worker thread on and off, and with
    the backward waiting for the target check (done) instead of settling it; beside each, the time our backward's
    body takes and on which thread, and how many pinned slots were allocated."""
    import threading

    from onlinesoftmax.ops import cross_entropy as ce

    BT, V, dtype = parse_row(spec)
    x = torch.randn(BT, V, device="cuda", dtype=dtype, requires_grad=True)
    small = torch.randn(64, V, device="cuda", dtype=dtype, requires_grad=True)
    t = torch.randint(0, V, (BT,), device="cuda")
    slots, body = [0], []
    slot_init = ce.Slot.__init__

    def counted_slot(self, device):
        slots[0] += 1
        slot_init(self, device)
    ce.Slot.__init__ = counted_slot
    time_backward(body)

    def timed(label, step):
        for _ in range(10):
            step()
        s0, b0 = slots[0], len(body)  # the timed steps' only
        host, wall = host_wall(step, 100, 0)
        ours = body[b0:]
        on_main = all(tid == threading.get_native_id() for _, tid in ours)
        print(f"{label}: host {host:.1f} us a step, wall {wall:.1f}; our backward's "
              f"body {1e6 * sum(b for b, _ in ours) / max(1, len(ours)):.1f} us on the "
              f"{'main' if on_main else 'worker'} thread; {slots[0] - s0} slots allocated", flush=True)

    full = train_step(x, lambda: osm.cross_entropy(x, t))
    few = train_step(small, lambda: osm.cross_entropy(small, t[:64]))
    for rnd in range(2):
        for label, step in ((spec, full), (f"64 rows of {spec}", few)):
            timed(f"[{rnd}] {label}", step)
            with torch.autograd.set_multithreading_enabled(False):
                timed(f"[{rnd}] {label}, autograd's worker thread off", step)
            settle, ce.TargetCheck.settle = ce.TargetCheck.settle, ce.TargetCheck.done
            timed(f"[{rnd}] {label}, the backward waiting for the check", step)
            ce.TargetCheck.settle = settle
        print(f"[{rnd}] do_bench of the {spec} step: {bench(full):.4f} ms", flush=True)


def host_pieces(spec: str) -> None:
    """The host's cost of each piece of a step at 64 rows of the spec (a few us of GPU work a call), in us a call:
    the median of 7 rounds of 200 calls (a sync between rounds), so that what the op's forward spends beyond its
    launches can be told apart: validation, allocations, the target check, each launch, autograd; then the step with
    autograd's worker thread off, the garbage collections during steps, the backward's body on the worker thread,
    and the step with every thread of the process on one core and on two (the worker thread's hand-over)."""
    import gc

    from onlinesoftmax.engines.cuda import run as cuda_run
    from onlinesoftmax.ops import cross_entropy as ce
    from onlinesoftmax.ops import engines

    _, V, dtype = parse_row(spec)
    M = 64
    x = torch.randn(M, V, device="cuda", dtype=dtype, requires_grad=True)
    t = torch.randint(0, V, (M,), device="cuda")
    g, rows, lse = torch.empty_like(x), torch.empty(M, device="cuda"), torch.empty(M, device="cuda")
    info = cuda_run.cross_entropy_targets(t, V, -100, True)
    loss = torch.empty((), dtype=dtype, device="cuda")
    one = torch.ones((), dtype=dtype, device="cuda")
    buf = torch.empty(2 * M + 4, device="cuda")
    scaler = cuda_run.cross_entropy_scaler(g)
    Floor = autograd_floor(g)
    def check():
        c = ce.TargetCheck(t, V, -100, "mean", "cuda")
        ce._give_slot(c.device, c.slot)  # back to the pool unread (its kernel has not run yet: a 64-row probe)
        c.slot = None

    from onlinesoftmax.engines.cuda.plan import DT_CODE, vec_width
    from onlinesoftmax.runtime import launch as rt

    vw = vec_width(dtype)
    lp = cuda_run._small(f"ce_scale<{DT_CODE[dtype]},{vw}>", 0, 512, (0, V, V, 0), 2)  # a prepared launch
    ptrs = (g.data_ptr(), one.data_ptr())
    lp.rows(1, M, *ptrs)  # the block filled and the stream set, for the driver's call alone below
    pieces = {
        "prepared launch: rows()": lambda: lp.rows(1, M, *ptrs),
        "prepared launch: _go()": lambda: lp._go(1, M, ptrs),
        "prepared launch: the driver's call alone": ((lambda: lp._launch(*lp._args)) if lp._args is not None else
                                                     (lambda: lp._launch(lp.dims[0], 1, *lp.dims[2:], rt._cu_stream(
                                                         rt.stream_handle(0)), lp._addr, 0))),
        "stream_handle()": lambda: rt.stream_handle(0),
        "torch.empty(M) fp32": lambda: torch.empty(M, device="cuda"),
        "torch.empty_like(x)": lambda: torch.empty_like(x),
        "torch.empty_like(x, contiguous)": lambda: torch.empty_like(x, memory_format=torch.contiguous_format),
        "torch.empty(()) x.dtype": lambda: torch.empty((), dtype=dtype, device="cuda"),
        "a view buf[M:2M]": lambda: buf[M:2 * M],
        "x.data_ptr()": x.data_ptr,
        "engines.cuda()": engines.cuda,
        "check_options": lambda: ce.check_options(-100, 0.0, 0.0, None, "mean"),
        "check_logits_target": lambda: ce.check_logits_target(x, t),
        "pick_backend": lambda: ce.pick_backend(x, "auto"),
        "cuda_targets": lambda: ce.cuda_targets(t),
        "cross_entropy_targets (alloc + launch)": lambda: cuda_run.cross_entropy_targets(t, V, -100, True),
        "TargetCheck (slot, targets launch)": check,
        "ce_row call (key + programmatic launch)": lambda: cuda_run.cross_entropy(x, t, g, rows, lse, info, -100,
                                                                                 0.0, 0.0, after_targets=True),
        "ce_loss call": lambda: cuda_run.cross_entropy_loss(rows, info, loss, True, after_rows=True),
        "cross_entropy_scaler(grad) (the backward's, prepared)": lambda: cuda_run.cross_entropy_scaler(g),
        "scaler(1) (the backward's launch)": lambda: scaler(one),
        "torch.ones_like(scalar) (one torch launch)": lambda: torch.ones_like(one),
        "Function.apply, graph dropped": lambda: Floor.apply(x),
        "osm.cross_entropy no grad": lambda: osm.cross_entropy(x.detach(), t),
        "osm.cross_entropy, graph dropped": lambda: osm.cross_entropy(x, t),
        "F.cross_entropy, graph dropped": lambda: F.cross_entropy(x, t),
        "step: Floor": train_step(x, lambda: Floor.apply(x)),
        "step: F.cross_entropy": train_step(x, lambda: F.cross_entropy(x, t)),
        "step: osm.cross_entropy": train_step(x, lambda: osm.cross_entropy(x, t)),
    }

    def per_call(fn, n=200, rounds=7):
        times = []
        for _ in range(rounds):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(n):
                fn()
            times.append((time.perf_counter() - t0) / n * 1e6)
        return sorted(times)[rounds // 2]

    for fn in pieces.values():  # warm: kernels loaded, launches prepared, slots pooled
        per_call(fn, 20, 1)
    print(f"host us a call at {M}x{V}:{str(dtype)[6:]} (median of 7 rounds of 200 calls)", flush=True)
    for label, fn in pieces.items():
        print(f"  {per_call(fn):8.1f}  {label}", flush=True)
    for label in ("step: Floor", "step: osm.cross_entropy"):
        with torch.autograd.set_multithreading_enabled(False):
            print(f"  {per_call(pieces[label]):8.1f}  {label}, autograd's worker thread off", flush=True)
    collections = []  # whether the garbage collector runs during steps (a cost the timings above would hide)
    gc.callbacks.append(lambda phase, info: collections.append(info["generation"]) if phase == "start" else None)
    per_call(pieces["step: osm.cross_entropy"], 1000, 1)
    gc.callbacks.pop()
    print(f"  garbage collections in 1000 osm steps: {[collections.count(g) for g in range(3)]} (gen 0, 1, 2)")
    # the backward's body on autograd's worker thread, timed inside
    stamps = []
    backward = time_backward(stamps)
    us = per_call(pieces["step: osm.cross_entropy"])
    ce._CrossEntropy.backward = backward
    body = 1e6 * sorted(b for b, _ in stamps)[len(stamps) // 2]
    print(f"  {us:8.1f}  step: osm.cross_entropy, its backward's body timed: {body:.1f} us (median)", flush=True)
    # the worker thread's hand-over on this host: every thread of the process on one core, then on two
    tasks = os.listdir("/proc/self/task")
    saved = {tid: os.sched_getaffinity(int(tid)) for tid in tasks}
    cpus = sorted(os.sched_getaffinity(0))
    for n in (1, 2):
        for tid in tasks:
            try:
                os.sched_setaffinity(int(tid), set(cpus[:n]))
            except ProcessLookupError:  # a thread that has ended since
                pass
        for label in ("step: Floor", "step: osm.cross_entropy"):
            print(f"  {per_call(pieces[label]):8.1f}  {label}, every thread on {n} core(s)", flush=True)
    for tid, mask in saved.items():
        try:
            os.sched_setaffinity(int(tid), mask)
        except ProcessLookupError:
            pass


def parse_row(spec: str):
    """"8192x32000:bfloat16" -> (8192, 32000, torch.bfloat16)"""
    shape, dt = spec.split(":")
    BT, V = (int(n) for n in shape.split("x"))
    return BT, V, getattr(torch, dt)


def gpu_timeline(prof, steps: int) -> None:
    """Where the GPU waited during the profiled steps: its busy time against the span from the first kernel's start
    to the last one's end, and the longest idle gaps with the work on either side (the host's bubbles)."""
    work = [(a, b, name[:40]) for a, b, name in gpu_activities(prof)]
    if not work:
        print("no GPU events in the trace")
        return
    busy = sum(b - a for a, b, _ in work)
    span = work[-1][1] - work[0][0]
    gaps = sorted(((b[0] - a[1], a[2], b[2]) for a, b in zip(work, work[1:])), reverse=True)
    print(f"GPU timeline of {steps} steps: span {span / steps:.1f} us a step, busy {busy / steps:.1f} us, idle "
          f"{(span - busy) / steps:.1f} us; idle gaps > 2 us: {sum(g for g, *_ in gaps if g > 2) / steps:.1f} us a "
          f"step", flush=True)
    for g, before, after in gaps[:8]:
        print(f"  gap {g:7.1f} us after {before} before {after}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--profile", metavar="BTxV:DTYPE")
    ap.add_argument("--host", metavar="BTxV:DTYPE", help="the host's cost of a step (host_costs)")
    ap.add_argument("--pieces", metavar="BTxV:DTYPE", help="the host's cost of each piece of a step (host_pieces)")
    ap.add_argument("--out")
    ap.add_argument("--sweep", action="store_true")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--rows", metavar="BTxV:DTYPE,...", help="these rows only (and no linear rows)")
    args = ap.parse_args()
    if args.profile:
        return profile(args.profile)
    if args.host:
        return host_costs(args.host)
    if args.pieces:
        return host_pieces(args.pieces)
    if not args.out:
        ap.error("--out is required (or --profile)")
    lines = [f"GPU {torch.cuda.get_device_name()}, torch {torch.__version__}, triton {triton.__version__}, "
             f"commit {os.environ.get('ONLINESOFTMAX_COMMIT', '?')}, {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}",
             "command: " + " ".join(sys.argv)]
    print(lines[0], flush=True)
    lg, flce = liger()
    if lg is not None:
        import liger_kernel
        lines.append(f"liger_kernel {getattr(liger_kernel, '__version__', '0.8.5 (wheel)')}")
    if args.sweep:
        sweep(lines)
    lines.append("config: " + " ".join(f"{n}={getattr(rules, n)}" for n in KNOBS + ("ROWS_MAX_V",)))
    global FLUSH
    with open(args.out + ".csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=["BT", "V", "dtype", "impl", "ms", "pct_floor", "pct_copy",
                                               "copy_gbps", "extra_mb", "rel_err_loss", "max_err_grad"])
        writer.writeheader()

        def flush():  # what is measured survives a timeout
            f.flush()
            with open(args.out + ".txt", "w") as txt:
                txt.write("\n".join(lines) + "\n")
        FLUSH = flush
        rows = ROWS if not args.rows else [parse_row(r) for r in args.rows.split(",")]
        ce_rows(rows, writer, lines, lg, args.quick)
        if not args.rows:
            linear_rows(writer, lines, flce)
        flush()


if __name__ == "__main__":
    main()

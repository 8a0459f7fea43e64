"""The CUDA backend for compute-sanitizer (benchmarks/sanitize.sh): every regime of the production CUDA engine (engines/cuda/), forward
and backward, vector (16-byte) and scalar paths, odd shapes, and the layouts ops.py hands the launchers (a non-last
dim, a transposed input, an unaligned pointer, expanded rows), sliced views into fresh outputs (the window path's
realigned stores), and the cross-entropy row kernel. A few launches each, every output checked against
float64, so a clean sanitizer run also computed right; exit status 1 on a wrong result or a regime that ran nothing.

    PYTHONPATH=src python benchmarks/sanitize_driver.py [--precompile] [--dtype float32 ...]
                                                        [--cross-entropy | --window | --regime cluster]

--precompile first compiles every instantiation the plans can pick, in parallel, into the NVRTC disk cache (what
the warm-up run of sanitize.sh does), so the runs under a sanitizer load cubins and never compile.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import torch

from onlinesoftmax import reference, registry
from onlinesoftmax.harness.check import check_variant, compare, compare_to_reference
from onlinesoftmax.harness.suites import SWEEP_DTYPES, parse_dtype
from onlinesoftmax.runtime import nvrtc
from onlinesoftmax.engines.cuda import plan as P
from onlinesoftmax.engines.cuda import run as E
from onlinesoftmax.engines.cuda import compiled as K
from onlinesoftmax.engines.cuda import variants as V

KINDS = ("masked", "one_finite", "nan", "huge")  # rotated over the cases: adversarial rows in every regime


def regime_cases(op: str, regime: str, dtype) -> list[tuple[int, int]]:
    """(M, N) per forced regime: an odd N (the scalar path) and a vector one, at the regime's edges."""
    W = P.vec_width(dtype)
    wmax = P.warp_max_n(op, dtype, W)
    cap = P.row_capacity(op, dtype, W)
    return {
        "warp": [(37, 33), (9, wmax)],
        # odd N; vector, registers only; vector with the first shared-memory slot
        "block": [(2, wmax + 1), (3, wmax + W), (3, P.ROW_MAX_THREADS * P.reg_slots(op, dtype, W) * W + W)],
        # 2 CTAs per row; an odd row through the window, shared evenly, the smem sized to the share; few rows:
        # wide clusters (16 for fp32 backward), aligned and an odd row through the window
        "cluster": [(2, cap + W), (3, 100003), (1, 262144), (4, 65537)],
        "split": [(3, 3001), (2, 20000)],
        # one CTA a row; groups of several CTAs holding rows in registers and shared memory, 350 CTAs in fp32 (more
        # than an H100 or H200 holds at once: the tickets)
        "group": [(3, 3001), (70, 140001)],
        "columns": [(3, 5), (2, 301)],
        "strided": [(3, 5), (2, 301)],
        # (M, N) as (outer = M, N, inner = 1): one band a strip; an odd N in several bands (a group meeting through
        # global memory: G = 3 forward, 5 backward)
        "bands": [(3, 5), (2, 9001)],
        # (M, N) as (outer = M, N, inner = 1): a thread a row; G = 8 threads a row, an empty last band
        "chan": [(37, 19), (2, 129)],
        # contiguous rows staged in shared memory: a row per lane group and a partial last CTA; rows sharing their
        # first and last 16-byte access with their neighbours over several passes and a partial one; 32 lanes a row
        "flat": [(37, 33), (301, 129), (19, 1023)],
    }[regime]


def run_regimes(dtype, failures: list, only=None) -> int:
    n = 0
    for name in V.VARIANT_NAMES:
        v = registry.get(name)
        regime = name.rsplit("_", 1)[1]
        if only not in (None, regime):
            continue
        ran = 0
        for M, N in regime_cases(v.op, regime, dtype):
            report = check_variant(v, M, N, dtype, KINDS[n % len(KINDS)], seed=n)
            n += 1
            if report.skipped:
                continue
            ran += 1
            if not report.ok:
                failures.append(f"{name} {M}x{N} {dtype}: {report.message}")
        if not ran:
            failures.append(f"{name} {dtype}: no case ran")
    return n


def _masked(t: torch.Tensor, dim: int) -> torch.Tensor:
    """t with its first row along dim all -inf."""
    row = [0] * t.dim()
    row[dim] = slice(None)
    t[tuple(row)] = float("-inf")
    return t


def _layouts(dtype, g):
    """(name, x, dim): the inputs ops.py passes on as they are, each (but the expanded one) with a masked row."""
    def randn(*shape):
        return torch.randn(*shape, device="cuda", generator=g).to(dtype)

    return [
        ("dim 1 of 3-d (columns / strided)", _masked(randn(4, 301, 24), 1), 1),
        ("dim 0 of 2-d", _masked(randn(129, 40), 0), 0),
        ("transposed (copied)", _masked(randn(40, 33), 0).t(), 1),
        ("unaligned pointer (scalar)", _masked(randn(40 * 33 + 1)[1:].view(40, 33), 1), 1),
        ("expanded rows (row stride 0)", randn(1, 520).expand(6, 520), 1),
    ]


def _both_ways(x, dim: int, log: bool, dtype, g, regime=None):
    """Softmax or log-softmax of x along dim into a NaN-poisoned output, then its backward from float64's y and a
    fresh dy (from g) into another, through the automatic plans (regime None) or `regime` forced, each checked
    against float64: ([(what, report)], the forward's rows, its float64 reference, its output)."""
    fwd = "log_softmax" if log else "softmax"
    rows = (x.movedim(dim, -1),)
    want = reference.reference(fwd, rows)
    out = torch.full(x.shape, float("nan"), device="cuda", dtype=dtype)
    if regime is None:
        E.forward(x, out, dim, log)
    else:
        E.run_regime(fwd, (x,), out, dim, regime)
    reports = [("forward", compare_to_reference(fwd, rows, out.movedim(dim, -1), dtype, ref=want))]
    y = torch.from_numpy(want).to(dtype).cuda().movedim(-1, dim).contiguous()
    dy = torch.randn(x.shape, device="cuda", generator=g).to(dtype)
    op = fwd + "_backward"
    ins = (y.movedim(dim, -1), dy.movedim(dim, -1))
    dx = torch.full(x.shape, float("nan"), device="cuda", dtype=dtype)
    if regime is None:
        E.backward(y, dy, dx, dim, log)
    else:
        E.run_regime(op, (y, dy), dx, dim, regime)
    reports.append(("backward", compare_to_reference(op, ins, dx.movedim(dim, -1), dtype)))
    return reports, rows, want, out


def run_layouts(dtype, failures: list) -> int:
    g = torch.Generator(device="cuda").manual_seed(0)
    n = 0
    for name, x, dim in _layouts(dtype, g):
        for log in (False, True):
            reports, rows, want, out = _both_ways(x, dim, log, dtype, g)
            if dim != x.dim() - 1:  # the strided kernel forward too (the automatic plan may take columns)
                fwd = "log_softmax" if log else "softmax"
                E.run_regime(fwd, (x,), out.fill_(float("nan")), dim, "strided")
                reports.append(("forward strided", compare_to_reference(fwd, rows, out.movedim(dim, -1), dtype,
                                                                         ref=want)))
            for what, r in reports:
                n += 1
                if not r.ok:
                    failures.append(f"{name} {what} log={log} {dtype}: {r.message}")
    return n


def run_window(dtype, failures: list) -> int:
    """Sliced rows x[:, 1:] (every offset from a 16-byte boundary) into fresh outputs, forward, and y and dy so
    sliced into a fresh dx: the window path with out rows of their own (P = 2: realigned stores, the access a warp's
    last lane takes from the next warp through shared memory or from the next CTA of a cluster), in the warp regime,
    one CTA (registers only: outputs realigned behind a barrier), with shared-memory slots (inputs realigned) and on
    a cluster; the first row all -inf. Then the backward again with dy the
    first N columns of wider aligned rows (a padded vocabulary's gradient: y and dy start at different offsets, the
    scalar path; 48 x 20001 on a cluster of CTAs holding the row in registers), and with y a fresh tensor (as torch
    returns the op of a view: its rows start as dx's) and dy sliced or padded to an odd width (its rows drift from
    y's): dy's own window realigned to y's
    (P = 3; the access after a warp's last lane's copied by that lane, the next CTA's included). (Each tensor ends
    its allocation: initcheck reports the window's loads of the last row's last access, whose bytes past the row
    are never used.)"""
    g = torch.Generator(device="cuda").manual_seed(2)
    W = P.vec_width(dtype)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    n = 0
    for M, N in ((37, 200), (40, 1000), (40, 4097), (6, P.ROW_MAX_THREADS * P.reg_slots("softmax", dtype, W) * W + W),
                 (3, 100003), (48, 20001), (100, 50257)):
        def sliced(masked=True):
            t = torch.randn(M, N + 1, device="cuda", generator=g).to(dtype)[:, 1:]
            return _masked(t, 1) if masked else t

        for log in (False, True):
            op = "log_softmax" if log else "softmax"
            x = sliced()
            out = torch.full((M, N), float("nan"), device="cuda", dtype=dtype)
            want = reference.reference(op, (x,))
            y, dy = sliced(), sliced(masked=False)
            y.copy_(torch.from_numpy(want))
            padded = torch.randn(M, N + 8 * W, device="cuda", generator=g).to(dtype)[:, :N]
            odd = torch.randn(M, N + 8 * W + 1, device="cuda", generator=g).to(dtype)[:, :N]  # rows drift from y's
            plan = E.plan_for(op, x, dim=1, out=out)
            E.forward(x, out, 1, log)
            checks = [("forward", plan, compare_to_reference(op, (x,), out, dtype, ref=want))]
            fresh = y.contiguous()
            for what, yy, d in (("backward", y, dy), ("backward, dy padded", y, padded),
                                ("backward, y fresh, dy sliced", fresh, dy),
                                ("backward, y fresh, dy padded to an odd width", fresh, odd)):
                dx = torch.full((M, N), float("nan"), device="cuda", dtype=dtype)
                plan = E.plan_for(op + "_backward", yy, d, dim=1, out=dx)
                if what == "backward, dy padded" and N == 20001 and (plan.regime, plan.W) != ("cluster", 1):
                    failures.append(f"window {M}x{N} {what} {dtype}: planned {plan.regime} W={plan.W}, not the scalar "
                                    "path's cluster")
                dy_window = yy is fresh and P.dy_window(op + "_backward", dtype, M, N, sms)
                if dy_window and (plan.W, plan.window) != (W, 3):
                    failures.append(f"window {M}x{N} {what} {dtype}: planned {plan.regime} W={plan.W} "
                                    f"P={plan.window}, not dy's own window")
                E.backward(yy, d, dx, 1, log)
                checks.append((what, plan, compare_to_reference(op + "_backward", (yy, d), dx, dtype)))
            for what, got, r in checks:
                n += 1
                if not r.ok:
                    failures.append(f"window {M}x{N} {what} log={log} {dtype} ({got.regime}, W={got.W}, "
                                    f"P={got.window}): {r.message}")
    return n


def run_cross_entropy(dtype, failures: list) -> int:
    """The cross-entropy op on backend "cuda" (its prepared step: ce_targets, ce_row, ce_loss, the backward's
    ce_scale, the per-row outputs in one buffer) on one CTA and on clusters, odd V through the window, a target in
    each CTA's share, an ignored row and a -inf row, each reduction (with lse), in place, and a grad_output of 2 (the
    backward's scale pass): loss, lse and gradient against float64."""
    import onlinesoftmax as osm

    g = torch.Generator(device="cuda").manual_seed(1)
    n = 0
    cases = [(5, 1000, "mean", False, 1.0), (3, 32000, "mean", False, 1.0), (4, 100003, "mean", False, 1.0),
             (7, 4097, "sum", False, 2.0), (6, 32000, "none", False, 1.0), (5, 50257, "mean", True, 1.0)]
    for M, V, reduction, inplace, go in cases:
        x = (torch.randn(M, V, device="cuda", generator=g) * 4).to(dtype)
        x[1] = float("-inf")
        x[1, 7] = 3.0
        t = torch.randint(0, V, (M,), device="cuda", generator=g)
        t[0], t[2] = -100, V - 1
        xg = x.clone().requires_grad_()
        loss, lse = osm.cross_entropy(xg, t, reduction=reduction, return_lse=True, inplace_grad=inplace,
                                      backend="cuda")
        want, dwant = reference.cross_entropy(x, t, reduction=reduction)
        ones = torch.ones_like(loss)
        (loss * go).backward(ones) if reduction == "none" else (loss * go).backward()
        got_grad = xg.grad
        lse_want = torch.logsumexp(x.double(), -1).cpu().numpy()
        for what, got, ref, kind in (("loss", loss.reshape(1, -1), want.reshape(1, -1), dtype),
                                     ("lse", lse, lse_want, torch.float32), ("grad", got_grad, dwant * go, dtype)):
            n += 1
            r = compare(got, ref, kind)
            if not r.ok:
                failures.append(f"cross_entropy {M}x{V} {reduction} inplace={inplace} {what} {dtype}: {r.message}")
    return n


def run_period(dtype, failures: list) -> int:
    """The period kernels forced (a non-last dim only, so no registry variant) on odd widths in one chunk and two, a
    period of rows of whole vectors, N = 1, and several slabs, each with a column all -inf, every op."""
    g = torch.Generator(device="cuda").manual_seed(1)
    n = 0
    for shape, dim in (((129, 333), 0), ((37, 1001), 0), ((97, 70), 0), ((1, 65), 0), ((3, 40, 100), 1)):
        x = torch.randn(*shape, device="cuda", generator=g).to(dtype)
        x[..., 0] = float("-inf")
        for log in (False, True):
            for what, r in _both_ways(x, dim, log, dtype, g, "period")[0]:
                n += 1
                if not r.ok:
                    failures.append(f"period {shape} dim {dim} {what} log={log} {dtype}: {r.message}")
    return n


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dtype", action="append", choices=SWEEP_DTYPES, help="default: all three")
    ap.add_argument("--precompile", action="store_true", help="compile every instantiation first, in parallel")
    only = ap.add_mutually_exclusive_group()
    only.add_argument("--cross-entropy", action="store_true", help="the cross-entropy cases only (no precompile)")
    only.add_argument("--window", action="store_true", help="the sliced views' cases only (no precompile)")
    only.add_argument("--regime", choices=P.REGIMES, help="one forced regime's cases only (no precompile)")
    args = ap.parse_args()
    if args.precompile and not (args.cross_entropy or args.window or args.regime):
        t0 = time.perf_counter()
        names = P.instantiations()
        K.compile_all(names, nvrtc.current_arch(), batch=1, workers=os.cpu_count() or 1)
        print(f"precompiled {len(names)} instantiations in {time.perf_counter() - t0:.0f} s", flush=True)
    failures: list[str] = []
    for dtype in map(parse_dtype, args.dtype or SWEEP_DTYPES):
        if args.regime == "period":
            n = run_period(dtype, failures)
        elif args.regime:
            n = run_regimes(dtype, failures, args.regime)
        else:
            n = 0 if args.window else run_cross_entropy(dtype, failures)
            if not args.cross_entropy:
                n += run_window(dtype, failures)
            if not (args.cross_entropy or args.window):
                n += run_regimes(dtype, failures) + run_layouts(dtype, failures) + run_period(dtype, failures)
        torch.cuda.synchronize()
        print(f"{dtype}: {n} cases", flush=True)
    for f in failures:
        print("FAIL", f)
    print(f"driver: {len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

"""Time the forward row kernels' shapes one by one on the GPU present: the evidence for plan.py's block and
cluster rules at row lengths off the powers of two and for long rows.

    PYTHONPATH=src python benchmarks/tune_rows.py [--dtype bfloat16] [--n 1023 4095 ...] [--op softmax] [--clusters]
    PYTHONPATH=src python benchmarks/tune_rows.py --flat [--lanes] [--dtype ...] [--op ...] --n 33 63 127 129 199 255

For each N (M = 2^27 // N rows, contiguous, so odd N reads through the window), `onlinesoftmax.softmax` is timed
(triton.testing.do_bench median, L2 flushed) with the plan the rules pick ("rules"), then with the regime forced to
"block" at every (threads, slots) one CTA can take: slots 1..reg_slots, threads the row's accesses over the slots
rounded up to a warp (64 at least). Each result is checked against torch in fp32 (max |difference|), and given as %
of a copy measured in the same run (read + write bytes).

--clusters: instead of the block shapes, every CTA count per row C in 1, 2, 4, ..., 16 that holds the row: in
registers alone (threads as cluster_config sizes them) and, where registers do not suffice, with the shared-memory
slots, then the split regime; besides the op (a forward op), the cross-entropy kernel alone (engines.cuda.run.cross_entropy: loss, lse and gradient of
every row, the same row kernel), as % of one read of the logits + one write of the gradient.

--flat: rows that are not whole 16-byte accesses (forward or backward ops): torch, the rules' plan, the rules without
the flat regime, then the flat regime (rows staged in shared memory) at three sizes of a CTA's chunk (the row
step's multiple nearest each: plan.flat_rows), all inputs
(FLAT_SMEM_BYTES). --lanes: then the flat regime at the shipped chunk with the lanes per row forced to 4, 8, 16 and
32 ("flat L8 ..."; the lanes' slots as plan.flat_slots gives them, a count left out where they exceed FLAT_SLOTS[-1]):
the evidence for plan.flat_config.

--force block:448x4 cluster:2x288x0 split ...: instead of every block shape, those (threads x slots of one CTA a row;
CTAs a row, threads and shared-memory slots of a cluster, the slots at most those the share fills: the plan's
used_smem_slots; the split regime), each with its CTAs resident per SM.

The block shapes, --clusters and --force take the backward ops too (x is then y, the forward's output, beside a random
dy). --dy-width K: dy is the first N columns of a K-wide tensor (a padded vocabulary's gradient: its rows start
elsewhere than y's, so the row kernels read both element by element, W = 1).

--warp: short rows (the warp regime; forward or backward ops): the rules' plan, torch's op, then the warp kernel at
every rows-per-lane-group count, on the rules' access path (the window, for odd N in 16 bits) and on the scalar path
(W = 1, forced), its slots per lane the rule's power of two or exactly the row's accesses over the lanes.
"""

from __future__ import annotations

import argparse

import torch
import triton

from onlinesoftmax.engines.cuda import plan as P
from onlinesoftmax.engines.cuda import run
from onlinesoftmax.harness.bench import copy_gbps
from onlinesoftmax.intmath import cdiv, log2
from onlinesoftmax.runtime.bounded import BoundedCache

ELEMENTS = 1 << 27
RULES = (P.choose_regime, P.block_threads, P.cluster_config, P.warp_config, run._row_access, P.use_flat,
         P.flat_config, P.FLAT_SMEM_BYTES)


def forget() -> None:
    """Drop every plan and launch entry run.py keeps, so the next call plans again."""
    for v in vars(run).values():
        if isinstance(v, BoundedCache):
            v.clear()


def force(threads_slots=None, cluster=None, warp=None, flat=None, lanes=None) -> None:
    """The rules as they are (all None); the block regime with one (threads, slots); the cluster regime with
    one (C, threads, sslots) (C == 1: the block regime, registers then shared memory as the rules size it), or
    cluster="split" for the split regime; or the
    warp regime with (scalar, rpt, exact): the scalar path forced or not, rows per lane group, the lanes' slots the
    rule's power of two or exactly the row's accesses over the lanes. flat: False, the flat regime never picked;
    a byte count, always picked (where the tensors allow it), each CTA's chunk that many bytes (all inputs); lanes:
    its lanes per row (4..32), their slots as plan.flat_slots gives them."""
    (P.choose_regime, P.block_threads, P.cluster_config, P.warp_config, run._row_access, P.use_flat,
     P.flat_config, P.FLAT_SMEM_BYTES) = RULES
    if flat is not None:
        P.use_flat = lambda *a, **k: bool(flat)
        P.FLAT_SMEM_BYTES = flat or RULES[-1]
    if lanes is not None:
        P.flat_config = lambda op, dtype, N: (log2(lanes), P.flat_slots(N, lanes))
    if warp is not None:
        scalar, rpt, exact = warp

        def config(op, dtype, W, N):
            lg, slots, _ = RULES[3](op, dtype, W, N)
            return lg, cdiv(cdiv(N, W), 1 << lg) if exact else slots, rpt
        P.warp_config = config
        if scalar:
            run._row_access = lambda *a, **k: (False, 0)
    elif threads_slots is not None:
        P.choose_regime = lambda *a, **k: "block"
        P.block_threads = lambda *a, **k: threads_slots
    elif cluster == "split":
        P.choose_regime = lambda *a, **k: "split"
    elif cluster is not None:
        P.choose_regime = lambda *a, **k: "block" if cluster[0] == 1 else "cluster"
        P.cluster_config = lambda *a, **k: cluster
    forget()


def lane_choices(N: int) -> list[int]:
    """--lanes: the lanes per row forced at N, each of P.FLAT_LANES whose slots hold the row (flat_slots)."""
    return [lanes for lanes in P.FLAT_LANES if lanes * P.FLAT_SLOTS[-1] >= N]


def cluster_choices(op: str, dtype, W: int, N: int) -> list:
    """(C, threads, sslots) for C = 1, 2, 4, ..., 16 CTAs per row: registers alone where a 512-thread CTA's share
    fits them, else 512 threads with the shared-memory slots the share fills, where that holds it (W: the plan's
    access width, 1 on the scalar path). (The plans instantiate those slots, plan.used_smem_slots; before 2026-12-03
    they took the most a CTA can hold, which this listed too.)"""
    nv = cdiv(N if N % W == 0 else N + W - 1, W)  # the window path sizes for N + W - 1
    rs, ss = P.reg_slots(op, dtype, W), P.smem_slots(op, dtype, W)
    out = []
    for c in (1, 2, 4, 8, 16):
        share = cdiv(nv, c)
        if share <= P.ROW_MAX_THREADS * rs:
            out.append((c, min(P.ROW_MAX_THREADS, max(P.ROW_MIN_THREADS, P.pow2ceil(cdiv(share, rs)))), 0))
        elif share <= P.ROW_MAX_THREADS * (rs + ss):
            out.append((c, P.ROW_MAX_THREADS, cdiv(share, P.ROW_MAX_THREADS) - rs))
    return out


def resident(p) -> str:
    """CTAs per SM the plan's (first) kernel can keep resident: cuOccupancyMaxActiveClusters x C / SMs for a cluster,
    the occupancy API's blocks per SM for one CTA."""
    from onlinesoftmax.engines.cuda.compiled import kernel
    l = p.launches[0]
    k = kernel(l.kernel, 0, l.block, l.smem, l.cluster)
    if l.cluster > 1:
        n = k.lk.max_active_clusters(l.block, l.cluster, l.smem)
        return "?" if n is None else f"{n * l.cluster / torch.cuda.get_device_properties(0).multi_processor_count:.2g}"
    try:
        return str(k.lk.kernel.occupancy.max_active_blocks_per_multiprocessor(l.block[0], l.smem))
    except Exception:  # an older cuda.core
        return "?"


def timed_ce(x: torch.Tensor, copy: float) -> str:
    """The cross-entropy kernel alone on x as logits, random targets: % of copy (1 read + 1 write of x), or '-'."""
    t = torch.randint(0, x.shape[1], (x.shape[0],), device=x.device)
    g, rows, lse = torch.empty_like(x), torch.empty(x.shape[0], device=x.device), torch.empty(x.shape[0], device=x.device)
    info = torch.ones(4, device=x.device)
    launch = lambda: run.cross_entropy(x, t, g, rows, lse, info, -100, 0.0, 0.0)  # noqa: E731
    if not launch():
        return "-"
    ms = triton.testing.do_bench(launch)
    return f"{2 * x.numel() * x.element_size() / (ms * 1e-3) / 1e9 / copy:.1%}"


def timed(op: str, x: torch.Tensor, ref: torch.Tensor, copy: float, dy=None) -> str:
    """The op on x (a backward op: x is y, the forward's output, and dy is given) through the engine's entry
    (run.forward / run.backward, so the forced rules apply) into an output poisoned with NaN first, against ref:
    % of copy (2 accesses an element, 3 for a backward). (A fresh output could hold the previous config's correct
    values, and a config that skipped part of the row would pass.)"""
    out = torch.full_like(x, float("nan"))
    log = op.startswith("log")
    if dy is None:
        fn = lambda: run.forward(x, out, 1, log) or out  # noqa: E731
    else:
        fn = lambda: run.backward(x, dy, out, 1, log) or out  # noqa: E731
    err = (fn().float() - ref).abs().max().item()
    ms = triton.testing.do_bench(fn)
    n = 2 if dy is None else 3
    return f"{n * x.numel() * x.element_size() / (ms * 1e-3) / 1e9 / copy:.1%} (err {err:.1g})"


def timed_torch(op: str, fn, x: torch.Tensor, dy, copy: float) -> str:
    """torch's op (its autograd's backward kernel for a backward op) as % of copy."""
    if dy is None:
        ms = triton.testing.do_bench(lambda: fn(x, -1))
        return f"{2 * x.numel() * x.element_size() / (ms * 1e-3) / 1e9 / copy:.1%}"
    back = torch._softmax_backward_data if op == "softmax_backward" else torch._log_softmax_backward_data
    ms = triton.testing.do_bench(lambda: back(dy, x, 1, x.dtype))
    return f"{3 * x.numel() * x.element_size() / (ms * 1e-3) / 1e9 / copy:.1%}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--op", default="softmax", choices=P.ENGINE_OPS)
    ap.add_argument("--n", nargs="*", type=int, default=[1023, 1024, 1025, 1152, 3000, 4095, 4096, 4097, 12289])
    ap.add_argument("--clusters", action="store_true", help="CTAs per row (registers or shared memory), + ce_row")
    ap.add_argument("--warp", action="store_true", help="short rows: rows per lane group, window or scalar path")
    ap.add_argument("--flat", action="store_true", help="rows off the vector: the flat regime's chunks against the rest")
    ap.add_argument("--lanes", action="store_true", help="--flat: then the flat regime at 4, 8, 16, 32 lanes per row")
    ap.add_argument("--force", nargs="*", default=[], metavar="CONFIG",
                    help="instead of every block shape, these: block:THREADSxSLOTS, cluster:CxTHREADSxSSLOTS, split")
    ap.add_argument("--dy-width", type=int, default=0, metavar="K",
                    help="backward: dy the first N columns of a K-wide tensor (its rows start elsewhere than y's)")
    args = ap.parse_args()
    dtype = getattr(torch, args.dtype)
    copy = copy_gbps("cuda")
    print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}, {args.op} {args.dtype}, copy {copy:.0f} GB/s"
          + (f", dy a view of {args.dy_width}-wide rows" if args.dy_width else ""))
    forward = getattr(torch, args.op.removesuffix("_backward"))  # torch's forward op (its backward: timed_torch)
    for N in args.n:
        M = ELEMENTS // N
        x = torch.randn(M, N, device="cuda", dtype=dtype)
        dy = None
        ref = forward(x.float(), -1)
        if args.op.endswith("_backward"):  # x becomes y, the forward's output
            x = ref.to(dtype)
            dy = torch.randn(M, max(N, args.dy_width), device="cuda", dtype=dtype)[:, :N]
            y, g = x.float(), dy.float()
            ref = (y * (g - (g * y).sum(-1, keepdim=True)) if args.op == "softmax_backward" else
                   g - y.exp() * g.sum(-1, keepdim=True))
        ins = (x,) if dy is None else (x, dy)
        force(None)
        if args.flat:
            line = f"{M}x{N} | torch: {timed_torch(args.op, forward, x, dy, copy)}"
            runs = [(flat, None) for flat in (None, False, 16384, 32768, 65536)]
            runs += [(RULES[-1], lanes) for lanes in lane_choices(N)] if args.lanes else []  # the shipped chunk
            for flat, lanes in runs:
                force(flat=flat, lanes=lanes)
                p = run.plan_for(args.op, *ins)
                label = "rules: " if flat is None else ""
                tag = f" L{lanes}" if lanes else ""
                line += f" | {label}{p.regime}{tag} {p.kernels[0]} R{p.rows}: {timed(args.op, x, ref, copy, dy)}"
            force(None)
            print(line, flush=True)
            continue
        rules = run.plan_for(args.op, *ins)
        line = (f"{M}x{N} | torch: {timed_torch(args.op, forward, x, dy, copy)} | rules {rules.regime} "
                f"{rules.kernels[0]}: {timed(args.op, x, ref, copy, dy)}")
        if args.warp:
            for scalar, exact in ((False, False), (True, False), (True, True)):
                if exact and N % 32 == 0:
                    continue
                for rpt in (1, 2, 4):
                    force(warp=(scalar, rpt, exact))
                    name = ("scalar" if scalar else "rules path") + (" exact slots" if exact else "")
                    line += f" | {name} rpt {rpt}: {timed(args.op, x, ref, copy, dy)}"
            force(None)
            print(line, flush=True)
            continue
        if args.clusters:
            line += f" ce {timed_ce(x, copy)}" if dy is None else ""
            configs = [("cluster", cfg) for cfg in cluster_choices(args.op, dtype, rules.W, N)] + [("split", "split")]
        elif args.force:
            configs = [(kind, "split" if kind == "split" else tuple(int(d) for d in dims.split("x")))
                       for kind, _, dims in (cfg.partition(":") for cfg in args.force)]
        else:  # every (threads, slots) of one CTA a row
            nv = cdiv(N + rules.W - 1, rules.W)
            configs = [("block", (max(64, cdiv(cdiv(nv, slots), 32) * 32), slots))
                       for slots in range(1, P.reg_slots(args.op, dtype, rules.W) + 1)]
            configs = [c for c in configs if c[1][0] <= P.ROW_MAX_THREADS]
        for kind, dims in configs:
            force(**{"threads_slots" if kind == "block" else "cluster": dims})
            try:
                p = run.plan_for(args.op, *ins)
            except P.Unsupported as exc:
                line += f" | {kind} {dims}: {exc}"
                continue
            line += f" | {kind} {dims} {p.kernels[0]} ({resident(p)}/SM): {timed(args.op, x, ref, copy, dy)}"
            if args.clusters and dy is None:
                line += f" ce {timed_ce(x, copy)}"
        force(None)
        print(line, flush=True)
        del x, ref, dy
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()

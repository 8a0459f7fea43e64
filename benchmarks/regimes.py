"""Every production regime that takes a shape, beside the automatic plan (api.cuda.*) and torch, on the GPU: which
regime should the rules pick? % of the same-run copy bandwidth (ideal bytes), checked against float64. Each
(op, dtype, shape) also times a plain copy of the same bytes (do_bench median and queued on rotated copies): the floor
for moving those bytes at all, which a softmax (read everything, then write) cannot beat. The summary gives ours over
that copy (issue 12: at most 1.5 for N >= 131072) and torch over ours (at least 4 at 1 x 262144 and 32 x 131072).

    PYTHONPATH=src python benchmarks/regimes.py [--out FILE.csv] [MxN ...]     (default: the sweep's few-row shapes)
    PYTHONPATH=src python benchmarks/regimes.py --auto --ops all --dtypes all  (issue 12's few-row grid: the plan,
                                                                                torch and Liger only, every op, dtype)
"""

import argparse

import torch

from onlinesoftmax import opdefs, registry
from onlinesoftmax.engines.cuda import plan as P
from onlinesoftmax.engines.cuda import run as E
from onlinesoftmax.harness import results
from onlinesoftmax.harness.bench import ROTATE_BYTES, copy_gbps, gbps, measure, median_ms, queued_ms
from onlinesoftmax.harness.suites import FEW_ROWS, SWEEP_DTYPES, SWEEP_OPS, parse_dtype, parse_shape

OPS = ("softmax", "softmax_backward")
DTYPES = ("float32", "bfloat16")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("shapes", nargs="*")
    ap.add_argument("--out")
    ap.add_argument("--ops", nargs="*", default=list(OPS), help=f"ops ('all': {', '.join(SWEEP_OPS)})")
    ap.add_argument("--dtypes", nargs="*", default=list(DTYPES), help="dtypes ('all': float32 bfloat16 float16)")
    ap.add_argument("--auto", action="store_true", help="the automatic plan, torch and Liger only (no forced regime)")
    args = ap.parse_args()
    shapes = [parse_shape(s) for s in args.shapes] or FEW_ROWS
    ops = SWEEP_OPS if args.ops == ["all"] else args.ops
    dtypes = [parse_dtype(d) for d in (SWEEP_DTYPES if args.dtypes == ["all"] else args.dtypes)]
    env = results.environment("cuda")
    copy = copy_gbps("cuda")
    print(f"{env['device']}: copy {copy:.0f} GB/s")
    known = {v.name: v for v in registry.variants()}
    rows, copies, summary = [], {}, []
    for op in ops:
        # a copy of the op's ideal bytes: one tensor forward (read + write), 1.5 tensors backward (two reads, a write)
        scale = 3 if opdefs.OPS[op].backward else 2
        for dtype in dtypes:
            for M, N in shapes:
                if (scale, dtype, M, N) not in copies:
                    copies[scale, dtype, M, N] = copy_row(M, N * scale // 2, dtype, copy, env)
                    rows.append(copies[scale, dtype, M, N])
                names = [f"api.cuda.{op}", f"torch.{op}", f"liger.{op}"]
                names += [] if args.auto else [f"cuda.{op}_{r}" for r in P.REGIMES]
                got = {}
                for name in names:
                    v = known.get(name)  # no backward columns variant; Liger only where it is installed
                    if v is None or v.refuses(M, N, dtype):
                        continue
                    try:
                        m = measure(v, M, N, dtype)
                    except Exception as e:  # Liger raises above N = 65536: say so and go on (ours and torch: raise)
                        if not name.startswith("liger."):
                            raise
                        print(f"{op:17s} {str(dtype)[6:]:8s} {M:5d} x {N:<7d} {name:28s} raised {type(e).__name__}")
                        continue
                    got[name] = m
                    pct = 100 * m.gbps_ideal() / copy
                    ins = (torch.empty(M, N, dtype=dtype, device="cuda"),) * (2 if opdefs.OPS[op].backward else 1)
                    plan = E.plan_for(op, *ins)
                    note = f"auto plan: {plan.regime} {plan.kernels}" if name.startswith("api.") else ""
                    queued = f"{m.queued_ms * 1e3:8.1f} us queued" if m.queued_ms is not None else ""
                    print(f"{op:17s} {str(dtype)[6:]:8s} {M:5d} x {N:<7d} {name:28s} {m.time_ms * 1e3:8.1f} us "
                          f"{pct:5.1f}% {queued} {'ok' if m.ok else 'WRONG'} {note}")
                    rows.append(dict(op=op, variant=name, backend=v.backend, rung=v.rung, M=M, N=N,
                                     dtype=str(dtype)[6:], time_ms=m.time_ms, ideal_bytes=m.ideal_bytes,
                                     algo_bytes=m.algo_bytes, queued_ms=m.queued_ms, gbps_ideal=m.gbps_ideal(),
                                     pct_copy=pct, copy_gbps=copy, rel_err=m.rel_err, max_abs_err=m.max_abs_err,
                                     ok=m.ok, note=note, group=f"{op} {dtype} {M}x{N}", **env))
                ours = got.get(f"api.cuda.{op}")
                if ours is not None:
                    summary.append((op, str(dtype)[6:], M, N, ours, copies[scale, dtype, M, N],
                                    got.get(f"torch.{op}"), got.get(f"liger.{op}")))
    print_summary(summary)
    if args.out:
        results.write_csv(rows, args.out)


def print_summary(summary) -> None:
    """Ours against the same-bytes copy, torch and Liger: do_bench medians, in brackets queued back to back."""
    def ratio(t, q, bt, bq):  # t / bt, and q / bq where both were queued
        return f"{t / bt:.2f}" + (f" ({q / bq:.2f})" if q and bq else "")

    print("\n| op | dtype | M x N | ours us | copy us | ours / copy | torch / ours | Liger / ours | ok |")
    print("|---|---|---|---:|---:|---:|---:|---:|---|")
    for op, dt, M, N, ours, cp, tor, lig in summary:
        oc = ratio(ours.time_ms, ours.queued_ms, cp["time_ms"], cp["queued_ms"])
        to, li = (ratio(b.time_ms, b.queued_ms, ours.time_ms, ours.queued_ms) if b else "-" for b in (tor, lig))
        print(f"| {op} | {dt} | {M} x {N} | {ours.time_ms * 1e3:.1f} | {cp['time_ms'] * 1e3:.1f} | {oc} | {to} | {li} "
              f"| {'ok' if ours.ok else 'WRONG'} |")


def copy_row(M: int, N: int, dtype, copy: float, env: dict) -> dict:
    """A plain copy (torch copy_, i.e. cudaMemcpy) of an M x N tensor: 1 read + 1 write, like a forward softmax."""
    src = torch.randn(M, N, device="cuda").to(dtype)
    srcs = [src] + [src.clone() for _ in range(ROTATE_BYTES // (src.numel() * src.element_size()))]
    dst = torch.empty_like(src)
    ms = median_ms(lambda: dst.copy_(srcs[0]), "cuda")
    queued = queued_ms(lambda s=s: dst.copy_(s) for s in srcs)
    nbytes = 2 * dst.numel() * dst.element_size()
    pct = 100 * gbps(nbytes, ms) / copy
    print(f"{'copy':17s} {str(dtype)[6:]:8s} {M:5d} x {N:<7d} {'torch copy_':28s} {ms * 1e3:8.1f} us {pct:5.1f}% "
          f"{queued * 1e3:8.1f} us queued")
    return dict(op="copy", variant="torch.copy_", backend="baseline", rung="torch copy_ (the same bytes)", M=M, N=N,
                dtype=str(dtype)[6:], time_ms=ms, ideal_bytes=nbytes, algo_bytes=nbytes, queued_ms=queued,
                gbps_ideal=gbps(nbytes, ms), pct_copy=pct, copy_gbps=copy, ok=True, note="",
                group=f"copy {dtype} {M}x{N}", **env)


if __name__ == "__main__":
    main()

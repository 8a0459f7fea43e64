"""Every production regime that takes a shape, beside the automatic plan (api.cuda.*) and torch, on the GPU: which
regime should the rules pick? % of the same-run copy bandwidth (ideal bytes), checked against float64.

    PYTHONPATH=src python benchmarks/regimes.py [--out FILE.csv] [MxN ...]     (default: the sweep's few-row shapes)
"""

import argparse

import torch

from onlinesoftmax import registry
from onlinesoftmax.harness import results
from onlinesoftmax.harness.bench import copy_gbps, measure
from onlinesoftmax.harness.suites import FEW_ROWS, parse_shape
from onlinesoftmax.variants import production as P

OPS = ("softmax", "softmax_backward")
DTYPES = (torch.float32, torch.bfloat16)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("shapes", nargs="*")
    ap.add_argument("--out")
    args = ap.parse_args()
    shapes = [parse_shape(s) for s in args.shapes] or FEW_ROWS
    env = results.environment("cuda")
    copy = copy_gbps("cuda")
    print(f"{env['device']}: copy {copy:.0f} GB/s")
    known = {v.name: v for v in registry.variants()}
    rows = []
    for op in OPS:
        for dtype in DTYPES:
            for M, N in shapes:
                names = [f"api.cuda.{op}", f"torch.{op}"] + [f"cuda.{op}_{r}" for r in P.REGIMES]
                for name in names:
                    v = known.get(name)  # no backward columns variant
                    if v is None or v.refuses(M, N, dtype):
                        continue
                    m = measure(v, M, N, dtype)
                    pct = 100 * m.gbps_ideal() / copy
                    ins = (torch.empty(M, N, dtype=dtype, device="cuda"),) * (2 if op in P.BACKWARD_OPS else 1)
                    plan = P.plan_for(op, *ins)
                    note = f"auto plan: {plan.regime} {plan.kernels}" if name.startswith("api.") else ""
                    queued = f"{m.queued_ms * 1e3:8.1f} us queued" if m.queued_ms is not None else ""
                    print(f"{op:17s} {str(dtype)[6:]:8s} {M:5d} x {N:<7d} {name:28s} {m.time_ms * 1e3:8.1f} us "
                          f"{pct:5.1f}% {queued} {'ok' if m.ok else 'WRONG'} {note}")
                    rows.append(dict(op=op, variant=name, backend=v.backend, rung=v.rung, M=M, N=N,
                                     dtype=str(dtype)[6:], time_ms=m.time_ms, ideal_bytes=m.ideal_bytes,
                                     algo_bytes=m.algo_bytes, queued_ms=m.queued_ms, gbps_ideal=m.gbps_ideal(), pct_copy=pct,
                                     copy_gbps=copy, rel_err=m.rel_err, max_abs_err=m.max_abs_err, ok=m.ok,
                                     note=note, group=f"{op} {dtype} {M}x{N}", **env))
    if args.out:
        results.write_csv(rows, args.out)


if __name__ == "__main__":
    main()

"""Every production regime that takes a shape, beside the automatic plan (api.cuda.*) and torch, on the GPU: which
regime should the rules pick? % of the same-run copy bandwidth (ideal bytes), checked against float64. Each
(dtype, shape) also times a plain copy of the same tensor (do_bench median and queued on rotated copies): the floor
for moving those bytes at all, which a softmax (read everything, then write) cannot beat.

    PYTHONPATH=src python benchmarks/regimes.py [--out FILE.csv] [MxN ...]     (default: the sweep's few-row shapes)
"""

import argparse

import torch

from onlinesoftmax import registry
from onlinesoftmax.harness import results
from onlinesoftmax.harness.bench import ROTATE_BYTES, copy_gbps, gbps, measure, median_ms, queued_ms
from onlinesoftmax.harness.suites import FEW_ROWS, parse_shape
from onlinesoftmax import opdefs
from onlinesoftmax.engines.cuda import plan as P
from onlinesoftmax.engines.cuda import run as E

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
    for dtype in DTYPES:
        for M, N in shapes:
            rows.append(copy_row(M, N, dtype, copy, env))
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
                    ins = (torch.empty(M, N, dtype=dtype, device="cuda"),) * (2 if opdefs.OPS[op].backward else 1)
                    plan = E.plan_for(op, *ins)
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

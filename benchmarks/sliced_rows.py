"""Time sliced rows into fresh outputs on the GPU present: the window path whose out rows start elsewhere than the
inputs' (plan window 2, the kernels' P = 2: x[:, 1:] of a wider tensor, a padded vocabulary's x[:, :V]).

    PYTHONPATH=src python benchmarks/sliced_rows.py [--out sliced.csv] [--dtype bfloat16 ...] [--shape M N WIDTH FIRST ...]
                                                    [--y fresh]

Each shape is the columns FIRST .. FIRST + N of an (M, WIDTH) tensor; forward ops read x so sliced, backward ops y
and dy sliced alike (y the op's output of x), or with --y fresh y a fresh contiguous tensor (what torch returns for
the op of a view; its rows start elsewhere than dy's: the kernels' P = 3, dy realigned to y), every output a fresh
contiguous (M, N) tensor. Each cell is the CUDA
backend's public op (ops.softmax forward / backward), timed with triton.testing.do_bench (median, L2 flushed) and
given as % of a copy measured in the same run (one read + one write forward, two reads + one write backward); its
first 64 rows are checked against float64. For an A/B, run it once per source tree (PYTHONPATH), as
benchmarks/ab.sh runs the sweep.
"""

from __future__ import annotations

import argparse

import torch

from onlinesoftmax.engines.cuda import run as E
from onlinesoftmax.harness.bench import copy_gbps, gbps, median_ms
from onlinesoftmax.harness.check import compare_to_reference
from onlinesoftmax.harness.results import write_csv
from onlinesoftmax.ops import softmax as ops

OPS = ("softmax", "log_softmax", "softmax_backward", "log_softmax_backward")
# (M, N, WIDTH, FIRST): x[:, 1:] of widths that put consecutive rows at every offset from a 16-byte boundary, at
# M * N ~ 2^27 (the warp regime, one CTA in registers, with shared-memory slots, a cluster), and a padded vocabulary
SHAPES = ((131072, 1000, 1001, 1), (32768, 4096, 4097, 1), (32768, 4097, 4099, 1), (8192, 16384, 16385, 1),
          (4096, 32000, 32001, 1), (2560, 50257, 50304, 0), (2560, 50257, 50258, 1), (1024, 131072, 131073, 1))
CHECK_ROWS = 64


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="sliced-rows.csv")
    ap.add_argument("--dtype", action="append", choices=("float32", "bfloat16", "float16"))
    ap.add_argument("--op", action="append", choices=OPS)
    ap.add_argument("--shape", action="append", nargs=4, type=int, metavar=("M", "N", "WIDTH", "FIRST"))
    ap.add_argument("--y", choices=("sliced", "fresh"), default="sliced",
                    help="the backward's y: sliced as dy, or fresh")
    args = ap.parse_args()
    copy = copy_gbps("cuda")
    print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}, copy {copy:.0f} GB/s", flush=True)
    g = torch.Generator(device="cuda").manual_seed(0)
    rows = []
    for name in args.dtype or ("bfloat16", "float32"):
        dtype = getattr(torch, name)
        for M, N, width, first in args.shape or SHAPES:
            def sliced():
                return (torch.randn(M, width, generator=g, device="cuda") * 3).to(dtype)[:, first:first + N]

            x = sliced()
            for op in args.op or OPS:
                log = op.startswith("log")
                if op.endswith("backward"):
                    y = sliced() if args.y == "sliced" else torch.empty(M, N, device="cuda", dtype=dtype)
                    dy = sliced()
                    y.copy_((torch.log_softmax if log else torch.softmax)(x.float(), 1))
                    ins = (y, dy)
                    fn = lambda: ops.backward(y, dy, 1, log, "cuda")  # noqa: E731
                else:
                    ins = (x,)
                    fn = lambda: ops.forward(x, 1, log, "cuda")  # noqa: E731
                plan = E.plan_for(op, *ins, dim=1)
                strips = tuple(t[:CHECK_ROWS].cpu() for t in ins)
                rep = compare_to_reference(op, strips, fn()[:CHECK_ROWS].cpu(), dtype)
                ms = median_ms(fn, "cuda")
                pct = 100 * gbps((1 + len(ins)) * M * N * x.element_size(), ms) / copy
                kernels = " ".join(launch.kernel for launch in plan.launches)
                print(f"{name:9s} {M:>6} x {N:>6} (rows {width} apart, from {first}) {op:21s} {pct:6.1f}% "
                      f"{'ok' if rep.ok else 'WRONG: ' + rep.message}  {kernels}", flush=True)
                rows.append(dict(dtype=name, M=M, N=N, width=width, first=first, op=op, y=args.y,
                                 pct_copy=round(pct, 2),
                                 time_ms=ms, ok=rep.ok, kernels=kernels, copy_gbps=round(copy)))
            del x
            torch.cuda.empty_cache()
    write_csv(rows, args.out, list(rows[0]))


if __name__ == "__main__":
    main()

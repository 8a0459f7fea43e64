"""Torch's own passes over an N x W matrix beside a softmax over its dim 0, where every output needs every input of
its column, on the GPU present:

    PYTHONPATH=src python benchmarks/two_phase_floor.py [--shape 4097 1001 ...] [--dtype float32 bfloat16 ...]

No output of such a softmax can be written before its column has been read whole, so where one wave of CTAs holds
the slab (the period regime's kept bands) a kernel reads everything, then writes everything, where a copy overlaps
its reads and writes. This times, with harness.bench.median_ms (do_bench: median, L2 flushed before every call),
each shape's:

    copy        out.copy_(x): one read and one write of the same bytes, overlapped
    read        the faster of x.sum() and x.amax(): every byte read once
    write       the faster of out.fill_(1) and out.zero_(): every byte written once
    read,write  a sum, then a fill, in one stream: two passes in turn, one kernel boundary between them

and prints copy / (read,write). These are torch's kernels, not a bound on ours: the period kernel's stats read
16.4 MB (dim 0 of 4097 x 1001 fp32) in about 9 us on an H100, where x.sum() took 17 (session 81). The copy column
is the yardstick's own time at the slab's size: issue 12 counts % of a 1 GiB copy's rate, which a copy of a few MB
does not reach (16.4 MB took 19 us there, 57% of that rate).
"""

from __future__ import annotations

import argparse

import torch

from onlinesoftmax.harness.bench import median_ms


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", type=int, nargs=2, action="append", metavar=("N", "W"),
                    help="an N x W matrix (repeatable); default 4097 x 1001, 2049 x 3001, 8193 x 1001")
    ap.add_argument("--dtype", nargs="+", default=["float32", "bfloat16"])
    args = ap.parse_args()
    shapes = args.shape or [(4097, 1001), (2049, 3001), (8193, 1001)]
    print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}; us (do_bench median, L2 flushed)")
    print("shape | dtype | MB | copy | read | write | read,write | copy / (read,write)")
    for n, w in shapes:
        for name in args.dtype:
            x = torch.randn(n, w, device="cuda").to(getattr(torch, name))
            out = torch.empty_like(x)
            us = {
                "copy": median_ms(lambda: out.copy_(x), "cuda"),
                "read": min(median_ms(lambda: x.sum(), "cuda"), median_ms(lambda: x.amax(), "cuda")),
                "write": min(median_ms(lambda: out.fill_(1), "cuda"), median_ms(lambda: out.zero_(), "cuda")),
                "read,write": median_ms(lambda: (x.sum(), out.fill_(1)), "cuda"),
            }
            us = {k: v * 1e3 for k, v in us.items()}
            cells = " | ".join(f"{us[k]:.1f}" for k in ("copy", "read", "write", "read,write"))
            print(f"{n} x {w} | {name} | {x.numel() * x.element_size() / 1e6:.1f} | {cells} | "
                  f"{100 * us['copy'] / us['read,write']:.0f}%")


if __name__ == "__main__":
    main()

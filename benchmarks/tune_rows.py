"""Time the forward row kernels' shapes one by one on the GPU present: the evidence for plan.py's warp and block
rules at row lengths off the powers of two.

    PYTHONPATH=src python benchmarks/tune_rows.py [--dtype bfloat16] [--n 1023 4095 ...] [--op softmax]

For each N (M = 2^27 // N rows, contiguous, so odd N reads through the window), `onlinesoftmax.softmax` is timed
(triton.testing.do_bench median, L2 flushed) with the plan the rules pick ("rules"), then with the regime forced to
"block" at every (threads, slots) one CTA can take: slots 1..reg_slots, threads the row's accesses over the slots
rounded up to a warp (64 at least). Each result is checked against torch in fp32 (max |difference|), and given as %
of a copy measured in the same run (read + write bytes).
"""

from __future__ import annotations

import argparse

import torch
import triton

import onlinesoftmax as osm
from onlinesoftmax.engines.cuda import plan as P
from onlinesoftmax.engines.cuda import run
from onlinesoftmax.harness.bench import copy_gbps
from onlinesoftmax.intmath import cdiv
from onlinesoftmax.runtime.bounded import BoundedCache

ELEMENTS = 1 << 27
RULES = (P.choose_regime, P.block_threads)


def forget() -> None:
    """Drop every plan and launch entry run.py keeps, so the next call plans again."""
    for v in vars(run).values():
        if isinstance(v, BoundedCache):
            v.clear()


def force(threads_slots=None) -> None:
    """The rules as they are (None), or the block regime with one (threads, slots)."""
    if threads_slots is None:
        P.choose_regime, P.block_threads = RULES
    else:
        P.choose_regime = lambda *a, **k: "block"
        P.block_threads = lambda *a, **k: threads_slots
    forget()


def timed(op: str, x: torch.Tensor, ref: torch.Tensor, copy: float) -> str:
    fn = getattr(osm, op)
    out = fn(x, -1)
    err = (out.float() - ref).abs().max().item()
    ms = triton.testing.do_bench(lambda: fn(x, -1))
    return f"{2 * x.numel() * x.element_size() / (ms * 1e-3) / 1e9 / copy:.0%} (err {err:.1g})"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--op", default="softmax", choices=("softmax", "log_softmax"))
    ap.add_argument("--n", nargs="*", type=int, default=[1023, 1024, 1025, 1152, 3000, 4095, 4096, 4097, 12289])
    args = ap.parse_args()
    dtype = getattr(torch, args.dtype)
    copy = copy_gbps("cuda")
    print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}, {args.op} {args.dtype}, copy {copy:.0f} GB/s")
    W = P.vec_width(dtype)
    for N in args.n:
        M = ELEMENTS // N
        x = torch.randn(M, N, device="cuda", dtype=dtype)
        ref = getattr(torch, args.op)(x.float(), -1)
        force(None)
        rules = P.plan(M, N, dtype, args.op, vec=N % W == 0, window=1).launches[0].kernel
        line = f"{M}x{N} | rules {rules}: {timed(args.op, x, ref, copy)}"
        nv = cdiv(N + W - 1, W)
        for slots in range(1, P.reg_slots(args.op, dtype, W) + 1):
            threads = max(64, cdiv(cdiv(nv, slots), 32) * 32)
            if threads <= P.ROW_MAX_THREADS:
                force((threads, slots))
                line += f" | block {threads}x{slots}: {timed(args.op, x, ref, copy)}"
        force(None)
        print(line, flush=True)
        del x, ref
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()

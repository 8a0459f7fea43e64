"""Two launches of one op on the GPU, for ncu (benchmarks/ncu.sh): ours (the production plan), the Triton backend's
or torch's.

    PYTHONPATH=src python benchmarks/profile_once.py OP DTYPE MxN [--dim D] [--impl ours|triton|torch] [--sliced]
                                                     [--regime R]

OP is softmax, log_softmax, softmax_backward or log_softmax_backward; the tensor is M x N with the op over N (dim -1),
or N x M over dim 0 with --dim 0; --sliced: x[:, 1:] of M x (N + 1), into a fresh output (the window path's own out
windows); --regime: ours with that regime forced (run.run_regime), e.g. bands or strided over dim 0.
benchmarks/ncu.sh runs it under ncu.
"""

import argparse

import torch

from onlinesoftmax.harness.suites import SWEEP_DTYPES, parse_dtype, parse_shape
from onlinesoftmax import opdefs
from onlinesoftmax.engines.cuda import plan as P
from onlinesoftmax.engines.cuda import run as E


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("op", choices=list(P.ENGINE_OPS))
    ap.add_argument("dtype", choices=SWEEP_DTYPES)
    ap.add_argument("shape", help="MxN: M rows of N")
    ap.add_argument("--dim", type=int, default=-1, choices=(-1, 0))
    ap.add_argument("--impl", default="ours", choices=("ours", "triton", "torch"))
    ap.add_argument("--sliced", action="store_true", help="x[:, 1:] of M x (N + 1) (dim -1 only)")
    ap.add_argument("--regime", choices=P.REGIMES, help="ours with this regime forced instead of the plan's")
    args = ap.parse_args()
    if args.sliced and args.dim != -1:
        ap.error("--sliced slices the last dim: --dim -1 only")
    if args.regime and args.impl != "ours":
        ap.error("--regime forces one of ours: --impl ours only")
    M, N = parse_shape(args.shape)
    dtype = parse_dtype(args.dtype)
    shape = (M, N) if args.dim == -1 else (N, M)
    dim = args.dim % 2
    x = torch.randn(shape, device="cuda", dtype=dtype) if not args.sliced else \
        torch.randn(M, N + 1, device="cuda", dtype=dtype)[:, 1:]
    backward = opdefs.OPS[args.op].backward
    log = args.op.startswith("log")
    y = (torch.log_softmax if log else torch.softmax)(x.float(), dim).to(dtype) if backward else None
    out = torch.empty(shape, device="cuda", dtype=dtype)
    for _ in range(2):
        if args.impl == "torch" and backward:
            f = torch._log_softmax_backward_data if log else torch._softmax_backward_data
            f(x, y, dim, dtype)
        elif args.impl == "torch":
            (torch.log_softmax if log else torch.softmax)(x, dim)
        elif args.impl == "triton":
            from onlinesoftmax.ops import softmax as ops

            ops.backward(y, x, dim, log, "triton") if backward else ops.forward(x, dim, log, "triton")
        elif args.regime:
            E.run_regime(args.op, (y, x) if backward else (x,), out, dim, args.regime)
        elif backward:
            E.backward(y, x, out, dim, log)
        else:
            E.forward(x, out, dim, log)
    torch.cuda.synchronize()
    nbytes = (3 if backward else 2) * x.numel() * x.element_size()  # ideal: 1 read (2 backward) + 1 write
    head = f"{args.impl} {args.op} {args.dtype} {tuple(shape)} dim {args.dim}: ideal bytes {nbytes}"
    if args.impl == "triton":
        print(head)
        return
    plan = E.plan_for(args.op, *((y, x) if backward else (x,)), dim=dim, out=out, regime=args.regime)
    print(f"{head}; plan {plan.regime} {plan.launches}")


if __name__ == "__main__":
    main()

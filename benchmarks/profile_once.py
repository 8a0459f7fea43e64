"""Two launches of one op on the GPU, for ncu (benchmarks/ncu.sh): ours (the production plan), the Triton backend's
or torch's; with --timeline, the GPU's timeline of a third.

    PYTHONPATH=src python benchmarks/profile_once.py OP DTYPE MxN [--dim D] [--outer B] [--impl ours|triton|torch]
                                                     [--sliced] [--regime R] [--timeline]

OP is softmax, log_softmax, softmax_backward or log_softmax_backward; the tensor is M x N with the op over N (dim -1),
or N x M over dim 0 with --dim 0, or with --outer B as well (B, N, M) over dim 1: a channel softmax of B images of
H x W = M; --sliced: x[:, 1:] of M x (N + 1), into a fresh output (the window path's own out windows); --regime: ours
with that regime forced (run.run_regime), e.g. bands or strided over dim 0; --timeline: each kernel and memset of one
more call (torch.profiler, CUPTI) with its start and duration, the call queued behind a spin kernel after an L2
flush, so that its gaps are the GPU's and not the host's launch time (where a multi-launch plan's fixed cost goes).
benchmarks/ncu.sh runs it under ncu.
"""

import argparse

import torch

from onlinesoftmax.harness.bench import L2_FLUSH_BYTES, SLEEP_CYCLES, gpu_activities
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
    ap.add_argument("--outer", type=int, default=1, help="B > 1: (B, N, M) over dim 1 (--dim 0 only)")
    ap.add_argument("--impl", default="ours", choices=("ours", "triton", "torch"))
    ap.add_argument("--sliced", action="store_true", help="x[:, 1:] of M x (N + 1) (dim -1 only)")
    ap.add_argument("--regime", choices=P.REGIMES, help="ours with this regime forced instead of the plan's")
    ap.add_argument("--timeline", action="store_true", help="print the GPU timeline of one more call")
    args = ap.parse_args()
    if args.sliced and args.dim != -1:
        ap.error("--sliced slices the last dim: --dim -1 only")
    if args.regime and args.impl != "ours":
        ap.error("--regime forces one of ours: --impl ours only")
    if args.outer < 1 or (args.outer > 1 and args.dim != 0):
        ap.error("--outer B batches the dim-0 problem: B >= 1, --dim 0 only")
    M, N = parse_shape(args.shape)
    dtype = parse_dtype(args.dtype)
    if args.dim == -1:
        shape, dim = (M, N), 1
    elif args.outer == 1:
        shape, dim = (N, M), 0
    else:
        shape, dim = (args.outer, N, M), 1
    x = torch.randn(shape, device="cuda", dtype=dtype) if not args.sliced else \
        torch.randn(M, N + 1, device="cuda", dtype=dtype)[:, 1:]
    backward = opdefs.OPS[args.op].backward
    log = args.op.startswith("log")
    y = (torch.log_softmax if log else torch.softmax)(x.float(), dim).to(dtype) if backward else None
    out = torch.empty(shape, device="cuda", dtype=dtype)

    def call():
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

    for _ in range(2):
        call()
    torch.cuda.synchronize()
    if args.timeline:
        timeline(call)
    nbytes = (3 if backward else 2) * x.numel() * x.element_size()  # ideal: 1 read (2 backward) + 1 write
    head = f"{args.impl} {args.op} {args.dtype} {tuple(shape)} dim {args.dim}: ideal bytes {nbytes}"
    if args.impl == "triton":
        print(head)
        return
    plan = E.plan_for(args.op, *((y, x) if backward else (x,)), dim=dim, out=out, regime=args.regime)
    print(f"{head}; plan {plan.regime} {plan.launches}")


def timeline(call) -> None:
    """Print each GPU activity of one call: its start after the call's first activity, and its duration."""
    from torch.profiler import ProfilerActivity, profile

    flush = torch.empty(L2_FLUSH_BYTES, dtype=torch.int8, device="cuda")
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        flush.zero_()
        torch.cuda._sleep(SLEEP_CYCLES)  # the call's launches queue behind it
        call()
        torch.cuda.synchronize()
    acts = gpu_activities(prof)
    spin = max((i for i, (*_, name) in enumerate(acts) if "spin" in name), default=None)
    if spin is None or spin + 1 == len(acts):
        raise SystemExit("timeline: the profiler saw no spin kernel, or nothing after it")
    acts = acts[spin + 1:]
    t0 = acts[0][0]
    print(f"timeline: {len(acts)} activities, {acts[-1][1] - t0:.1f} us from the first start to the last end")
    for a, b, name in acts:
        print(f"  +{a - t0:8.1f} us {b - a:8.1f} us  {name[:100]}")


if __name__ == "__main__":
    main()

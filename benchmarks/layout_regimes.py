"""Time a non-last dim under each regime that can take it (the evidence for plan.py's chan / columns / strided
choice), on the GPU present:

    PYTHONPATH=src python benchmarks/layout_regimes.py [--shape 16 19 512 1024] [--dim 1] [--dtype bfloat16 ...]
        [--regimes chan ...]

For each dtype and op (softmax, log_softmax and their backward) the rules' plan ("rules", the public entry
engines.cuda.run.forward / backward) and every regime forced through run.run_regime (chan, columns, strided; a
refusal is printed as such) are timed with triton.testing.do_bench (median, L2 flushed), beside torch's own op; each
output is checked against torch in fp32 (max |difference|) and given as % of a copy measured in the same run (one
read + one write forward, two reads + one write backward).
"""

from __future__ import annotations

import argparse

import torch
import triton

from onlinesoftmax.engines.cuda import run
from onlinesoftmax.errors import OnlineSoftmaxError
from onlinesoftmax.harness.bench import copy_gbps

REGIMES = ("chan", "columns", "strided", "bands", "period")
OPS = ("softmax", "log_softmax", "softmax_backward", "log_softmax_backward")


def torch_fn(op: str, ins: tuple, dim: int):
    if op == "softmax":
        return lambda: torch.softmax(ins[0], dim)
    if op == "log_softmax":
        return lambda: torch.log_softmax(ins[0], dim)
    data = torch._log_softmax_backward_data if op.startswith("log") else torch._softmax_backward_data
    return lambda: data(ins[1], ins[0], dim, ins[0].dtype)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", type=int, nargs="+", default=[16, 19, 512, 1024])
    ap.add_argument("--dim", type=int, default=1)
    ap.add_argument("--dtype", nargs="+", default=["float32", "bfloat16", "float16"])
    ap.add_argument("--regimes", nargs="*", choices=REGIMES, default=list(REGIMES),
                    help="the regimes forced beside the rules' plan (none: the plan and torch only)")
    args = ap.parse_args()
    copy = copy_gbps("cuda")
    shape, dim = tuple(args.shape), args.dim
    print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}, {shape} over dim {dim}, copy {copy:.0f} GB/s")
    for name in args.dtype:
        dtype = getattr(torch, name)
        x = torch.randn(shape, device="cuda").to(dtype)
        for op in OPS:
            log = op.startswith("log")
            if op.endswith("backward"):
                y = (torch.log_softmax if log else torch.softmax)(x.float(), dim).to(dtype)
                ins = (y, torch.randn_like(x))
            else:
                ins = (x,)
            want = torch_fn(op, tuple(t.float() for t in ins), dim)()
            nbytes = (len(ins) + 1) * x.numel() * x.element_size()
            line = f"{name} {op}:"
            cells = [("rules", None)] + [(r, r) for r in args.regimes]
            for label, regime in cells:
                out = torch.full_like(x, float("nan"))
                try:
                    fn = (lambda: run.run_regime(op, ins, out, dim, regime)) if regime else (
                        (lambda: run.backward(*ins, out, dim, log)) if len(ins) > 1 else
                        (lambda: run.forward(x, out, dim, log)))
                    fn()
                    torch.cuda.synchronize()
                except OnlineSoftmaxError as e:
                    line += f" | {label}: refused ({str(e)[:40]})"
                    continue
                err = (out.float() - want).abs().max().item()  # an element left unwritten (NaN) shows as nan
                ms = triton.testing.do_bench(fn)
                tag = f"{label}={run.plan_for(op, *ins, dim=dim).regime}" if regime is None else label
                line += f" | {tag}: {nbytes / (ms * 1e-3) / 1e9 / copy:.0%} {ms * 1e3:.0f} us (err {err:.1g})"
            ms = triton.testing.do_bench(torch_fn(op, ins, dim))
            line += f" | torch: {nbytes / (ms * 1e-3) / 1e9 / copy:.0%} {ms * 1e3:.0f} us"
            print(line, flush=True)


if __name__ == "__main__":
    main()

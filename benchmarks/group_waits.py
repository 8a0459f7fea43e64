"""How many shares the group regime's CTAs abandon (softmax.cu's os_group_reduce: a CTA that waited
plan.GROUP_WAIT_NS for the rest of its group leaves its share to grp_fix), alone on the device and with K group
kernels at once on streams of their own, and what a call then costs. Each call's workspace is kept and read after
it: a row's arrival word holds its abandoned shares in its high 16 bits. Each stream's last output is checked
against float64; ms_per_call is the wall time of all the calls over their number (the streams overlap).

    PYTHONPATH=src python benchmarks/group_waits.py [--streams 1 4 8] [--calls 20] [--out FILE.csv] [MxN ...]
"""

import argparse
import csv
import time

import torch

from onlinesoftmax.engines.cuda import plan as P
from onlinesoftmax.engines.cuda import run as E
from onlinesoftmax.harness import results
from onlinesoftmax.harness.check import compare_to_reference
from onlinesoftmax.harness.suites import parse_shape

SHAPES = ("64x1000003", "8x1000003", "528x300007")
OPS = ("softmax", "softmax_backward")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("shapes", nargs="*")
    ap.add_argument("--streams", nargs="*", type=int, default=[1, 4, 8])
    ap.add_argument("--calls", type=int, default=20, help="calls a stream")
    ap.add_argument("--out")
    args = ap.parse_args()
    env = results.environment("cuda")
    print(f"{env['device']}: GROUP_WAIT_NS {P.GROUP_WAIT_NS}")
    sink = open(args.out, "w", newline="") if args.out else None  # each row as it is measured: a cut run keeps them
    if sink:
        sink.write("# " + ", ".join(f"{k}={v}" for k, v in env.items()) + f", GROUP_WAIT_NS={P.GROUP_WAIT_NS}\n")
    writer = None
    for shape in args.shapes or SHAPES:
        M, N = parse_shape(shape)
        for op in OPS:
            g = torch.Generator(device="cuda").manual_seed(3)
            x = torch.randn(M, N, device="cuda", generator=g) * 3
            ins = (torch.softmax(x, -1), torch.randn(M, N, device="cuda", generator=g)) if "backward" in op else (x,)
            p = E.plan_for(op, *ins)
            if p.regime != "group":
                print(f"{op} {M}x{N}: plan {p.regime}, skipped")
                continue

            def call(out):
                if "backward" in op:
                    E.backward(ins[0], ins[1], out, 1, False)
                else:
                    E.forward(ins[0], out, 1, False)

            call(torch.empty_like(x))
            torch.cuda.synchronize()
            for k in args.streams:
                streams = [torch.cuda.Stream() for _ in range(k)]
                outs = [torch.full_like(x, float("nan")) for _ in range(k)]
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                with E.KeptWorkspaces() as keep:
                    for _ in range(args.calls):
                        for s, out in zip(streams, outs):
                            s.wait_stream(torch.cuda.current_stream())
                            with torch.cuda.stream(s):
                                call(out)
                torch.cuda.synchronize()
                ms = (time.perf_counter() - t0) * 1e3 / (args.calls * k)
                gone = [P.group_abandoned(ws, M, p.parts) for ws in keep.kept]
                bad = 0
                for out in outs:
                    rep = compare_to_reference(op, ins, out, torch.float32, -1)
                    bad += not rep.ok
                row = dict(op=op, M=M, N=N, G=p.parts, streams=k, calls=len(gone), ms_per_call=round(ms, 4),
                           calls_abandoning=sum(1 for a in gone if a), shares_abandoned=sum(gone),
                           shares=len(gone) * M * p.parts, wrong_outputs=bad)
                print(", ".join(f"{a}={b}" for a, b in row.items()), flush=True)
                if sink:
                    if writer is None:
                        writer = csv.DictWriter(sink, fieldnames=list(row))
                        writer.writeheader()
                    writer.writerow(row)
                    sink.flush()
    if sink:
        sink.close()


if __name__ == "__main__":
    main()

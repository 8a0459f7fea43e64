"""The cluster regime at N = 262144 on the GPU: persistent clusters (as many as fit at once, each looping over rows,
what the op launches) against one cluster per row (grid = M), % of the same-run copy bandwidth.

    PYTHONPATH=src python benchmarks/probe_cluster.py [--once]

--once runs each configuration once and times nothing (for ncu: --kernel-name regex:_row).
"""

import dataclasses
import sys

import torch

from onlinesoftmax.harness.bench import copy_gbps, gbps, median_ms, timing_inputs
from onlinesoftmax.registry import ideal_bytes
from onlinesoftmax.variants import production as P

M, N = 512, 262144


def entries(op, dtype):
    ins = timing_inputs(op, M, N, dtype, "cuda", 0)
    out = torch.empty_like(ins[0])
    key = ("probe", op, dtype)
    e = P._get(key, op, ins, out, 1, None)  # the automatic plan: cluster, persistent grid
    p = e.plan
    assert p.regime == "cluster", p
    (l,) = p.launches
    per_row = P._Entry(dataclasses.replace(p, launches=(dataclasses.replace(l, grid=M),)), e.device, False,
                       tuple(t.stride(0) for t in ins), N)
    return ins, out, {"persistent": e, "cluster per row": per_row}


def main():
    once = "--once" in sys.argv
    copy = None if once else copy_gbps("cuda")
    if copy:
        print(f"copy ceiling {copy:.0f} GB/s")
    for op in ("softmax", "softmax_backward"):
        for dtype in (torch.float32, torch.bfloat16):
            ins, out, es = entries(op, dtype)
            pa, pb = ins[0].data_ptr(), ins[1].data_ptr() if len(ins) > 1 else 0
            for name, e in es.items():
                (l,) = e.plan.launches
                run = lambda: e(pa, pb, out.data_ptr(), out.device)  # noqa: E731
                run()
                torch.cuda.synchronize()
                if once:
                    continue
                ms = median_ms(run, "cuda")
                nbytes = ideal_bytes(op, M, N, ins[0].element_size())
                print(f"{op:18s} {str(dtype)[6:]:9s} C={l.cluster:2d} grid={l.grid:4d} clusters {name:16s} "
                      f"{ms:.3f} ms {100 * gbps(nbytes, ms) / copy:5.1f}% of copy")


if __name__ == "__main__":
    main()

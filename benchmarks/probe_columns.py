"""Softmax over dim 0 of 8192 x 8192 fp32 through the columns kernel in several tilings (lanes x 16-byte row
pieces, rows of threads, slots in shared memory, cluster size), against the automatic plan: what limits it?

    PYTHONPATH=src python benchmarks/probe_columns.py [--once]     (--once: one launch each, for ncu)
"""

import sys

import torch

from onlinesoftmax.harness.bench import copy_gbps, gbps, median_ms
from onlinesoftmax.engines.cuda import plan as P
from onlinesoftmax.engines.cuda import run as E

R = C_ = 8192
# (lanes, smem slots, cluster): registers hold columns_slots (4) rows per thread
TILINGS = [(4, 8, 8), (4, 4, 8), (2, 0, 8), (8, 12, 8), (8, 4, 16), (16, 12, 16), (1, 0, 4)]


def main():
    once = "--once" in sys.argv
    x = torch.randn(R, C_, device="cuda")
    want = torch.softmax(x.double(), 0)
    out = torch.empty_like(x)
    copy = None if once else copy_gbps("cuda")
    auto = E.plan_for("softmax", x, dim=0)
    print("automatic plan:", auto.launches)
    rs = P.columns_slots("softmax", torch.float32, 4)
    for lanes, ss, c in TILINGS:
        rows = P.ROW_MAX_THREADS // lanes
        if c * rows * (rs + ss) < R:
            print(f"lanes={lanes} ss={ss} C={c}: does not cover N")
            continue
        strips = C_ // (4 * lanes)
        launch = P.Launch(f"fwd_cols<0,0,4,{rs},{ss},{c}>", strips, (lanes, rows), c,
                          P.smem_bytes("softmax", 4, P.ROW_MAX_THREADS, ss), sig="strided")
        p = P.Plan("columns", "softmax", torch.float32, 1, R, 4, (launch,), inner=C_, strips=strips, items=strips)
        try:
            e = E._Entry(p, 0, False, (0,), 0)
            run = lambda: e(x.data_ptr(), 0, out.data_ptr(), x.device)  # noqa: E731
            out.fill_(float("nan"))
            run()
            torch.cuda.synchronize()
        except Exception as exc:
            print(f"lanes={lanes} ss={ss} C={c}: {type(exc).__name__}: {exc}")
            continue
        err = (out.double() - want).abs().max().item()
        if once:
            continue
        ms = median_ms(run, "cuda")
        print(f"lanes={lanes:2d} ({lanes * 16:3d} B pieces) rows={rows:3d} smem slots={ss:2d} C={c:2d}: {ms:.3f} ms "
              f"{100 * gbps(2 * R * C_ * 4, ms) / copy:5.1f}% of copy, max err {err:.1e}")


if __name__ == "__main__":
    main()

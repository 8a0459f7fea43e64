"""Long non-last dims (issue 12's layouts whose columns do not fit one CTA): what limits them?

Default: the forward over dim 0 of 8192 x 8192 and channels C = 1000 (fp32, bf16) through the columns kernel in
several tilings (lanes x 16-byte row pieces, rows of threads, slots in shared memory, cluster size), beside the
automatic plan (kernels: benchmarks/precompile.py --layouts).
--strided: the strided kernel (forward and backward) at every geometry (lanes x rows threads, grid) on dim 0 of
8192 x 8192, dim 0 of 4097 x 1001 and channels C = 1000, beside the automatic plan and torch. The geometry is a
launch parameter: one compiled kernel per (op, dtype, access width) serves every row of the table (kernels:
benchmarks/precompile.py --layouts).

    PYTHONPATH=src python benchmarks/probe_columns.py [--once] [--dtype float32 ...] [--op softmax ...]
                                                          (--once: one launch each, for ncu)
    PYTHONPATH=src python benchmarks/probe_columns.py --strided [--dtype bfloat16 ...] [--op softmax_backward ...]
"""

import argparse
import dataclasses
import math

import torch

from onlinesoftmax.harness.bench import copy_gbps, gbps, median_ms
from onlinesoftmax.harness.check import compare_to_reference
from onlinesoftmax.harness.extras import LAYOUT_OPS, LAYOUTS, _layout_impls, _layout_inputs
from onlinesoftmax.harness.suites import SWEEP_DTYPES, parse_dtype
from onlinesoftmax.engines.cuda import plan as P
from onlinesoftmax.engines.cuda import run as E
from onlinesoftmax.intmath import cdiv, pow2ceil
from onlinesoftmax.ops import softmax as ops
from onlinesoftmax.reference import reference

# (layout, dtype) -> tilings (lanes, smem slots, cluster); registers hold columns_slots rows per thread. The long
# layouts whose strips fit a CTA or a cluster with 128-byte row pieces (C = 1000: one CTA of 16 rows a thread in fp32).
TILINGS = {
    ("dim 0 of 8192 x 8192", torch.float32): [(8, 12, 8), (8, 4, 16), (8, 6, 16), (4, 12, 8), (16, 12, 16)],
    ("dim 0 of 8192 x 8192", torch.bfloat16): [(4, 8, 8), (8, 8, 16), (8, 10, 16)],
    ("channels, C = 1000", torch.float32): [(8, 0, 4), (8, 12, 1), (8, 4, 2), (8, 12, 2), (4, 12, 1), (16, 12, 2)],
    ("channels, C = 1000", torch.bfloat16): [(8, 0, 8), (8, 8, 2), (8, 10, 2), (4, 8, 1), (8, 4, 4), (16, 8, 4)],
}
COLUMN_LAYOUTS = {lay[0]: lay for lay in LAYOUTS}
STRIDED_LAYOUTS = [COLUMN_LAYOUTS[label] for label in
                   ("dim 0 of 8192 x 8192", "dim 0 of an odd-width matrix", "channels, C = 1000")]


def column_launches(op: str, dtype, W: int, outer: int, N: int, inner: int, tilings) -> list:
    """(lanes, sslots, C, Launch) of each tiling whose cluster covers N."""
    rs, o, dt = P.columns_slots(op, dtype, W), P.OPS[op].code, P.DT_CODE[dtype]
    out = []
    for lanes, ss, c in tilings:
        rows = P.ROW_MAX_THREADS // lanes
        if c * rows * (rs + ss) >= N:
            strips = cdiv(cdiv(inner, W), lanes)
            out.append((lanes, ss, c, P._launch(outer, f"fwd_cols<{o},{dt},{W},{rs},{ss},{c}>", (strips, 1, 0),
                                                 (lanes, rows), c, P.smem_bytes(op, W, P.ROW_MAX_THREADS, ss),
                                                 sig="strided")))
    return out


def probe_kernels() -> set:
    """Every kernel columns() forces (benchmarks/precompile.py --layouts compiles them)."""
    names = set()
    for (label, dtype), tilings in TILINGS.items():
        _, shape, dim, _ = COLUMN_LAYOUTS[label]
        for op in ("softmax", "log_softmax"):
            names.update(l.kernel for *_, l in column_launches(op, dtype, P.vec_width(dtype), 1, shape[dim],
                                                                  math.prod(shape[dim + 1:]), tilings))
    return names


def columns(once: bool, dtypes, op_names):
    copy = None if once else copy_gbps("cuda")
    for (label, dtype), tilings in TILINGS.items():
        if dtype not in dtypes:
            continue
        _, shape, dim, view = COLUMN_LAYOUTS[label]
        for op in [o for o in op_names if not o.endswith("_backward")]:
            x, = _layout_inputs(op, shape, dim, view, dtype, torch.Generator(device="cuda").manual_seed(0))
            want = reference(op, (x,), dim)
            out = torch.empty_like(x)
            N, inner = shape[dim], x.stride(dim)
            outer = x.numel() // (N * inner)
            auto = E.plan_for(op, x, dim=dim)
            print(f"{op} {label} {str(dtype)[6:]}: automatic plan {auto.regime} {auto.launches[0].kernel} "
                  f"block={auto.launches[0].block} cluster={auto.launches[0].cluster}")
            nbytes = 2 * x.numel() * x.element_size()
            if not once:
                ms = median_ms(lambda: ops.forward(x, dim, op.startswith("log"), "cuda"), "cuda")
                print(f"  {'automatic plan':48s}: {ms:.3f} ms {100 * gbps(nbytes, ms) / copy:5.1f}% of copy")
            W = P.vec_width(dtype)
            for lanes, ss, c, launch in column_launches(op, dtype, W, outer, N, inner, tilings):
                strips = launch.per[0]
                p = P.Plan("columns", op, dtype, outer, N, W, (launch,), inner=inner, strips=strips,
                           items=outer * strips)
                what = f"lanes={lanes:2d} ({lanes * 16:3d} B pieces) smem slots={ss:2d} C={c:2d}"
                try:
                    e = E._Entry(p, 0, False, (0,), 0)
                    run = lambda: e(x.data_ptr(), 0, out.data_ptr(), x)  # noqa: E731
                    out.fill_(float("nan"))
                    run()
                    torch.cuda.synchronize()
                except Exception as exc:
                    print(f"  {what}: {type(exc).__name__}: {exc}")
                    continue
                rep = compare_to_reference(op, (x,), out, dtype, dim, ref=want)
                if once:
                    continue
                ms = median_ms(run, "cuda")
                print(f"  {what}: {ms:.3f} ms {100 * gbps(nbytes, ms) / copy:5.1f}% of copy, {_verdict(rep)}")
            del x, want, out
            torch.cuda.empty_cache()


def _verdict(rep) -> str:
    """The checker's verdict on a whole output against float64 (compare_to_reference's rule)."""
    return f"ok, max abs err {rep.max_abs_err:.1e}" if rep.ok else f"WRONG: {rep.message}"


def strided_geometries(W: int, N: int, inner: int, sms: int) -> list[tuple[int, int, int]]:
    """(lanes, rows, grid cap) for every power-of-2 lanes up to 32 (or the strip's width) and caps of 1, 2 and 4
    CTAs per SM."""
    out = []
    lanes = 1
    while lanes <= min(32, pow2ceil(cdiv(inner, W))):
        rows = min(pow2ceil(N), P.STRIDED_THREADS // lanes)
        out += [(lanes, rows, k * sms) for k in (1, 2, 4)]
        lanes *= 2
    return out


def strided(dtypes, op_names):
    copy = copy_gbps("cuda")
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    print(f"{torch.cuda.get_device_name()}: copy {copy:.0f} GB/s (read + write, same run)")
    for (label, shape, dim, view), dtype, op in ((l, d, o) for l in STRIDED_LAYOUTS for d in dtypes for o in op_names):
        gen = torch.Generator(device="cuda").manual_seed(0)
        ins = _layout_inputs(op, shape, dim, view, dtype, gen)
        want = reference(op, ins, dim)
        nbytes = (1 + len(ins)) * ins[0].numel() * ins[0].element_size()
        bwd = op.endswith("_backward")
        outer = ins[0].numel() // (shape[dim] * ins[0].stride(dim))
        N, inner = shape[dim], ins[0].stride(dim)
        out = torch.empty_like(ins[0])

        def report(what: str, run) -> None:
            out.fill_(float("nan"))
            res = run()
            torch.cuda.synchronize()
            rep = compare_to_reference(op, ins, out if res is None else res, dtype, dim, ref=want)
            ms = median_ms(run, "cuda")
            print(f"  {what:38s} {ms:8.3f} ms {100 * gbps(nbytes, ms) / copy:5.1f}% of copy  {_verdict(rep)}")

        print(f"{op} {label} {'x'.join(map(str, shape))} {str(dtype)[6:]}: outer {outer}, N {N}, inner {inner}")
        impls = _layout_impls(op, dim)  # extras' callables: the public op per backend and torch's
        auto = E.plan_for(op, *ins, dim=dim)
        report(f"auto {auto.regime} {auto.launches[0].block} grid={auto.launches[0].grid}",
               lambda: impls[f"api.cuda.{op}"][1](*ins))
        report("torch", lambda: impls[f"torch.{op}"][1](*ins))
        base = E.plan_for(op, *ins, dim=dim, regime="strided")
        for lanes, rows, cap in strided_geometries(base.W, N, inner, sms):
            strips = cdiv(cdiv(inner, base.W), lanes)
            items = outer * strips
            launch = dataclasses.replace(base.launches[0], grid=min(items, cap), block=(lanes, rows),
                                         per=(strips, 1, cap))
            p = dataclasses.replace(base, launches=(launch,), strips=strips, items=items)
            e = E._Entry(p, 0, False, (0,), 0)
            b = ins[1].data_ptr() if bwd else 0
            report(f"strided W={p.W} lanes={lanes:2d} rows={rows:3d} grid={launch.grid:4d}",
                   lambda: e(ins[0].data_ptr(), b, out.data_ptr(), ins[0]))
        del ins, want, out
        torch.cuda.empty_cache()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--once", action="store_true", help="columns: one launch per tiling (for ncu)")
    ap.add_argument("--strided", action="store_true", help="the strided kernel's geometries on the long layouts")
    ap.add_argument("--dtype", action="append", choices=SWEEP_DTYPES)
    ap.add_argument("--op", action="append", choices=LAYOUT_OPS)
    a = ap.parse_args()
    dtypes = [parse_dtype(d) for d in a.dtype or ("float32", "bfloat16")]
    if a.strided:
        strided(dtypes, a.op or LAYOUT_OPS)
    else:
        columns(a.once, dtypes, a.op or LAYOUT_OPS)


if __name__ == "__main__":
    main()

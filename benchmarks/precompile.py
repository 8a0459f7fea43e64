"""Compile, before a timed run, every production kernel the sweep's shapes will load (NVRTC, one kernel per
module: the run-time cache entries), spread over the CPU cores. Without a GPU it plans for the H200 (132 SMs):
run it here with ONLINESOFTMAX_CACHE pointing at a folder to carry, and the device finds the cubins (when its
NVRTC version is the same; otherwise it compiles them, still in parallel).

    python benchmarks/precompile.py [--workers 16] [--n N|MxN ...]    (default: the sweep's shapes)
    python benchmarks/precompile.py --n 33 63 127 129 199 255 --flat-lanes    (and the flat kernels tune_rows.py
                                                --flat --lanes forces at those N: what its run loads)
    python benchmarks/precompile.py --tests    (instead: what tests/test_gpu_production.py's fixture compiles,
                                                test_gpu_concurrency.py's jobs and every chan and flat kernel: ~750
                                                kernels, ~50 MB, ~3 minutes on 2 cores)
    python benchmarks/precompile.py --layouts    (instead: `onlinesoftmax extras`' layouts, and the strided kernels
                                                probe_columns.py forces there)
    python benchmarks/precompile.py --cross-entropy    (instead: the cross-entropy GPU tests' and benchmark's
                                                        kernels: ~110, ~12 MB, ~40 s on 2 cores)

The device's carry holds 64 MiB with the tree: --tests and --cross-entropy do not fit together; carry one.
"""

import argparse
import contextlib
import itertools
import os
import time

import torch

from onlinesoftmax.engines.cuda import compiled as K
from onlinesoftmax.engines.cuda import plan as P
from onlinesoftmax.harness.suites import (SWEEP_DTYPES, SWEEP_ELEMENTS, SWEEP_N, SWEEP_OPS, parse_dtype, parse_sweep_n,
                                           sweep_shapes)


def sweep_kernels(ns, sms: int) -> set:
    """The sweep's kernels at its shapes (sweep_shapes: ns row lengths or (M, N); by default its lengths and its
    few-row shapes)."""
    names = set()
    for op in SWEEP_OPS:
        for dt in SWEEP_DTYPES:
            dtype = parse_dtype(dt)
            V = P.vec_width(dtype)
            for M, N in sweep_shapes(ns):  # fresh contiguous tensors: aligned; rows N apart (the window path for N % V)
                for flat in (True, False):  # the flat regime's, and what the rules pick without it (tune_rows)
                    p = P.plan(M, N, dtype, op, vec=N % V == 0 or M == 1, window=1, sms=sms, flat=flat)
                    names.update(p.kernels)
                for widest in (8, 4, 2):  # few-row clusters narrowed on the device (run._one_round: its occupancy)
                    names.update(P.plan(M, N, dtype, op, vec=N % V == 0 or M == 1, window=1, sms=sms,
                                        widest=widest).kernels)
    return names


def flat_lanes_kernels(ns) -> set:
    """The flat kernels tune_rows.py --flat --lanes forces at each N of ns (its lane choices), every op and dtype of
    the sweep: other lanes than flat_config's, so not among the sweep's plans."""
    import tune_rows  # benchmarks/, the script's folder

    names = set()
    try:
        for op in SWEEP_OPS:
            for dt in SWEEP_DTYPES:
                for N in ns:
                    for lanes in tune_rows.lane_choices(N):
                        tune_rows.force(lanes=lanes)
                        names.update(P.plan(SWEEP_ELEMENTS // N, N, parse_dtype(dt), op, regime="flat",
                                            flat=True).kernels)
    finally:
        tune_rows.force(None)
    return names


def _test_module(name: str):
    """A GPU test module, imported without a GPU (they skip themselves where torch sees none)."""
    import importlib
    import pathlib
    import sys

    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "tests"))
    seen = torch.cuda.is_available
    torch.cuda.is_available = lambda: True
    try:
        return importlib.import_module(name)
    finally:
        torch.cuda.is_available = seen


@contextlib.contextmanager
def planning_engine(sms: int):
    """The CUDA engine, planning for CPU tensors: its layout and alignment logic as is; availability, the SM count
    and kernel loading stubbed (every kernel resident at GROUP_CTAS_PER_SM CTAs an SM, as the group regime's plans
    assume). Yields the engine module (plan_for on CPU stand-ins gives the device's kernels)."""
    from types import SimpleNamespace

    from onlinesoftmax.engines.cuda import run as E

    stubs = dict(available=lambda: None, _device_index=lambda x, op: 0, sms=lambda device: sms,
                 kernel=lambda *a: SimpleNamespace(fits=True, resident=None, resident_ctas=P.GROUP_CTAS_PER_SM * sms,
                                                   bind=lambda *a, **k: None))
    kept = {k: getattr(E, k) for k in stubs}
    vars(E).update(stubs)
    try:
        yield E
    finally:
        vars(E).update(kept)


def concurrency_kernels(sms: int) -> set:
    """The kernels test_gpu_concurrency's CUDA jobs load."""
    C = _test_module("test_gpu_concurrency")
    names = set()
    with planning_engine(sms) as E:
        for _, shape, dtype, dim, _, view in C.CASES:
            x = C._input(shape, dtype, dim, view, "cpu", None)
            for op in ("softmax", "log_softmax"):
                names.update(E.plan_for(op, x, dim=dim).kernels)
        for _, shape, dtype, dim, _ in C.BACKWARD:  # autograd: log_softmax, then its backward on fresh y and dy
            x = C._input(shape, dtype, dim, None, "cpu", None)
            names.update(E.plan_for("log_softmax", x, dim=dim).kernels)
            names.update(E.plan_for("log_softmax_backward", torch.empty_like(x), torch.empty_like(x), dim=dim).kernels)
    return names


def layout_kernels(sms: int) -> set:
    """The kernels of `onlinesoftmax extras`' layouts (every op and dtype, the plan as shipped) and the strided
    kernel of each, which benchmarks/probe_columns.py --strided forces: shape-only stand-ins (meta tensors); and the
    columns kernels probe_columns.py forces."""
    import probe_columns  # benchmarks/, the script's folder
    from onlinesoftmax.harness.extras import LAYOUT_DTYPES, LAYOUT_OPS, LAYOUTS, layout_tensor

    names = set()
    with planning_engine(sms) as E:
        for (_, shape, dim, view), dtype, op in itertools.product(LAYOUTS, LAYOUT_DTYPES, LAYOUT_OPS):
            x = layout_tensor(shape, view, lambda size: torch.empty(size, dtype=dtype, device="meta"))
            ins = (x,) if not op.endswith("_backward") else (torch.empty_like(x), x)
            out = torch.empty(x.shape, dtype=dtype, device="meta")
            for regime in (None, "strided"):
                names.update(E.plan_for(op, *ins, dim=dim, regime=regime, out=out).kernels)
    return names | probe_columns.probe_kernels()


def test_kernels(sms: int) -> set:
    """The kernels of the production GPU tests' variant shapes (their module's own list), of the concurrency tests'
    jobs, and every chan, flat and period instantiation (the layout tests' columns, the flat regime's tests and
    tune_rows --flat, the period tests)."""
    T = _test_module("test_gpu_production")
    names = {k for k in P.instantiations() if "_chan<" in k or "_flat<" in k or "_period<" in k} | concurrency_kernels(sms)
    for v in T._variants():
        regime = v.name.rsplit("_", 1)[1]
        for dtype in T.DTYPES:
            for M, N in T._shapes(v.op, regime, dtype):
                try:
                    names.update(P.plan(M, N, dtype, v.op, sms=sms, regime=regime, flat=True).kernels)
                except P.Unsupported:
                    pass
    return names


CE_ROWS = (2, 3, 5, 9, 33, 37, 40, 64, 67, 128, 300, 3001, 4099, 8192, 32768)  # tests/test_gpu_cross_entropy.py,
CE_VOCABS = (1000, 32000, 32001, 40000, 50257, 128256, 256000)                   # benchmarks/cross_entropy.py


def cross_entropy_kernels(sms: int) -> set:
    """ce_row for the cross-entropy GPU tests' and benchmark's row counts and vocabularies, every dtype, aligned
    rows and both window paths (the offset and in-place layouts), and the small kernels around it."""
    names = set(P.cross_entropy_helpers())
    for M in CE_ROWS:
        for V in CE_VOCABS:
            for dtype in torch.float32, torch.bfloat16, torch.float16:
                W = P.vec_width(dtype)
                for vec, window in ((V % W == 0, 1), (False, 1), (False, 2)):
                    try:
                        names.update(P.cross_entropy_plan(M, V, dtype, vec=vec, window=window, sms=sms).kernels)
                    except P.Unsupported:
                        pass
    return names


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--n", nargs="*", type=parse_sweep_n, help="N (at M = 2^27 // N) or MxN, as the sweep's --n; "
                    "default: the sweep's shapes")
    ap.add_argument("--tests", action="store_true", help="the production GPU tests' kernels instead of the sweep's")
    ap.add_argument("--cross-entropy", action="store_true", help="the cross-entropy tests' and benchmark's kernels")
    ap.add_argument("--layouts", action="store_true",
                    help="instead: `onlinesoftmax extras`' layouts and probe_columns.py --strided's kernels")
    ap.add_argument("--flat-lanes", action="store_true", help="with the sweep's: tune_rows --flat --lanes's at --n")
    args = ap.parse_args()
    sms = K.sms(0 if torch.cuda.is_available() else None)
    flat_ns = sorted({N for _, N in sweep_shapes(args.n or SWEEP_N)}) if args.flat_lanes else []
    names = (test_kernels(sms) if args.tests else cross_entropy_kernels(sms) if args.cross_entropy
             else layout_kernels(sms) if args.layouts
             else sweep_kernels(args.n, sms) | (flat_lanes_kernels(flat_ns) if flat_ns else set()))
    t = time.perf_counter()
    K.compile_all(names, batch=1, workers=args.workers)
    print(f"{len(names)} kernels ready in {time.perf_counter() - t:.1f} s ({args.workers} workers)")


if __name__ == "__main__":
    main()

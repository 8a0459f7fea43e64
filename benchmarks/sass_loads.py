"""Where a row kernel issues its 16-byte loads, read from its SASS without a GPU: the plan's kernels at each N
(M = 2^27 // N contiguous rows, so that odd N reads through the window, P = 1), each beside its aligned twin (P = 0,
the same geometry), with their registers, spills and the instruction index of every LDG.E.128 of the kernel.

    PYTHONPATH=src python benchmarks/sass_loads.py [--n 4097 12289 ...] [--dtype bfloat16 float32] [--op softmax ...]

A thread's register slots are all loaded before the first is used when the loads sit together at the kernel's
start; a load placed after others' unpacking waits for them (ptxas reuses their registers), and a row kernel then
pays the memory latency more than once.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from onlinesoftmax.engines.cuda import plan as P
from onlinesoftmax.harness.suites import parse_dtype
from onlinesoftmax.runtime import DEFAULT_ARCH
from sass_diff import compile_batch, cuobjdump  # benchmarks/, the script's folder

ENCODED = re.compile(r" 0x[0-9a-f]{16}\b")  # split_sass's instruction lines end with their encoding; labels do not
PACKAGE_ROOT = str(Path(P.__file__).resolve().parents[3])  # the folder that holds the onlinesoftmax package


def loads(name: str) -> tuple[list[int], dict]:
    """The instruction indices of the kernel's LDG.E.128 (its own SASS: the module holds other kernels too) and its
    ptxas report."""
    r = compile_batch(PACKAGE_ROOT, P.SOURCES, [name], DEFAULT_ARCH, cuobjdump())[name]
    body = [line for line in r["sass"].splitlines() if ENCODED.search(line)]
    return [i for i, line in enumerate(body) if "LDG.E.128" in line], r["report"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, nargs="*", default=[4097, 12289, 32001, 100003])
    ap.add_argument("--dtype", nargs="*", default=["bfloat16", "float32"])
    ap.add_argument("--op", nargs="*", default=["softmax", "log_softmax"], choices=P.ENGINE_OPS)
    args = ap.parse_args()
    print(f"{'N':>7s} {'dtype':9s} {'op':22s} {'kernel':34s} regs spill slots  LDG.E.128 at instruction")
    for N in args.n:
        for dt in args.dtype:
            for op in args.op:
                kernel = P.plan((1 << 27) // N, N, parse_dtype(dt), op, vec=False, window=1).kernels[-1]
                head, params = kernel[:-1].split("<")
                params = params.split(",")
                if not head.endswith("_row"):
                    print(f"{N:7d} {dt:9s} {op:22s} {kernel:34s} (not a row kernel)")
                    continue
                for name in (kernel, f"{head}<{','.join(params[:7] + ['0'] + params[8:])}>"):  # aligned twin: P = 0
                    at, r = loads(name)
                    print(f"{N:7d} {dt:9s} {op:22s} {name:34s} {r['registers']:4d} {r['spill_stores']:5d} "
                          f"{params[4]:>5s}  {at}", flush=True)


if __name__ == "__main__":
    main()

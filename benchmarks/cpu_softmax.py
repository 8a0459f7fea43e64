"""The CPU path against torch's own: onlinesoftmax.softmax / log_softmax ("auto" = the "cpu" backend: torch's kernel
plus the masked-row fix-up) and the "reference" backend, next to torch, forward and forward + backward.

    PYTHONPATH=src python benchmarks/cpu_softmax.py [--n 4096] [--repeat 21] [--out cpu.csv]

Each case calls the implementations in turn, one call each (a shared machine's load drifts), and reports the
median time and the ratio to torch's. "masked" inputs have every 64th row all -inf: the fix-up then scans the rows.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

import onlinesoftmax as osm
from onlinesoftmax.harness.results import write_csv


def _impls(log: bool) -> dict:
    ours = osm.log_softmax if log else osm.softmax
    return {
        "torch": torch.log_softmax if log else torch.softmax,
        "ours (auto)": ours,
        "ours (reference)": lambda x, dim: ours(x, dim, backend="reference"),
    }


def _once(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=4096, help="the input is n x n fp32")
    ap.add_argument("--repeat", type=int, default=21, help="calls of each implementation, in turn")
    ap.add_argument("--threads", type=int, help="torch.set_num_threads (default: torch's); on a loaded machine 1 "
                    "avoids timing the intra-op thread pool's waits, which every parallel op pays")
    ap.add_argument("--out", help="CSV path")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    rows = []
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {args.n} x {args.n} fp32, median of "
          f"{args.repeat} calls")
    print(f"{'case':34s} {'impl':18s} {'ms':>9s} {'x torch':>8s}")
    for inputs in ("normal", "masked"):
        x = torch.randn(args.n, args.n)
        if inputs == "masked":
            x[::64] = float("-inf")
        for log in (False, True):
            for mode in ("forward", "forward+backward"):
                xg = x.clone().requires_grad_(mode != "forward")
                dy = torch.randn_like(x)

                def call(fn):
                    if mode == "forward":
                        return lambda: fn(xg, -1)
                    return lambda: torch.autograd.grad(fn(xg, -1), xg, dy)

                calls = {name: call(fn) for name, fn in _impls(log).items()}
                times = {name: [] for name in calls}
                for name, fn in calls.items():  # warm-up
                    fn()
                for _ in range(args.repeat):  # one call of each in turn: a shared machine's load hits all alike
                    for name, fn in calls.items():
                        times[name].append(_once(fn))
                base = statistics.median(times["torch"])
                case = f"{'log_softmax' if log else 'softmax'} {mode} {inputs}"
                for name, ts in times.items():
                    ms = statistics.median(ts) * 1e3
                    ratio = ms / (base * 1e3)
                    print(f"{case:34s} {name:18s} {ms:9.2f} {ratio:8.2f}")
                    rows.append(dict(case=case, impl=name, n=args.n, ms=round(ms, 3), ratio=round(ratio, 3),
                                     threads=torch.get_num_threads(), torch=torch.__version__))
    if args.out:
        write_csv(rows, args.out, list(rows[0]))


if __name__ == "__main__":
    main()

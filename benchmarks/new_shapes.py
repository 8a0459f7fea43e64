"""Host cost of a row count M never seen before (issue 10): a server sees a new batch size at nearly every step.

    python benchmarks/new_shapes.py [--n 32000] [--shapes 4000] [--out results.json]

For each of `--shapes` distinct M (1 .. shapes, shuffled) at N = --n, bf16, log_softmax over the last dim: the
host time of the first call (a new cache key: layout, plan, bound launches; the kernels are compiled and loaded
beforehand, as they are once per geometry, not per M) and of the second (the cached entry),
both measured around the call alone (launches are asynchronous; the GPU is drained every 64 calls, outside the
timing), and torch.log_softmax's host time on the same inputs. Then the launch caches' sizes, the growth of the
process's resident memory over the timed pass, and of the Python heap (tracemalloc) over a second pass of new
keys.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
import tracemalloc
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
import onlinesoftmax as osm  # noqa: E402
from onlinesoftmax.runtime import nvrtc  # noqa: E402
from onlinesoftmax.engines.cuda import plan as P  # noqa: E402
from onlinesoftmax.engines.cuda import run as E  # noqa: E402
from onlinesoftmax.engines.cuda import compiled as K  # noqa: E402


def host_us(fn, x) -> float:
    t = time.perf_counter()
    fn(x)
    return (time.perf_counter() - t) * 1e6


def loop_us(fn, x, calls: int = 20000) -> float:
    """Mean host time per call, calls back to back (the GPU keeps up with a 1 x 1024 kernel)."""
    fn(x)
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(calls):
        fn(x)
    dt = time.perf_counter() - t
    torch.cuda.synchronize()
    return dt / calls * 1e6


def rss_mb() -> float:
    with open("/proc/self/status") as fh:
        return next(int(line.split()[1]) for line in fh if line.startswith("VmRSS")) / 1024


def summary(v: list) -> dict:
    v = sorted(v)
    return {"median_us": statistics.median(v), "p90_us": v[int(0.9 * (len(v) - 1))], "max_us": v[-1], "n": len(v)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=32000)
    ap.add_argument("--shapes", type=int, default=4000)
    ap.add_argument("--out", type=Path)
    a = ap.parse_args()
    big = torch.randn(a.shapes, a.n, device="cuda").to(torch.bfloat16)
    ours = lambda x: osm.log_softmax(x, -1)  # noqa: E731
    theirs = lambda x: torch.log_softmax(x, -1)  # noqa: E731
    Ms = list(range(1, a.shapes + 1))
    random.Random(0).shuffle(Ms)
    # compile and load every kernel the run will need, outside the timing (one-time costs per geometry, not per
    # M); the plan and entry caches stay cold
    sms = K.sms(0)
    plans = [P.plan(M, a.n, torch.bfloat16, "log_softmax", vec=True, sms=sms) for M in Ms]
    K.compile_all({k for p in plans for k in p.kernels}, nvrtc.current_arch(0), batch=1, workers=16)
    for p in plans:
        for l in p.launches:
            K.kernel(l.kernel, 0, l.block, l.smem, l.cluster)
    theirs(big[:7])
    torch.cuda.synchronize()
    rss0 = rss_mb()
    first, second, torch_t = [], [], []
    for i, M in enumerate(Ms):
        x = big[:M]
        first.append(host_us(ours, x))
        second.append(host_us(ours, x))
        torch_t.append(host_us(theirs, x))
        if i % 64 == 63:
            torch.cuda.synchronize()
    torch.cuda.synchronize()
    rss = rss_mb() - rss0
    # the Python heap's growth over the same number of new keys, traced in a second pass (tracemalloc slows every
    # allocation, so it is off while timing): rows of another length, so every key is new again
    other = torch.randn(a.shapes, a.n + 8, device="cuda").to(torch.bfloat16)
    tracemalloc.start()
    mem0 = tracemalloc.get_traced_memory()[0]
    for i, M in enumerate(Ms):
        ours(other[:M])
        if i % 64 == 63:
            torch.cuda.synchronize()
    torch.cuda.synchronize()
    mem = tracemalloc.get_traced_memory()[0] - mem0
    tracemalloc.stop()
    stable = P.stable_rows(K.sms(0))
    small = torch.randn(1, 1024, device="cuda")
    res = {
        "gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "N": a.n, "dtype": "bfloat16",
        "shapes": a.shapes, "stable_rows": stable,
        "new_M_first_call": summary(first),
        "new_M_first_call_stable": summary([t for t, M in zip(first, Ms) if M >= stable]),
        "new_M_first_call_few_rows": summary([t for t, M in zip(first, Ms) if M < stable]),
        "cached_call": summary(second),
        "torch_call": summary(torch_t),
        "small_1x1024_fp32_mean_us": {"ours": loop_us(lambda t: osm.softmax(t, -1), small),
                                       "torch": loop_us(lambda t: torch.softmax(t, -1), small)},
        "cache_sizes": {"forward_rows": len(E._fwd_rows), "forward_entries": len(E._fwd_entries),
                        "plans": len(E._plans), "kernels": len(K._kernels)},
        "cache_limits": {"rows": E.ROWS_CACHE, "entries": E.ENTRY_CACHE, "plans": E.PLAN_CACHE},
        "rss_growth_MB": rss,
        "python_heap_growth_MB_second_pass": mem / 1e6,
    }
    print(json.dumps(res, indent=1))
    if a.out:
        a.out.write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()

"""Try the Triton backend's tuning knobs on the GPU present; print the best setting per problem.

    PYTHONPATH=src python3 benchmarks/tune_triton.py [--quick] > tune.txt

Each problem is (op, dtype, N) with M * N = 2^27 (the sweep's shapes). For each, the knobs of
engines/triton/softmax_rules.py are set, the op is timed with triton.testing.do_bench (median), and the
result checked against torch in fp32. The output is the evidence for the rules in that module.
"""

from __future__ import annotations

import argparse
import itertools
import sys

import torch
from triton.testing import do_bench

from onlinesoftmax.harness.bench import copy_gbps, gbps
from onlinesoftmax.engines.triton import softmax_rules as R
from onlinesoftmax.engines.triton import softmax as K

ELEMENTS = 1 << 27
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


def rows_settings():
    base = R.num_warps_for
    for tile, scale in itertools.product((8 << 10, 16 << 10, 32 << 10), (0.5, 1, 2)):
        yield f"rows tile={tile >> 10}K warps x{scale}", dict(
            regime="rows", ROWS_TILE_BYTES=tile,
            num_warps_for=lambda n, s=scale: max(1, min(32, int(base(n) * s))))


def long_settings(backward: bool, N: int):
    for chunk, per_sm in itertools.product((4096, 8192, 16384), (1, 2)):
        yield f"online chunk={chunk} programs/SM={per_sm}", dict(
            regime="online", ONLINE_CHUNK=chunk, ONLINE_PROGRAMS_PER_SM=per_sm)
    if N <= R.rows_hard_max_n(backward):
        yield "rows (forced)", dict(regime="rows")
    yield "split", dict(regime="split")


def run(op: str, dtype, N: int, setting: dict, copy: float):
    backward = op.endswith("backward")
    log = op.startswith("log")
    M = ELEMENTS // N
    saved = {k: getattr(R, k) for k in setting if k != "regime"}
    try:
        for k, v in setting.items():
            if k != "regime":
                setattr(R, k, v)
        x = torch.randn(M, N, device="cuda", dtype=dtype)
        out = torch.empty_like(x)
        if backward:
            y = (torch.log_softmax if log else torch.softmax)(x.float(), -1).to(dtype)
            dy = torch.randn_like(x)
            fn = lambda: K.softmax_backward(y, dy, out, log=log, regime=setting["regime"])  # noqa: E731
            want = (dy.float() - torch.exp(y.float()) * dy.float().sum(-1, keepdim=True)) if log else \
                y.float() * (dy.float() - (dy.float() * y.float()).sum(-1, keepdim=True))
            nbytes = 3 * x.numel() * x.element_size()
        else:
            fn = lambda: K.softmax_forward(x, out, log=log, regime=setting["regime"])  # noqa: E731
            want = (torch.log_softmax if log else torch.softmax)(x.float(), -1)
            nbytes = 2 * x.numel() * x.element_size()
        fn()
        torch.cuda.synchronize()
        err = (out.float() - want).abs().max().item()
        ms = do_bench(fn, warmup=5, rep=25, return_mode="median")
        return 100 * gbps(nbytes, ms) / copy, err
    except Exception as exc:  # noqa: BLE001 - a setting that does not build is reported, not fatal
        return float("nan"), f"{type(exc).__name__}: {str(exc)[:80]}"
    finally:
        for k, v in saved.items():
            setattr(R, k, v)
        K.OCCUPANCY.clear()


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="fewer problems")
    args = ap.parse_args()
    copy = copy_gbps("cuda")
    print(f"# {torch.cuda.get_device_name()} copy {copy:.0f} GB/s", flush=True)
    problems = [("softmax", d, n) for d in DTYPES for n in (128, 512, 2048, 8192, 32768)]
    problems += [("softmax_backward", d, n) for d in DTYPES for n in (512, 16384)]
    long = [("softmax", d, n) for d in DTYPES for n in (65536, 262144)]
    long += [("softmax_backward", d, n) for d in DTYPES for n in (32768, 131072)]
    if args.quick:
        problems, long = problems[::2], long[::2]
    summary = []
    for op, dname, N in problems + long:
        backward = op.endswith("backward")
        settings = rows_settings() if (op, dname, N) in problems else long_settings(backward, N)
        results = []
        for name, setting in settings:
            pct, err = run(op, DTYPES[dname], N, setting, copy)
            print(f"{op} {dname} N={N}: {name}: {pct:.0f}% err={err}", flush=True)
            results.append((pct if pct == pct else -1, name))
        best = max(results)
        summary.append(f"{op:18s} {dname} N={N:6d}: best {best[0]:.0f}% with {best[1]}")
    print("\n".join(["", "# best per problem"] + summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())

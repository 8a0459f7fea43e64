"""Try the Triton backend's tuning knobs on the GPU present; print the best setting per problem.

    PYTHONPATH=src python3 benchmarks/tune_triton.py [--quick | --columns | --n N ... | --few MxN ...]
        [--only REGEX] [--ops OP ...]

Each problem is (op, dtype, N) with M * N = 2^27 (the sweep's shapes; --columns: a channel softmax over dim 1
of (B, C, 256, 256) with B * C * 65536 = 2^27, and of (8, 1000, 64, 64), through the columns kernels; --n: the
rows regime's settings at these row lengths (odd N among them) for softmax and its backward or --ops: the rules'
own, tiles of one warp (N <= 256), the tiles with and without the 16-byte windows, and the chunked regimes
(N >= 8192); --few: shapes of fewer rows than SMs, every regime that takes them, in microseconds beside torch's
call in the same run, since a few rows are a sliver of the 1 GiB copy; --only: the settings so named alone, beside
the rules'). For each, the knobs of
engines/triton/softmax_rules.py are set, the op is timed with triton.testing.do_bench (median), and the result
checked against torch in fp32. The output is the evidence for the rules in that module.
"""

from __future__ import annotations

import argparse
import itertools
import re
import sys

import torch
from triton.testing import do_bench

from onlinesoftmax.harness.bench import copy_gbps, gbps, timing_inputs
from onlinesoftmax.harness.suites import SWEEP_OPS
from onlinesoftmax.engines.triton import softmax_rules as R
from onlinesoftmax.engines.triton import softmax as K
from onlinesoftmax.ops import softmax as ops
from onlinesoftmax.registry import get

ELEMENTS = 1 << 27
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


def windows_of(N: int, dtype: torch.dtype) -> tuple:
    """The window settings worth timing at N (contiguous rows): on and off where rows N wide can be read through
    windows at all (rules.rows_window_fits), else off alone: the same launch twice."""
    return (True, False) if R.rows_window_fits(N, (N, N), dtype.itemsize) > 1 else (False,)


def rows_setting(tile: int, warps_for, window: bool, **more) -> dict:
    """The rows regime with `tile` bytes of one input a tile (either dtype), warps_for(tile elements) warps, and
    the 16-byte windows on for every N and size or off (rules.ROWS_WINDOW_MIN_N 1 or None; True: wherever
    rules.rows_window takes them, False: those rows read one element at a time): the setting as labelled, not the
    scalar rows' own tile (rules.rows_scalar_tile) nor the backward's 32 warps for long rows
    (rules.ROWS_BACKWARD_FULL_WARPS_LANES) nor the 4 of long unaligned 16-bit rows (rules.rows_16bit_long). Rows
    without windows take two tiles where the rules give them (rules.rows_pieces), and a tile holds at most `tile`
    bytes (a power of two of rows)."""
    windowed = dict(ROWS_WINDOW_MIN_N=1, ROWS_WINDOW_TAIL_MIN_BYTES=0) if window else dict(ROWS_WINDOW_MIN_N=None)
    return dict(regime="rows", ROWS_TILE_BYTES=tile, ROWS_TILE_BYTES_16BIT=tile, **more, **windowed,
                num_warps_for=warps_for, rows_scalar_tile=lambda N, dtype: None, ROWS_BACKWARD_FULL_WARPS_LANES=None,
                ROWS_16BIT_LONG_WARPS=None)


def rows_settings(scales=(0.5, 1, 2), persistent=True, windows=(True,)):
    """Tiles, warps (`scales` times the rules'), and the grid: one tile a program straight to registers (the
    rules', as Liger's and Inductor's kernels run), or persistent (SMs x occupancy programs walking the tiles) with
    the next tile pipelined through shared memory or loading straight to registers; each with the windows on or
    off per `windows` (rows_setting)."""
    base = R.num_warps_for
    grids = {"": {}, " persistent": dict(ROWS_PERSISTENT=True),
             " persistent unpipelined": dict(ROWS_PERSISTENT=True, ROWS_PIPELINE_BYTES=0)}
    for tile, scale, grid, window in itertools.product((8 << 10, 16 << 10, 32 << 10), scales,
                                                       grids if persistent else [""], windows):
        yield f"rows tile={tile >> 10}K warps x{scale}{grid}{'' if window else ' no window'}", rows_setting(
            tile, lambda n, s=scale: max(1, min(32, int(base(n) * s))), window, **grids[grid])


def one_warp_settings():
    """Scalar rows (no 16-byte windows) in tiles of one warp: a warp holds whole rows, BLOCK_N / 32 elements of each
    in a thread, so a row's max and sum take 5 shuffles each over those elements. With more warps Triton lays them
    along a short row (a [32, 128] tile of 8 warps: one column of 16 rows a thread, ~10 shuffles an element and
    shared memory between the warps; ptxas read in docs/tuning.md)."""
    for tile in (1 << 10, 2 << 10, 4 << 10):
        yield f"rows tile={tile >> 10}K one warp no window", rows_setting(tile, lambda n: 1, False)


def long_settings(backward: bool, N: int):
    for kb, per_sm, stages in itertools.product((8, 16, 32), (1, 2), (2, 4)):  # an input's chunk, KB
        yield f"online chunk={kb}KB programs/SM={per_sm} stages={stages}", dict(
            regime="online", ONLINE_CHUNK_BYTES=kb << 10, ONLINE_PROGRAMS_PER_SM=per_sm, ONLINE_STAGES=stages)
    if N <= R.rows_hard_max_n(backward):
        yield "rows (forced)", dict(regime="rows")
    yield "split", dict(regime="split")


def few_settings(backward: bool, N: int):
    """A few rows: the rules' regime, the rows regime where it takes N (one program a tile of rows: few programs),
    and the split regime at each chunk (more, smaller tickets spread a row over the SMs)."""
    yield "rules", {}
    if N <= R.rows_hard_max_n(backward):
        yield "rows (forced)", dict(regime="rows")
    largest = R.SPLIT_MAX_CHUNK // (2 if backward else 1)
    for chunk in (1 << k for k in range(11, largest.bit_length())):  # 2048 .. the largest
        yield f"split chunk={chunk}", dict(regime="split", FORCE_CHUNK=chunk)


def columns_settings(N: int):
    """The columns kernels over a non-last dim of N: the tile kernel and, for N up to 256, the streamed one
    holding the whole dim or tiles of it at several sizes (values of all inputs per thread)."""
    yield "tile kernel", dict(COLS_STREAM_MAX_N=0, COLS_STREAM_BWD_MAX_N=0)
    for whole, tile in ((128, 32), (64, 32), (128, 64), (0, 32), (0, 64)) if N <= 256 else ():
        yield f"stream whole<={whole} tile={tile}", dict(COLS_STREAM_MAX_N=R.COLS_MAX_N,
                                                          COLS_STREAM_BWD_MAX_N=R.COLS_MAX_N,
                                                          COLS_WHOLE_VALUES=whole, COLS_STREAM_VALUES=tile)


def run(op: str, dtype, shape: tuple, dim: int, setting: dict, copy: float):
    """% of copy, the max error against torch in fp32 and the median ms of the op over `dim` of randn(shape), the
    knobs set (a dim other than the last goes through the public launcher: the columns kernels)."""
    backward = op.endswith("backward")
    log = op.startswith("log")
    regime = setting.get("regime")
    last = dim == len(shape) - 1
    saved = {k: getattr(R, k) for k in setting if k != "regime"}
    try:
        for k, v in setting.items():
            if k != "regime":
                setattr(R, k, v)
        x = torch.randn(shape, device="cuda", dtype=dtype)
        out = torch.empty_like(x)
        if backward:
            y = (torch.log_softmax if log else torch.softmax)(x.float(), dim).to(dtype)
            dy = torch.randn_like(x)
            fn = (lambda: K.softmax_backward(y, dy, out, log=log, regime=regime)) if last else \
                (lambda: ops.backward(y, dy, dim, log, "triton"))  # noqa: E731
            want = (dy.float() - torch.exp(y.float()) * dy.float().sum(dim, keepdim=True)) if log else \
                y.float() * (dy.float() - (dy.float() * y.float()).sum(dim, keepdim=True))
            nbytes = 3 * x.numel() * x.element_size()
        else:
            fn = (lambda: K.softmax_forward(x, out, log=log, regime=regime)) if last else \
                (lambda: ops.forward(x, dim, log, "triton"))  # noqa: E731
            want = (torch.log_softmax if log else torch.softmax)(x.float(), dim)
            nbytes = 2 * x.numel() * x.element_size()
        got = fn()  # the launchers return out; the public ones a new tensor
        torch.cuda.synchronize()
        err = (got.float() - want).abs().max().item()
        ms = do_bench(fn, warmup=5, rep=25, return_mode="median")
        return 100 * gbps(nbytes, ms) / copy, err, ms
    except Exception as exc:  # noqa: BLE001 - a setting that does not build is reported, not fatal
        return float("nan"), f"{type(exc).__name__}: {str(exc)[:80]}", float("nan")
    finally:
        for k, v in saved.items():
            setattr(R, k, v)
        K.OCCUPANCY.clear()


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="fewer problems")
    ap.add_argument("--n", type=int, nargs="+", help="the rows regime's settings at these N only")
    ap.add_argument("--columns", action="store_true",
                    help="the columns kernels over dim 1 of (B, C, H, W) channel layouts instead of rows")
    ap.add_argument("--few", nargs="+", metavar="MxN",
                    help="every regime at these shapes of a few rows, in us beside torch's call")
    ap.add_argument("--only", metavar="REGEX", help="the settings whose name matches (re.search) alone")
    ap.add_argument("--ops", nargs="+", choices=SWEEP_OPS, default=("softmax", "softmax_backward"), help="--n's ops")
    ap.add_argument("--dtypes", nargs="+", choices=tuple(DTYPES), help="these dtypes alone (default: all)")
    args = ap.parse_args()
    for name in set(DTYPES) - set(args.dtypes or DTYPES):
        del DTYPES[name]
    copy = copy_gbps("cuda")
    print(f"# {torch.cuda.get_device_name()} copy {copy:.0f} GB/s", flush=True)
    if args.few:
        return few(args.few, copy)
    if args.columns:
        problems = [(op, d, (ELEMENTS // (C * 65536), C, 256, 256), 1) for C in (19, 21, 64, 150)
                    for d in DTYPES for op in SWEEP_OPS]
        problems += [(op, d, (8, 1000, 64, 64), 1) for d in DTYPES for op in SWEEP_OPS]
        settings_for = {p: columns_settings(p[2][1]) for p in problems}
    elif args.n:
        problems = [(op, d, (ELEMENTS // n, n), 1) for n in args.n for d in DTYPES
                    for op in args.ops]
        # fewer warps: fewer cross the row; more (x4: 32 for a 16-bit row of 16384, where the rules' 8 hold the
        # backward's y and dy in 255 registers, ptxas); the one-tile grid (the persistent one lost everywhere,
        # rows_persistent);
        # windows on and off only where N takes them at all (not 127: 127 + V - 1 passes its block in every dtype)
        # tiles of one warp for short rows (a longer row would not fit a warp's registers); the chunked regimes
        # where a row is long (the rows regime's backward holds two inputs of up to 32768 values in registers)
        settings_for = {p: itertools.chain([("rules", {})], one_warp_settings() if p[2][1] <= 256 else (),
                                           rows_settings((0.25, 0.5, 1, 2, 4), persistent=False,
                                                         windows=windows_of(p[2][1], DTYPES[p[1]])),
                                           long_settings(p[0].endswith("backward"), p[2][1])
                                           if p[2][1] >= 8192 else ())
                        for p in problems}
    else:
        rows = [("softmax", d, n) for d in DTYPES for n in (128, 512, 2048, 8192, 32768)]
        rows += [("softmax_backward", d, n) for d in DTYPES for n in (512, 16384)]
        long = [("softmax", d, n) for d in DTYPES for n in (65536, 262144)]
        long += [("softmax_backward", d, n) for d in DTYPES for n in (32768, 131072)]
        if args.quick:
            rows, long = rows[::2], long[::2]
        problems = [(op, d, (ELEMENTS // n, n), 1) for op, d, n in rows + long]
        settings_for = {(op, d, (ELEMENTS // n, n), 1): rows_settings() if (op, d, n) in rows else
                        long_settings(op.endswith("backward"), n) for op, d, n in rows + long}
    summary = []
    for op, dname, shape, dim in problems:
        results = []
        for name, setting in settings_for[(op, dname, shape, dim)]:
            if args.only and name != "rules" and not re.search(args.only, name):
                continue
            pct, err, _ = run(op, DTYPES[dname], shape, dim, setting, copy)
            print(f"{op} {dname} {'x'.join(map(str, shape))} dim {dim}: {name}: {pct:.0f}% err={err}", flush=True)
            results.append((pct if pct == pct else -1, name))
        best = max(results)
        summary.append(f"{op:20s} {dname} {'x'.join(map(str, shape)):>16s}: best {best[0]:.0f}% with {best[1]}")
    print("\n".join(["", "# best per problem"] + summary))
    return 0


def torch_ms(op: str, dtype, shape: tuple) -> float:
    """torch's eager call of the op (the sweep's baseline `torch.<op>`, on the sweep's inputs), do_bench's median as
    run() times ours."""
    inputs = timing_inputs(op, *shape, dtype, "cuda", seed=0)
    call = get(f"torch.{op}").call
    return do_bench(lambda: call(inputs), warmup=5, rep=25, return_mode="median")


def few(shapes: list, copy: float) -> int:
    """--few: each setting of few_settings at each MxN, every op, fp32 and bf16: us a call and torch / ours."""
    summary = []
    for spec, dname, op in itertools.product(shapes, DTYPES, SWEEP_OPS):
        shape = tuple(int(v) for v in spec.lower().split("x"))
        base = torch_ms(op, DTYPES[dname], shape)
        results = []
        for name, setting in few_settings(op.endswith("backward"), shape[1]):
            _, err, ms = run(op, DTYPES[dname], shape, 1, setting, copy)
            print(f"{op} {dname} {spec}: {name}: {1e3 * ms:.1f} us, torch {1e3 * base:.1f} us "
                  f"({base / ms:.2f}x) err={err}", flush=True)
            results.append((base / ms if ms == ms else -1, name))
        best = max(results)
        summary.append(f"{op:20s} {dname} {spec:>12s}: best {best[0]:.2f}x torch with {best[1]}"
                       f" (rules {results[0][0]:.2f}x)")
    print("\n".join(["", "# best per problem"] + summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""onlinesoftmax list | check | bench | ladder | attention-ladder | attention-sweep | sweep | extras | build-native |
inspect | report | plot

Every command enumerates the registry; none keeps its own list of variants. Bad input gives one
`error:` line on stderr and exit code 2, never a traceback.
"""

from __future__ import annotations

import argparse
import fnmatch
import re
import shutil
import signal
import sys
import threading
import time
from pathlib import Path

import torch

from . import registry
from .errors import OnlineSoftmaxError, Unavailable
from .harness import results
from .harness.bench import copy_gbps
from .harness.inputs import KINDS
from .harness.runs import dtype_name, run_checks, run_groups
from .harness.suites import (CPU_BENCH, GPU_LADDER, SWEEP_DTYPES, SWEEP_OPS, Group,
                             parse_dtype, parse_shape, parse_sweep_n, sweep_groups)
from .install import pip_line
from .opdefs import OPS
from .runtime import DEFAULT_ARCH

try:  # the `cli` extra: without it, main() prints the pip line that installs it
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
    from rich.table import Table
except ImportError as exc:
    NO_RICH = f"the onlinesoftmax command needs rich ({exc}); install it with {pip_line('cli')}"
else:
    NO_RICH = None
    # Wide enough for the tables in logs and CI, where there is no terminal to measure.
    console = Console(width=max(140, shutil.get_terminal_size((140, 40)).columns))


class _Steps:
    """A progress bar driven by the harness's step(label, done, total) callback."""

    def __init__(self, title: str):
        self.title, self.task = title, None
        self.bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                            TimeElapsedColumn(), console=console, transient=True)

    def __enter__(self):
        self.bar.__enter__()
        return self

    def __call__(self, label: str, done: int, total: int) -> None:
        if self.task is None:
            self.task = self.bar.add_task(self.title, total=total)
        self.bar.update(self.task, description=label or self.title, completed=done)

    def __exit__(self, *exc):
        return self.bar.__exit__(*exc)


def _select(args) -> list[registry.Variant]:
    chosen = registry.variants(op=getattr(args, "op", None), backend=getattr(args, "backend", None))
    if getattr(args, "variant", None):
        patterns = [n for item in args.variant for n in item.split(",") if n]
        known = [v.name for v in registry.variants()]
        for p in patterns:  # a name or a glob ("cuda.online_*") must match something
            if not fnmatch.filter(known, p):
                registry.get(p)  # raises the clear "unknown variant" error
        chosen = [v for v in chosen if any(fnmatch.fnmatchcase(v.name, p) for p in patterns)]
    if not chosen:
        raise OnlineSoftmaxError("no variant matches the selection (see `onlinesoftmax list`)")
    return chosen


# ---------------------------------------------------------------------------------------- list
def cmd_list(args) -> int:
    table = Table(title="onlinesoftmax variants (ladder order)")
    for col in ("variant", "op", "backend", "rung", "seed", "bytes moved", "here"):
        table.add_column(col)
    for v in _select(args):
        per = v.algo_bytes(1024, 1024, 4) / (1024 * 1024 * 4)
        table.add_row(v.name, v.op, v.backend, v.rung, v.seed_ref, f"{per:.3g} x M*N*size",
                      v.available() or "yes")
    console.print(table)
    return 0


# --------------------------------------------------------------------------------------- check
def cmd_check(args) -> int:
    seed = args.seed if args.seed is not None else int(time.time()) % (1 << 31)
    console.print(f"check seed {seed} (repeat with --seed {seed})")
    shapes = [parse_shape(s) for s in args.shape] if args.shape else None
    dtypes = [parse_dtype(d) for d in args.dtype] if args.dtype else None
    with _Steps("checking") as step:
        run = run_checks(_select(args), seed, shapes, dtypes, args.kind, step=step)
    stats, failures, unavailable = run.stats, run.failures, run.unavailable
    table = Table(title=f"check against float64 (kinds: {', '.join(args.kind or KINDS)})")
    for col in ("variant", "op", "cases passed", "skipped", "worst rel err", "worst abs err", "status"):
        table.add_column(col)
    for s in stats.values():
        status = "[green]PASS" if s.passed == s.run else "[red]FAIL"
        table.add_row(s.variant.name, s.variant.op, f"{s.passed}/{s.run}", str(s.skipped), f"{s.rel:.1e}",
                      f"{s.abs:.1e}", status)
    console.print(table)
    by_reason: dict[str, list[str]] = {}
    for v, reason in unavailable:
        by_reason.setdefault(reason, []).append(v.name)
    for reason, names in by_reason.items():  # one line per reason, the variants as families (cuda.*, api.cuda.*)
        families = ", ".join(dict.fromkeys(n.rsplit(".", 1)[0] + ".*" for n in names))
        console.print(f"[yellow]not checked here[/yellow], {len(names)} variant{'s' * (len(names) > 1)} ({families}): "
                      f"{reason}", highlight=False)
    for name, M, N, dtype, kind, msg in failures[:20]:
        console.print(f"[red]FAIL[/red] {name} {M}x{N} {dtype_name(dtype)} {kind}: {msg}")
    if not stats:
        raise OnlineSoftmaxError("nothing could be checked on this machine")
    return 1 if failures else 0


# ------------------------------------------------------------------------------- bench, ladder
def _kept(rows):
    """A timing run's rows (results.Rows), said to be partial when interrupted; an interrupt before any row: raised
    on (nothing to save)."""
    if rows.interrupted:
        if not rows:
            raise KeyboardInterrupt
        console.print(f"interrupted: the {len(rows)} rows measured before it are kept")
    return rows


def _run_groups(groups, device: str) -> list[dict]:
    with _Steps("timing") as step:
        return _kept(run_groups(groups, device, step=step, say=lambda text: console.print(text, highlight=False)))


def print_groups(rows: list[dict]) -> None:
    groups: dict[str, list[dict]] = {}
    for r in rows:
        groups.setdefault(r["group"], []).append(r)
    for title, members in groups.items():
        table = Table(title=title)
        for col in ("variant", "rung", "ms", "GB/s ideal", "GB/s algo", "% copy", "speed-up",
                    "max err", "ok", "regs", "stack"):
            table.add_column(col, justify="left" if col in ("variant", "rung") else "right")
        for r in members:
            if "time_ms" not in r:
                table.add_row(r["variant"], r["rung"], "-", "-", "-", "-", "-", "-",
                              f"[yellow]{r.get('note', '')}", "", "")
                continue
            speed = f"{r['speedup']:.2f}x"
            if "speedup_cpu" in r:
                speed += f" ({r['speedup_cpu']:.0f}x cpu)"
            table.add_row(r["variant"], r["rung"], f"{r['time_ms']:.3f}", f"{r['gbps_ideal']:.3g}",
                          f"{r['gbps_algo']:.3g}", f"{r['pct_copy']:.0f}%", speed,
                          f"{r['max_abs_err']:.1e}", "[green]yes" if r["ok"] else "[red]NO",
                          str(r.get("registers", "")), str(r.get("stack", "")))
        console.print(table)


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def _save(rows: list[dict], out, kind: str) -> Path:
    """Write the rows; a file already at that path is kept under a dated name, and both are named."""
    if out is None:
        out = Path("results") / f"{kind}-{_slug(rows[0]['device'])[:40]}.csv"
    kept = results.keep_previous(out)
    path = results.write_csv(rows, out)
    console.print(f"results written to {path} ({len(rows)} rows)"
                  + (f"; the file there before is now {kept}" if kept else ""))
    return path


def _plot(csv_path, out=None) -> None:
    from .harness import attention_sweep
    from .harness.plot import plot, png_path

    png = png_path(csv_path, out)
    replaced = png.exists()
    if _is_attention_sweep(csv_path):
        attention_sweep.plot(attention_sweep.read(csv_path), png)
    else:
        plot(csv_path, png)
    console.print(f"plot written to {png}" + (" (replacing the previous plot)" if replaced else ""))


def _require_cuda(command: str) -> None:
    if not torch.cuda.is_available():
        raise Unavailable(f"no CUDA GPU is visible to torch on this machine; `{command}` needs one "
                          "(`onlinesoftmax bench` runs the CPU ladder instead)")


def _status(rows) -> int:
    """A timing command's exit status: 130 when interrupted (its rows so far saved), 1 when an output was wrong."""
    if rows.interrupted:
        return 130
    return 0 if all(r.get("ok", True) for r in rows) else 1


def cmd_ladder(args) -> int:
    _require_cuda("ladder")
    rows = _run_groups(GPU_LADDER, "cuda")
    print_groups(rows)
    _save(rows, args.out, "ladder")
    return _status(rows)


def cmd_attention_ladder(args) -> int:
    _require_cuda("attention-ladder")
    from .harness import attention as attn_table

    shapes = [s for s in attn_table.SHAPES if args.s is None or s[2] in args.s]
    if not shapes:
        raise OnlineSoftmaxError(f"--s: the table's sequence lengths are {sorted({s[2] for s in attn_table.SHAPES})}")
    causals = {"both": (False, True), "no": (False,), "yes": (True,)}[args.causal]
    with _Steps("timing") as step:
        rows = _kept(attn_table.attention_rows(shapes, causals, parse_dtype(args.dtype), step=step))
    groups: dict[str, list[dict]] = {}
    for r in rows:
        groups.setdefault(r["group"], []).append(r)
    for title, members in groups.items():
        table = Table(title=title)
        for col in ("rung", "ms", "TFLOP/s", "% flash", "vs A0", "HBM GB", "L2->SM GB", "extra GB", "regs",
                    "smem B", "spills", "max err", "ok"):
            table.add_column(col, justify="left" if col == "rung" else "right")
        for r in members:
            if "time_ms" not in r:
                table.add_row(r["rung"], *["-"] * 11, f"[yellow]{r.get('note', '')}")
                continue
            model = r.get("extra_model_bytes")
            extra = f"{r['extra_measured_bytes'] / 1e9:.3g}" + ("" if model is None else f" ({model / 1e9:.3g})")
            table.add_row(
                r["rung"], f"{r['time_ms']:.3f}", f"{r['tflops']:.1f}",
                f"{r['pct_flash']:.0f}%" if "pct_flash" in r else "-",
                f"{r['speedup_a0']:.1f}x" if "speedup_a0" in r else "-",
                f"{r['hbm_model_bytes'] / 1e9:.3g}" if "hbm_model_bytes" in r else "-",
                f"{r['l2_model_bytes'] / 1e9:.3g}" if "l2_model_bytes" in r else "-", extra,
                str(r.get("registers", "")), str(r.get("smem", "")),
                str(r["spill_stores"] + r["spill_loads"]) if "spill_stores" in r else "",
                f"{r['max_abs_err']:.1e}", "[green]yes" if r["ok"] else f"[red]NO {r.get('note', '')}")
        console.print(table)
    out = args.out or Path("results") / f"attention-ladder-{_slug(rows[0]['device'])[:40]}.csv"
    kept = results.keep_previous(out)
    path = attn_table.write_csv(rows, out)
    md = path.with_suffix(".md")
    md.write_text(attn_table.markdown(rows))
    console.print(f"results written to {path} and {md} ({len(rows)} rows)"
                  + (f"; the file there before is now {kept}" if kept else ""))
    return _status(rows)


def cmd_attention_sweep(args) -> int:
    _require_cuda("attention-sweep")
    from .harness import attention_sweep as sweep

    with _Steps("timing") as step:
        rows = _kept(sweep.sweep(tuple(args.s or sweep.LENGTHS), tuple(args.d or sweep.DIMS), step=step))
    table = sweep.markdown(rows)
    console.print(table)
    out = args.out or Path("results") / f"attention-sweep-{_slug(rows[0]['device'])[:40]}.csv"
    kept = results.keep_previous(out)
    path = results.write_csv(rows, out, fields=sweep.FIELDS)
    path.with_suffix(".md").write_text(table + "\n" + sweep.autotuned())
    console.print(f"results written to {path}, its .md and .png ({len(rows)} rows)"
                  + (f"; the file there before is now {kept}" if kept else ""))
    _plot(path)
    return _status(rows)


def cmd_bench(args) -> int:
    if torch.cuda.is_available() and not args.cpu:
        return cmd_ladder(args)
    groups = CPU_BENCH
    if args.shape:
        M, N = parse_shape(args.shape)
        groups = [Group(f"CPU ladder, {M} x {N} fp32", "softmax", M, N, ("numpy",))]
    rows = _run_groups(groups, "cpu")
    print_groups(rows)
    _save(rows, args.out, "bench")
    return _status(rows)


def cmd_sweep(args) -> int:
    _require_cuda("sweep")
    ns = [parse_sweep_n(n) for n in args.n] if args.n else None
    groups = sweep_groups(tuple(args.op or SWEEP_OPS), tuple(args.dtype or SWEEP_DTYPES), ns, tuple(args.backend or ()),
                          compare=not args.ours_only)
    rows = _run_groups(groups, "cuda")
    print_sweep(rows)
    _plot(_save(rows, args.out, "sweep"))
    return _status(rows)


def print_sweep(rows: list[dict]) -> None:
    """Per (op, dtype): one line per shape, % of copy bandwidth per implementation."""
    panels: dict[tuple, list[dict]] = {}
    for r in rows:
        panels.setdefault((r["op"], r["dtype"]), []).append(r)
    for (op, dtype), members in panels.items():
        names = list(dict.fromkeys(r["variant"] for r in members))
        table = Table(title=f"{op} {dtype}: % of copy bandwidth (ideal bytes); ! = wrong output")
        table.add_column("M x N")
        for n in names:
            table.add_column(n, justify="right")
        shapes = list(dict.fromkeys((r["M"], r["N"]) for r in members))
        for M, N in shapes:
            cells = []
            for n in names:
                r = next((r for r in members if (r["M"], r["N"]) == (M, N) and r["variant"] == n), None)
                if r is None or "time_ms" not in r:
                    cells.append("-")
                else:
                    cells.append(f"{r['pct_copy']:.0f}%" + ("" if r["ok"] else " !"))
            table.add_row(f"{M} x {N}", *cells)
        console.print(table)


def cmd_extras(args) -> int:
    """The layouts (non-last dims, sliced views; every op and dtype) and the host overhead per eager call
    (harness/extras.py)."""
    from .harness.extras import LAYOUTS, host_rows, layout_rows

    layouts = [] if args.host_only else [lay for lay in LAYOUTS
                                         if not args.layout or any(t in lay[0] for t in args.layout)]
    if not layouts and not args.host_only:
        raise OnlineSoftmaxError(f"extras: no layout matches {args.layout}; layouts: "
                                 f"{', '.join(lay[0] for lay in LAYOUTS)}")
    _require_cuda("extras")
    env = results.environment("cuda")
    copy = copy_gbps("cuda")
    console.print(f"{env['device']}: copy ceiling {copy:.0f} GB/s (read + write, same run)")
    with _Steps("timing") as step:
        rows = layout_rows(copy, layouts=layouts, step=step) + ([] if args.no_host else host_rows())
        rows = [dict(r, **env) for r in rows]
    table = Table(title="layouts (non-last dims, sliced views) and host overhead per eager call")
    for col in ("group", "variant", "how", "kernel", "% copy / wall", "host overhead", "ok"):
        table.add_column(col, justify="left" if col in ("group", "variant", "how") else "right")
    for r in rows:
        if "time_ms" not in r:
            table.add_row(r["group"], r["variant"], r["rung"], "-", "-", "-", f"[red]{r.get('note', '')}")
        elif "host_us" in r:
            table.add_row(r["group"], r["variant"], r["rung"], f"{r['kernel_us']:.1f} µs", f"{r['wall_us']:.1f} µs",
                          f"{r['host_us']:.1f} µs", "[green]yes" if r["ok"] else "[red]NO")
        else:
            table.add_row(r["group"], r["variant"], r["rung"], f"{r['time_ms']:.3f} ms", f"{r['pct_copy']:.0f}%",
                          "", "[green]yes" if r["ok"] else "[red]NO")
    console.print(table)
    _save(rows, args.out, "extras")
    return 0 if all(r.get("ok", True) for r in rows) else 1


# ------------------------------------------------------------------------------ inspect, plot
ARCH = re.compile(r"sm_(\d+)[af]?")


def _arch(text: str) -> str:
    """argparse type of --arch: sm_XY (compute capability X.Y), optionally with NVRTC's a/f suffix."""
    if not ARCH.fullmatch(text):
        raise argparse.ArgumentTypeError(f"{text!r} is not a GPU architecture; expected sm_XY for compute "
                                         "capability X.Y, e.g. sm_90 (H100, H200), sm_80 (A100), sm_120 (RTX 5080)")
    return text


def _nvrtc_archs() -> list[int]:
    """The compute capabilities this NVRTC compiles for (XY of sm_XY)."""
    from cuda.bindings import nvrtc

    return [int(a) for a in nvrtc.nvrtcGetSupportedArchs()[1]]


def cmd_build_native(args) -> int:
    """Compile runtime/native.cpp (the eager hot path's lookup, allocation and launch in one C++ call) into the
    cache."""
    import time

    from .runtime import native

    console.print(f"building {native.name()} into {native.directory()} (g++ and ninja; about a minute, once)")
    t0 = time.perf_counter()
    try:
        native.build(verbose=args.verbose)
    except Exception as e:  # the builder's own errors: no compiler, no ninja, a failed compile
        raise OnlineSoftmaxError(f"build-native: {type(e).__name__}: {e}") from None
    console.print(f"built in {time.perf_counter() - t0:.0f} s; every process of this torch and Python loads it from the "
                  f"cache ({native.ENV}=0: none)")
    return 0


def cmd_inspect(args) -> int:
    from .runtime import compile_unavailable
    from .ladder.cuda import inspect_rows

    reason = compile_unavailable()
    if reason:
        raise Unavailable(f"inspect compiles with NVRTC: {reason}")
    supported = _nvrtc_archs()
    if int(ARCH.fullmatch(args.arch).group(1)) not in supported:
        raise OnlineSoftmaxError(f"--arch {args.arch}: this NVRTC compiles for "
                                 f"{', '.join(f'sm_{a}' for a in supported)}")
    rows = inspect_rows(arch=args.arch)
    table = Table(title=f"ptxas report, NVRTC for {args.arch} (no GPU needed)")
    for col in ("variant", "kernel", "regs", "smem B", "stack B", "spill st", "spill ld"):
        table.add_column(col, justify="left" if col in ("variant", "kernel") else "right")
    for r in rows:
        table.add_row(r["variants"], str(r["kernel"]), str(r["registers"]), str(r.get("smem", "")),
                      str(r["stack"]), str(r["spill_stores"]), str(r["spill_loads"]))
    console.print(table)
    return 0


def cmd_plot(args) -> int:
    _plot(args.csv, args.out)
    return 0


def _is_attention_sweep(csv_path) -> bool:
    """A CSV written by attention-sweep (its own columns), told apart by its header."""
    try:
        with open(csv_path, encoding="utf-8") as f:
            return "ours_fwd" in f.readline().split(",")
    except (OSError, UnicodeDecodeError):
        return False  # the row-op reader says what is wrong


def cmd_report(args) -> int:
    from .harness import attention_sweep
    from .harness.report import ab_markdown, grid_markdown, ladder_markdown, sweep_markdown, targets_markdown

    if args.targets or args.grid or args.ab:  # one table over every CSV given (a sweep's per dtype; ab.sh's per tree)
        print((targets_markdown if args.targets else grid_markdown if args.grid else ab_markdown)(args.csv))
        return 0
    for path in args.csv:
        if args.attention or _is_attention_sweep(path):
            print(attention_sweep.markdown(attention_sweep.read(path)))
        else:
            print((sweep_markdown if args.sweep else ladder_markdown)(path))
    return 0


class _Parser(argparse.ArgumentParser):
    """Bad arguments: one `error:` line and exit 2 (argparse's default adds the usage lines)."""

    def error(self, message):
        print(f"error: {self.prog}: {message} (see `{self.prog} --help`)", file=sys.stderr)
        sys.exit(2)


def _out_file(text: str) -> Path:
    """argparse type of --out: a file in a directory that exists, checked before any work is done."""
    path = Path(text)
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{text} is a directory; give a file name")
    if not path.parent.is_dir():
        raise argparse.ArgumentTypeError(f"{text}: the directory {path.parent} does not exist")
    return path


def _sweep_length(text: str) -> int:
    """argparse type of attention-sweep's --s: B = 16384 / S sequences of S tokens, so S divides 16384."""
    from .harness.attention_sweep import TOKENS

    try:
        s = int(text)
    except ValueError:
        s = 0
    if s < 1 or TOKENS % s:
        raise argparse.ArgumentTypeError(f"{text!r}: a sequence length that divides the sweep's {TOKENS} tokens")
    return s


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="onlinesoftmax", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="command", required=True)

    def out_option(sp):
        sp.add_argument("--out", type=_out_file, help=f"results CSV (default: results/{sp.prog.split()[-1]}-<device>.csv; "
                                                      "a file already there is kept under a dated name)")

    def selection(sp):
        sp.add_argument("--backend", choices=["numpy", "cuda", "triton"])
        sp.add_argument("--op", choices=list(OPS))
        sp.add_argument("--variant", action="append",
                        help="variant name(s) or globs (cuda.online_*), comma separated")

    sp = sub.add_parser("list", help="every variant with its rung, backend, seed reference, bytes model")
    selection(sp)
    sp.set_defaults(fn=cmd_list)

    sp = sub.add_parser("check", help="every variant available here against float64, every input kind")
    selection(sp)
    sp.add_argument("--kind", action="append", choices=list(KINDS))
    sp.add_argument("--shape", action="append", help="MxN (repeatable); default: the check shapes")
    sp.add_argument("--dtype", action="append", help="float32 | float16 | bfloat16 (repeatable)")
    sp.add_argument("--seed", type=int, help="default: fresh from the clock, printed")
    sp.set_defaults(fn=cmd_check)

    sp = sub.add_parser("bench", help="the main job: the GPU ladder on a GPU, else the CPU ladder")
    sp.add_argument("--cpu", action="store_true", help="run the CPU ladder even if a GPU is present")
    sp.add_argument("--shape", help="MxN for the CPU ladder (default: 1024x4096 and 256x65536)")
    out_option(sp)
    sp.set_defaults(fn=cmd_bench)

    sp = sub.add_parser("ladder", help="every CUDA rung at the seeds' shapes (needs a GPU)")
    out_option(sp)
    sp.set_defaults(fn=cmd_ladder)

    sp = sub.add_parser("attention-ladder", help="the attention rungs A0-A2 and torch SDPA's math, flash and cuDNN "
                                                 "backends at S in {1024, 4096} x D in {64, 128} (needs a GPU)")
    sp.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16"])
    sp.add_argument("--causal", default="both", choices=["both", "no", "yes"])
    sp.add_argument("--s", type=int, action="append", help="only this sequence length (1024 or 4096; repeatable)")
    out_option(sp)
    sp.set_defaults(fn=cmd_attention_ladder)

    sp = sub.add_parser("attention-sweep", help="onlinesoftmax.attention forward and backward beside SDPA's flash, "
                                                "cuDNN and efficient backends, bf16, S x D x causal x GQA (needs a GPU)")
    sp.add_argument("--s", type=_sweep_length, action="append",
                    help="sequence length(s), dividing the sweep's 16384 tokens (default 1024, 4096, 16384)")
    sp.add_argument("--d", type=int, action="append", choices=[64, 128], help="head dim(s) (default both)")
    out_option(sp)
    sp.set_defaults(fn=cmd_attention_sweep)

    sp = sub.add_parser("sweep", help="ours vs torch, torch.compile, Triton, Liger over N and dtypes (GPU)")
    sp.add_argument("--op", action="append", choices=list(SWEEP_OPS))
    sp.add_argument("--dtype", action="append", choices=list(SWEEP_DTYPES))
    sp.add_argument("--n", action="append",
                    help="row length(s) N at M*N = 2^27, or MxN shapes; default 128..262144 and few-row shapes")
    sp.add_argument("--backend", action="append", choices=["cuda", "triton"],
                    help="our backend(s) to time (default: all); baselines are always timed")
    sp.add_argument("--ours-only", action="store_true", help="time our backends only (no baselines, no ladder rung)")
    out_option(sp)
    sp.set_defaults(fn=cmd_sweep)

    sp = sub.add_parser("extras", help="every op and dtype over non-last dims (dim 0 of 8192x8192, channel "
                                       "softmax) and sliced views; host overhead per eager 1x1024 call (GPU)")
    sp.add_argument("--layout", action="append", metavar="TEXT",
                    help="only the layouts whose label contains TEXT (repeatable; e.g. 'C = 19'); default: all")
    host = sp.add_mutually_exclusive_group()
    host.add_argument("--no-host", action="store_true", help="skip the host-overhead rows")
    host.add_argument("--host-only", action="store_true", help="only the host-overhead rows")
    out_option(sp)
    sp.set_defaults(fn=cmd_extras)

    sp = sub.add_parser("build-native", help="compile the eager hot path's C++ helper (lookup, allocation and launch "
                                             "in one call; g++ and ninja) into the cache")
    sp.add_argument("--verbose", action="store_true", help="show the compiler's output")
    sp.set_defaults(fn=cmd_build_native)

    sp = sub.add_parser("inspect", help="registers, shared memory, stack and spills of every CUDA kernel")
    sp.add_argument("--arch", default=DEFAULT_ARCH, type=_arch,
                    help="GPU architecture to compile for, sm_XY for compute capability X.Y (default: sm_90, the H200)")
    sp.set_defaults(fn=cmd_inspect)

    sp = sub.add_parser("report",
                        help="Markdown tables from results CSVs (ladder layout, or --sweep, --targets, --grid, --ab)")
    sp.add_argument("csv", nargs="+", help="results CSVs written by bench, ladder, sweep, extras or attention-sweep")
    how = sp.add_mutually_exclusive_group()
    how.add_argument("--sweep", action="store_true", help="one table per (op, dtype), %% copy per implementation")
    how.add_argument("--attention", action="store_true",
                     help="an attention-sweep CSV: TFLOP/s per implementation, ours over flash and cuDNN (the "
                          "default for such a CSV)")
    how.add_argument("--targets", action="store_true",
                     help="sweep CSVs against the production ops' targets on the H200 (issue 12): forward >= 92%%, "
                          "backward >= 96%% of the copy bandwidth at every M x N = 2^27 shape, odd N within 3 points "
                          "of its power-of-two neighbour, at least as fast as torch, >= 4x torch at the few-row shapes "
                          "1 x 262144 and 32 x 131072")
    how.add_argument("--grid", action="store_true",
                     help="sweep CSVs as one table: a row per N at M x N = 2^27, forward and backward %% of copy per "
                          "dtype (the lower of torch's time over ours in brackets), the misses marked; --targets "
                          "and --grid read the CUDA backend's rows, or the one backend a `sweep --backend` CSV holds")
    how.add_argument("--ab", action="store_true",
                     help="one sweep of ours over several source trees (benchmarks/ab.sh's ab-NAME.csv, the base "
                          "first): %% of copy side by side, each tree's change against the base (long rows and few "
                          "rows apart) and the long cells at target per tree")
    sp.set_defaults(fn=cmd_report)

    sp = sub.add_parser("plot", help="GB/s against N from a results CSV (PNG): a line per variant and problem size")
    sp.add_argument("csv", help="a results CSV written by bench, ladder, sweep or attention-sweep")
    sp.add_argument("--out", type=_out_file, help="PNG path (default: the CSV's path with .png)")
    sp.set_defaults(fn=cmd_plot)
    return p


def _terminated(signum, frame):
    raise KeyboardInterrupt  # SIGTERM (a `timeout`, a job's end) as Ctrl-C: a timing run saves what it measured


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    if threading.current_thread() is not threading.main_thread():
        return _main(args)
    before = signal.signal(signal.SIGTERM, _terminated)
    try:
        return _main(args)
    finally:  # None: a handler not installed from Python, which cannot be put back; the default then
        signal.signal(signal.SIGTERM, before if before is not None else signal.SIG_DFL)


def _main(args) -> int:
    if NO_RICH:
        print(f"error: {NO_RICH}", file=sys.stderr)
        return 2
    try:
        return args.fn(args)
    except (OnlineSoftmaxError, OSError) as exc:  # OSError: a file that cannot be read or written
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())

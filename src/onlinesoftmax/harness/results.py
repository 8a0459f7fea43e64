"""Results are data: one long CSV, a row per (op, variant, M, N, dtype, device, versions, commit).

Tables and plots are drawn from these files, never from live numbers.
"""

from __future__ import annotations

import csv
import datetime as _dt
import os
import platform
import subprocess
from importlib import metadata
from pathlib import Path
from typing import Optional

import torch

from ..errors import OnlineSoftmaxError

FIELDS = (
    "op", "variant", "backend", "rung", "M", "N", "dtype",
    "time_ms", "queued_ms", "ideal_bytes", "algo_bytes", "gbps_ideal", "gbps_algo", "pct_copy",
    "copy_gbps", "copy_min", "copy_max",
    "speedup", "speedup_cpu", "wall_us", "kernel_us", "host_us", "rel_err", "max_abs_err", "ok",
    "registers", "stack", "spill_stores", "spill_loads",
    "group", "note", "device", "torch", "triton", "cuda_core", "numpy", "python", "commit", "timestamp",
)


def _version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return ""


def git_commit() -> str:
    """Short commit of the source tree this package runs from: $ONLINESOFTMAX_COMMIT when set
    (a copy of the tree without .git, e.g. on a lent GPU machine), else git's ("" if neither)."""
    if os.environ.get("ONLINESOFTMAX_COMMIT"):
        return os.environ["ONLINESOFTMAX_COMMIT"]
    here = Path(__file__).resolve().parent
    try:
        out = subprocess.run(["git", "-C", str(here), "rev-parse", "--short", "HEAD"],
                             capture_output=True, text=True, timeout=5)
        dirty = subprocess.run(["git", "-C", str(here), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.SubprocessError):
        return ""
    commit = out.stdout.strip()
    return f"{commit}+dirty" if commit and dirty.stdout.strip() else commit


def device_name(device: str) -> str:
    if device == "cuda":
        return torch.cuda.get_device_name()
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return f"cpu {cpu_model()} ({platform.machine()}, {cores} cores)"


def cpu_model() -> str:
    """The CPU's model name: /proc/cpuinfo on Linux (platform.processor() is empty there), else platform's."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() in ("model name", "Model", "cpu model") and value.strip():
                return value.strip()
    except OSError:
        pass
    return platform.processor() or "model unknown"


class Rows(list):
    """A timing run's result rows; interrupted: the run stopped early (KeyboardInterrupt: Ctrl-C, or SIGTERM where
    the command line turns it into one) and holds the measurements made before."""

    interrupted = False

    @classmethod
    def collect(cls, made) -> "Rows":
        """The rows an iterable makes (a timing loop's generator), one by one; an interrupt stops it, and the rows
        made before come back, marked interrupted."""
        rows = cls()
        try:
            for row in made:
                rows.append(row)
        except KeyboardInterrupt:
            rows.interrupted = True
        return rows


def environment(device: str) -> dict:
    """The columns that say where and with what a row was measured."""
    return {
        "device": device_name(device),
        "torch": torch.__version__,
        "triton": _version("triton"),
        "cuda_core": _version("cuda-core"),
        "numpy": _version("numpy"),
        "python": platform.python_version(),
        "commit": git_commit(),
        "timestamp": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
    }


def copy_text(gbps: float, lo: Optional[float] = None, hi: Optional[float] = None) -> str:
    """'copy 4223 GB/s', with the range of its rounds where known: 'copy 16.1 GB/s (range 15.8-16.3)'.
    Below 100 GB/s (a CPU) three significant digits, so a narrow range still reads as one."""
    def f(x: float) -> str:
        return f"{x:.0f}" if x >= 100 else f"{x:.3g}"

    return f"copy {f(gbps)} GB/s" + (f" (range {f(lo)}–{f(hi)})" if lo is not None and hi is not None else "")


def keep_previous(path) -> Optional[Path]:
    """Move an existing results file aside, so a new run never overwrites it: `name.csv` becomes
    `name.<its modification time, UTC>.csv`. Returns where it went (None if there was nothing)."""
    path = Path(path)
    if not path.exists():
        return None
    stamp = _dt.datetime.fromtimestamp(path.stat().st_mtime, _dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    kept = path.with_name(f"{path.stem}.{stamp}{path.suffix}")
    n = 1
    while kept.exists():
        n += 1
        kept = path.with_name(f"{path.stem}.{stamp}-{n}{path.suffix}")
    return path.rename(kept)


def write_csv(rows: list[dict], path, fields=FIELDS) -> Path:
    """The rows as CSV with the columns `fields` (the row-op tables' by default); other keys are left out."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=fields, extrasaction="ignore")
        writer.writeheader()
        for row in rows:
            writer.writerow({k: _fmt(row.get(k, "")) for k in fields})
    return path


def _fmt(value):
    if isinstance(value, float):
        return f"{value:.6g}"
    return value


REQUIRED = ("op", "variant", "M", "N", "dtype", "time_ms", "device")  # what every table and plot reads
MADE_BY = "results CSVs come from bench, ladder, sweep and extras"


def read_csv(path) -> list[dict]:
    """The rows of a results CSV (as written by `write_csv`), or an OnlineSoftmaxError saying why
    `path` is not one: missing, a directory, not CSV text, other columns, or no rows."""
    path = Path(path)
    if path.is_dir():
        raise OnlineSoftmaxError(f"{path} is a directory; give a results CSV such as results/bench-<device>.csv")
    if not path.is_file():
        raise OnlineSoftmaxError(f"{path}: no such results file")
    try:
        with path.open(newline="", encoding="utf-8") as f:
            reader = csv.DictReader(f)
            columns = reader.fieldnames
            rows = list(reader)
    except (UnicodeDecodeError, csv.Error) as exc:
        raise OnlineSoftmaxError(f"{path}: not a results CSV ({exc})") from None
    if columns is None:
        raise OnlineSoftmaxError(f"{path} is empty; {MADE_BY}")
    missing = [c for c in REQUIRED if c not in columns]
    if missing:
        raise OnlineSoftmaxError(f"{path}: not a results CSV (no column {', '.join(missing)}); {MADE_BY}")
    if not rows:
        raise OnlineSoftmaxError(f"{path}: a results CSV without rows")
    return rows

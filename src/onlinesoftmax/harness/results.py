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

import torch

FIELDS = (
    "op", "variant", "backend", "rung", "M", "N", "dtype",
    "time_ms", "queued_ms", "ideal_bytes", "algo_bytes", "gbps_ideal", "gbps_algo", "pct_copy", "copy_gbps",
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
    return f"cpu {platform.machine()} ({platform.processor() or 'unknown'})"


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


def write_csv(rows: list[dict], path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=FIELDS, extrasaction="ignore")
        writer.writeheader()
        for row in rows:
            writer.writerow({k: _fmt(row.get(k, "")) for k in FIELDS})
    return path


def _fmt(value):
    if isinstance(value, float):
        return f"{value:.6g}"
    return value


def read_csv(path) -> list[dict]:
    with Path(path).open(newline="") as f:
        return list(csv.DictReader(f))

"""GB/s against N per variant, one panel per (op, dtype), the copy ceiling as a line. From a CSV."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

from ..errors import OnlineSoftmaxError
from .results import read_csv


def plot(csv_path, png_path=None) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in read_csv(csv_path) if r.get("gbps_ideal")]
    if not rows:
        raise OnlineSoftmaxError(f"{csv_path}: no timed rows to plot")
    panels = defaultdict(list)
    for r in rows:
        panels[(r["op"], r["dtype"])].append(r)
    fig, axes = plt.subplots(len(panels), 1, figsize=(9, 4.2 * len(panels)), squeeze=False)
    for ax, ((op, dtype), group) in zip(axes[:, 0], sorted(panels.items())):
        lines = defaultdict(list)
        for r in group:
            lines[r["variant"]].append((int(r["N"]), float(r["gbps_ideal"])))
        for name, pts in lines.items():
            pts.sort()
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=name)
        ceiling = max(float(r["copy_gbps"]) for r in group if r.get("copy_gbps"))
        ax.axhline(ceiling, color="black", linestyle="--", label=f"copy {ceiling:.0f} GB/s")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("N (row length)")
        ax.set_ylabel("GB/s (ideal bytes)")
        ax.set_title(f"{op} {dtype} on {group[0]['device']}")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    png_path = Path(png_path) if png_path else Path(csv_path).with_suffix(".png")
    fig.savefig(png_path, dpi=110)
    plt.close(fig)
    return png_path

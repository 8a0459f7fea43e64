"""GB/s against N, one panel per (op, dtype), the copy ceiling as a line. From a CSV.

A line joins one variant's shapes of one problem size M·N: the sweep's shapes at M·N = 2^27 (N rises
as M falls) form one line, and a shape of another size (the few-row shapes, each CPU bench table)
is a family of its own, drawn with its own marker. The copy ceiling is the median of its rounds;
where the CSV records their range (copy_min, copy_max), a band shows it.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from pathlib import Path

from ..errors import OnlineSoftmaxError, Unavailable
from ..install import pip_line
from .results import copy_text, read_csv

MARKERS = "osD^vP*X<>"


def png_path(csv_path, png_path=None) -> Path:
    """Where `plot` writes: `png_path`, else the CSV's path with .png."""
    return Path(png_path) if png_path else Path(csv_path).with_suffix(".png")


def _size_label(size: int, shapes: set) -> str:
    """A family's legend entry: its one shape, or its size M·N (as a power of 2 where it is one)."""
    if len(shapes) == 1:
        M, N = next(iter(shapes))
        return f"{M} × {N}"
    power = size.bit_length() - 1
    return f"M·N = 2^{power}" if size == 1 << power else f"M·N = {size}"


def plot(csv_path, png=None) -> Path:
    try:
        import matplotlib
    except ImportError as exc:
        raise Unavailable(f"plots need matplotlib ({exc}); install it with {pip_line('cli')}") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D

    rows = [r for r in read_csv(csv_path) if r.get("gbps_ideal")]
    if not rows:
        raise OnlineSoftmaxError(f"{csv_path}: no timed rows to plot")
    panels = defaultdict(list)
    for r in rows:
        panels[(r["op"], r["dtype"])].append(r)
    fig, axes = plt.subplots(len(panels), 1, figsize=(9, 4.2 * len(panels)), squeeze=False)
    for ax, ((op, dtype), group) in zip(axes[:, 0], sorted(panels.items())):
        families = defaultdict(list)  # (variant, M·N) -> points (N, GB/s)
        shapes = defaultdict(set)  # M·N -> its shapes (M, N)
        for r in group:
            M, N = int(r["M"]), int(r["N"])
            families[(r["variant"], M * N)].append((N, float(r["gbps_ideal"])))
            shapes[M * N].add((M, N))
        names = list(dict.fromkeys(r["variant"] for r in group))
        cmap = plt.get_cmap("tab10" if len(names) <= 10 else "tab20")  # a color per variant, up to 20
        colors = {v: cmap(i % cmap.N) for i, v in enumerate(names)}
        sizes = sorted(shapes, key=lambda s: -len(shapes[s]))  # the size with the most shapes gets the circle
        marker = {s: MARKERS[i % len(MARKERS)] for i, s in enumerate(sizes)}
        for (name, size), pts in families.items():
            pts.sort()
            ax.plot([p[0] for p in pts], [p[1] for p in pts], color=colors[name], marker=marker[size],
                    linestyle="-" if len(pts) > 1 else "none")
        measured = [r for r in group if r.get("copy_gbps")]
        ceiling = statistics.median(float(r["copy_gbps"]) for r in measured)
        lo = min(float(r.get("copy_min") or r["copy_gbps"]) for r in measured)
        hi = max(float(r.get("copy_max") or r["copy_gbps"]) for r in measured)
        ax.axhline(ceiling, color="black", linestyle="--")
        if hi > lo:
            ax.axhspan(lo, hi, color="black", alpha=0.1)
        handles = [Line2D([], [], color=c, label=v) for v, c in colors.items()]
        handles += [Line2D([], [], color="gray", marker=marker[s], linestyle="-" if len(shapes[s]) > 1 else "none",
                           label=_size_label(s, shapes[s])) for s in sizes]
        handles.append(Line2D([], [], color="black", linestyle="--",
                              label=copy_text(ceiling, *((lo, hi) if hi > lo else ()))))
        ax.set_xscale("log", base=2)
        ax.set_xlabel("N (row length)")
        ax.set_ylabel("GB/s (ideal bytes)")
        ax.set_title(f"{op} {dtype} on {group[0]['device']}")
        ax.grid(True, alpha=0.3)
        ax.legend(handles=handles, fontsize=7, ncol=2)
    fig.tight_layout()
    png = png_path(csv_path, png)
    fig.savefig(png, dpi=110)
    plt.close(fig)
    return png

"""Markdown tables from a results CSV (what the README shows is generated, not typed)."""

from __future__ import annotations

from ..errors import OnlineSoftmaxError
from .results import copy_text, read_csv


def _f(value: str, fmt: str, unit: str = "") -> str:
    return format(float(value), fmt) + unit if value not in ("", None) else "–"


def _copy(r: dict) -> str:
    """The copy ceiling a row was measured against, with the range of its rounds when recorded."""
    if not r.get("copy_gbps"):
        return "copy –"
    if not r.get("copy_min"):
        return copy_text(float(r["copy_gbps"]))
    return copy_text(float(r["copy_gbps"]), float(r["copy_min"]), float(r["copy_max"]))


def ladder_markdown(csv_path) -> str:
    """One table per group: the ladder's columns, one row per variant."""
    rows = read_csv(csv_path)
    out, group = [], None
    for r in rows:
        if r["group"] != group:
            group = r["group"]
            out += ["", f"**{group}** ({r['device']}, {_copy(r)}, commit {r['commit']})",
                    "", "| variant | rung | ms | GB/s ideal | GB/s algo | % copy | speed-up | max err | regs | stack |",
                    "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
        if not r["time_ms"]:
            out.append(f"| `{r['variant']}` | {r['rung']} | {'refused: ' + r['note'] if r['note'] else '–'} | | | | | | | |")
            continue
        speed = _f(r["speedup"], ".1f", "×")
        if r.get("speedup_cpu"):
            speed += f" ({_f(r['speedup_cpu'], '.0f')}× CPU)"
        out.append(
            f"| `{r['variant']}` | {r['rung']} | {_f(r['time_ms'], '.3f')} | {_f(r['gbps_ideal'], '.0f')} | "
            f"{_f(r['gbps_algo'], '.0f')} | {_f(r['pct_copy'], '.0f', '%')} | {speed} | "
            f"{_f(r['max_abs_err'], '.1e')} | {r['registers']} | {r['stack']} |")
    return "\n".join(out).strip() + "\n"


def sweep_markdown(csv_path) -> str:
    """Per (op, dtype): a row per shape, % of copy bandwidth per implementation ('!' = wrong)."""
    rows = read_csv(csv_path)
    panels: dict[tuple, list[dict]] = {}
    for r in rows:
        panels.setdefault((r["op"], r["dtype"]), []).append(r)
    out = []
    for (op, dtype), members in panels.items():
        names = list(dict.fromkeys(r["variant"] for r in members))
        commits = ", ".join(dict.fromkeys(r["commit"] for r in members))
        out += ["", f"**{op} {dtype}** — % of copy bandwidth ({members[0]['device']}, "
                    f"{_copy(members[0])}, commit {commits})", "",
                "| M × N | " + " | ".join(f"`{n}`" for n in names) + " |",
                "|---|" + "---:|" * len(names)]
        for shape in dict.fromkeys((r["M"], r["N"]) for r in members):
            cells = []
            for n in names:
                r = next((r for r in members if (r["M"], r["N"]) == shape and r["variant"] == n), None)
                if r is None or not r["time_ms"]:
                    cells.append("–")
                else:
                    cells.append(_f(r["pct_copy"], ".0f", "%") + ("" if r["ok"] == "True" else " !"))
            out.append(f"| {shape[0]} × {shape[1]} | " + " | ".join(cells) + " |")
    return "\n".join(out).strip() + "\n"


# Issue 4's targets on the H200 (% of the same-run copy bandwidth on ideal bytes), checked by `targets_markdown`.
TARGET_PCT = {"softmax": 92, "log_softmax": 92, "softmax_backward": 95, "log_softmax_backward": 95}
FEW_ROWS_SPEEDUP = 4.0  # over torch at the few-row shapes (M x N below 2^27)


def targets_markdown(csv_path, ours: str = "api.cuda", elements: int = 1 << 27) -> str:
    """Per (op, dtype) of a sweep CSV: our worst % of copy over the M x N = 2^27 shapes against the target (and the
    shapes below it), our worst ratio to torch over every shape, and the few-row speed-ups over torch (do_bench
    with its L2 flush; queued back to back on rotated copies)."""
    rows = [r for r in read_csv(csv_path) if r["time_ms"]]
    by = {(r["op"], r["dtype"], int(r["M"]), int(r["N"]), r["variant"]): r for r in rows}
    keys = list(dict.fromkeys((r["op"], r["dtype"]) for r in rows if r["variant"] == f"{ours}.{r['op']}"))
    if not keys:
        raise OnlineSoftmaxError(f"{csv_path}: no timed rows of {ours}.<op>, the production ops the targets are "
                                 "for; --targets reads a CSV from `onlinesoftmax sweep`")
    out = ["| op | dtype | worst % of copy (N) | target | N below target | worst torch time / ours (shape) | "
           "few rows: torch / ours, do_bench (queued) |", "|---|---|---:|---:|---|---:|---|"]
    for op, dtype in keys:
        mine = [r for r in rows if (r["op"], r["dtype"]) == (op, dtype) and r["variant"] == f"{ours}.{op}"]
        full = [r for r in mine if int(r["M"]) * int(r["N"]) == elements]
        low = min(full, key=lambda r: float(r["pct_copy"]), default=None)
        worst = f"{float(low['pct_copy']):.0f}% ({low['N']})" if low else "–"
        target = TARGET_PCT.get(op, 0)
        below = [f"{r['N']} ({float(r['pct_copy']):.0f}%)" for r in full if float(r["pct_copy"]) < target]
        ratios = []
        for r in mine:
            t = by.get((op, dtype, int(r["M"]), int(r["N"]), f"torch.{op}"))
            if t:
                ratios.append((float(t["time_ms"]) / float(r["time_ms"]), r, t))
        few = []
        for ratio, r, t in ratios:
            if int(r["M"]) * int(r["N"]) != elements:
                q, worst_of_two = "", ratio
                if r.get("queued_ms") and t.get("queued_ms"):
                    queued = float(t["queued_ms"]) / float(r["queued_ms"])
                    q, worst_of_two = f" ({queued:.1f}×)", min(ratio, queued)
                mark = "" if worst_of_two >= FEW_ROWS_SPEEDUP else " ✗"
                few.append(f"{r['M']}×{r['N']}: {ratio:.1f}×{q}{mark}")
        wr = min(ratios, key=lambda x: x[0]) if ratios else None
        worst_ratio = f"{wr[0]:.2f} ({wr[1]['M']}×{wr[1]['N']})" if wr else "–"
        out.append(f"| {op} | {dtype} | {worst} | {target}% | "
                   f"{', '.join(below) or 'none'} | {worst_ratio} | {'; '.join(few) or '–'} |")
    return "\n".join(out) + "\n"

"""Markdown tables from a results CSV (what the README shows is generated, not typed)."""

from __future__ import annotations

from .results import read_csv


def _f(value: str, fmt: str) -> str:
    return format(float(value), fmt) if value not in ("", None) else "–"


def ladder_markdown(csv_path) -> str:
    """One table per group: the ladder's columns, one row per variant."""
    rows = read_csv(csv_path)
    out, group = [], None
    for r in rows:
        if r["group"] != group:
            group = r["group"]
            out += ["", f"**{group}** ({r['device']}, copy {float(r['copy_gbps']):.0f} GB/s, commit {r['commit']})",
                    "", "| variant | rung | ms | GB/s ideal | GB/s algo | % copy | speed-up | max err | regs | stack |",
                    "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
        if not r["time_ms"]:
            out.append(f"| `{r['variant']}` | {r['rung']} | refused: {r['note']} | | | | | | | |")
            continue
        speed = _f(r["speedup"], ".1f") + "×"
        if r.get("speedup_cpu"):
            speed += f" ({_f(r['speedup_cpu'], '.0f')}× CPU)"
        out.append(
            f"| `{r['variant']}` | {r['rung']} | {_f(r['time_ms'], '.3f')} | {_f(r['gbps_ideal'], '.0f')} | "
            f"{_f(r['gbps_algo'], '.0f')} | {_f(r['pct_copy'], '.0f')}% | {speed} | "
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
        out += ["", f"**{op} {dtype}** — % of copy bandwidth ({members[0]['device']}, "
                    f"copy {float(members[0]['copy_gbps']):.0f} GB/s, commit {members[0]['commit']})", "",
                "| M × N | " + " | ".join(f"`{n}`" for n in names) + " |",
                "|---|" + "---:|" * len(names)]
        for shape in dict.fromkeys((r["M"], r["N"]) for r in members):
            cells = []
            for n in names:
                r = next((r for r in members if (r["M"], r["N"]) == shape and r["variant"] == n), None)
                if r is None or not r["time_ms"]:
                    cells.append("–")
                else:
                    cells.append(_f(r["pct_copy"], ".0f") + "%" + ("" if r["ok"] == "True" else " !"))
            out.append(f"| {shape[0]} × {shape[1]} | " + " | ".join(cells) + " |")
    return "\n".join(out).strip() + "\n"

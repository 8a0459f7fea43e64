"""Markdown tables from results CSVs (what the README shows is generated, not typed)."""

from __future__ import annotations

import statistics

from ..errors import OnlineSoftmaxError
from .results import copy_text, read_csv
from .suites import SWEEP_DTYPES


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


# Issue 12's targets on the H200 (% of the same-run copy bandwidth on ideal bytes; issue 4 had 95% backward), checked
# by `targets_markdown`: every row at M x N = 2^27 (M = 2^27 // N), odd N within ODD_N_POINTS of the nearest power of
# two, at least as fast as torch everywhere, FEW_ROWS_SPEEDUP over torch at FEW_ROWS_TARGETS.
TARGET_PCT = {"softmax": 92, "log_softmax": 92, "softmax_backward": 96, "log_softmax_backward": 96}
ODD_N_POINTS = 3.0
FEW_ROWS_SPEEDUP = 4.0
FEW_ROWS_TARGETS = ((1, 262144), (32, 131072))


def _paths(csv_paths) -> list:
    """One results CSV or several (a sweep writes one per dtype), as a list."""
    return [csv_paths] if isinstance(csv_paths, (str, bytes)) or not hasattr(csv_paths, "__iter__") else list(csv_paths)


def _rows(csv_paths) -> list[dict]:
    """The timed rows of one results CSV or several; where one (op, variant, dtype, M, N) was timed more than once,
    the last CSV's row (a rerun given after the run it replaces)."""
    rows = {}
    for path in _paths(csv_paths):
        for r in read_csv(path):
            if r["time_ms"]:
                rows.pop(key := (r["op"], r["variant"], r["dtype"], r["M"], r["N"]), None)
                rows[key] = r
    return list(rows.values())


def _pow2_neighbour(N: int, ns) -> int | None:
    """The power of two among ns nearest to N in ratio (the lower one on a tie), or None."""
    pows = [n for n in ns if n & (n - 1) == 0]
    return min(pows, key=lambda n: (max(n, N) / min(n, N), n)) if pows else None


def _short_of_neighbour(N: int, pct: dict) -> int | None:
    """N's power-of-two neighbour in pct ({N: % of copy}) where N is more than ODD_N_POINTS below it, else None."""
    k = _pow2_neighbour(N, pct)
    return k if k not in (None, N) and pct[N] < pct[k] - ODD_N_POINTS else None


def _pct(cells: dict) -> dict:
    """{N: % of copy} of one (op, dtype)'s cells of _grid."""
    return {N: float(r["pct_copy"]) for N, (r, _) in cells.items()}


def _grid(rows, ours: str, elements: int):
    """{(op, dtype): {N: (ours' row, torch's row or None)}} at M = elements // N."""
    torch_rows = {(r["op"], r["dtype"], r["M"], r["N"]): r for r in rows if r["variant"] == f"torch.{r['op']}"}
    grid: dict = {}
    for r in rows:
        if r["variant"] == f"{ours}.{r['op']}" and int(r["M"]) == elements // int(r["N"]):
            grid.setdefault((r["op"], r["dtype"]), {})[int(r["N"])] = (
                r, torch_rows.get((r["op"], r["dtype"], r["M"], r["N"])))
    return grid


def _ours(rows, ours: str | None) -> str:
    """`ours`, or where None the one backend of ours the CSVs hold (a `sweep --backend triton`: api.triton), else the
    production backend's rows (api.cuda)."""
    found = _backends(rows)
    return ours or (found.pop() if len(found) == 1 else "api.cuda")


def targets_markdown(csv_paths, ours: str = None, elements: int = 1 << 27) -> str:
    """Per (op, dtype) of sweep CSVs: our worst % of copy over the M x N = 2^27 shapes against the target (and the
    shapes below it), the odd N more than ODD_N_POINTS below their power-of-two neighbour, our worst ratio to torch
    over every shape, and the speed-ups over torch at FEW_ROWS_TARGETS (do_bench with its L2 flush; queued back to
    back on rotated copies). ours: the backend's rows (_ours)."""
    rows = _rows(csv_paths)
    ours = _ours(rows, ours)
    by = {(r["op"], r["dtype"], int(r["M"]), int(r["N"]), r["variant"]): r for r in rows}
    keys = list(dict.fromkeys((r["op"], r["dtype"]) for r in rows if r["variant"] == f"{ours}.{r['op']}"))
    if not keys:
        raise OnlineSoftmaxError(f"{', '.join(map(str, _paths(csv_paths)))}: no timed rows of {ours}.<op>, the "
                                 "production ops the targets are for; --targets reads CSVs from `onlinesoftmax sweep`")
    grid = _grid(rows, ours, elements)
    out = ["| op | dtype | worst % of copy (N) | target | N below target | N ≠ 2^k more than 3 points below 2^k | "
           "worst torch time / ours (shape) | few rows: torch / ours, do_bench (queued) |",
           "|---|---|---:|---:|---|---|---:|---|"]
    for op, dtype in keys:
        mine = [r for r in rows if (r["op"], r["dtype"]) == (op, dtype) and r["variant"] == f"{ours}.{op}"]
        pct = _pct(grid.get((op, dtype), {}))
        low = min(pct, key=pct.get, default=None)
        worst = f"{pct[low]:.0f}% ({low})" if low else "–"
        target = TARGET_PCT.get(op, 0)
        below = [f"{N} ({p:.0f}%)" for N, p in pct.items() if p < target]
        odd = [f"{N} ({p:.0f}% vs {pct[k]:.0f}%)" for N, p in pct.items() if (k := _short_of_neighbour(N, pct))]
        ratios = []
        for r in mine:
            t = by.get((op, dtype, int(r["M"]), int(r["N"]), f"torch.{op}"))
            if t:
                ratios.append((float(t["time_ms"]) / float(r["time_ms"]), r, t))
        few = []
        for ratio, r, t in ratios:
            if (int(r["M"]), int(r["N"])) in FEW_ROWS_TARGETS:
                q, worst_of_two = "", ratio
                if r.get("queued_ms") and t.get("queued_ms"):
                    queued = float(t["queued_ms"]) / float(r["queued_ms"])
                    q, worst_of_two = f" ({queued:.1f}×)", min(ratio, queued)
                mark = "" if worst_of_two >= FEW_ROWS_SPEEDUP else " ✗"
                few.append(f"{r['M']}×{r['N']}: {ratio:.1f}×{q}{mark}")
        timed = {(int(r["M"]), int(r["N"])) for _, r, _ in ratios}
        few += [f"{M}×{N}: not timed ✗" for M, N in FEW_ROWS_TARGETS if (M, N) not in timed]
        wr = min(ratios, key=lambda x: x[0]) if ratios else None
        worst_ratio = f"{wr[0]:.2f} ({wr[1]['M']}×{wr[1]['N']})" if wr else "–"
        out.append(f"| {op} | {dtype} | {worst} | {target}% | {', '.join(below) or 'none'} | "
                   f"{', '.join(odd) or 'none'} | {worst_ratio} | {'; '.join(few) or '–'} |")
    return "\n".join(out) + "\n"


def grid_markdown(csv_paths, ours: str = None, elements: int = 1 << 27) -> str:
    """The public grid as one table: a row per N at M = 2^27 // N, per dtype a forward and a backward column, each
    cell ours' % of copy over its two ops (softmax and log-softmax; their backward) and, in brackets, the lower of
    torch's time over ours; ✗ where a cell is below TARGET_PCT, ↓ where an N not a power of two is more than
    ODD_N_POINTS below its power-of-two neighbour. ours: the backend's rows (_ours)."""
    rows = _rows(csv_paths)
    ours = _ours(rows, ours)
    grid = _grid(rows, ours, elements)
    if not grid:
        raise OnlineSoftmaxError(f"{', '.join(map(str, _paths(csv_paths)))}: no timed rows of {ours}.<op> at "
                                 f"M x N = {elements}")
    dtypes = sorted(dict.fromkeys(dt for _, dt in grid),
                    key=lambda d: SWEEP_DTYPES.index(d) if d in SWEEP_DTYPES else len(SWEEP_DTYPES))
    sides = (("fwd", ("softmax", "log_softmax")), ("bwd", ("softmax_backward", "log_softmax_backward")))
    ns = sorted({N for cells in grid.values() for N in cells})
    pcts = {key: _pct(cells) for key, cells in grid.items()}
    out = ["| N | " + " | ".join(f"{dt} {side}" for dt in dtypes for side, _ in sides) + " |",
           "|---:|" + "---:|" * (2 * len(dtypes))]
    for N in ns:
        cells = []
        for dt in dtypes:
            for _, ops in sides:
                got = [(op, grid[(op, dt)][N]) for op in ops if N in grid.get((op, dt), {})]
                if not got:
                    cells.append("–")
                    continue
                here = {op: pcts[(op, dt)][N] for op, _ in got}
                lo, hi = min(here.values()), max(here.values())
                text = f"{lo:.0f}%" if round(lo) == round(hi) else f"{lo:.0f}–{hi:.0f}%"
                ratios = [float(t["time_ms"]) / float(r["time_ms"]) for _, (r, t) in got if t]
                if ratios:
                    text += f" ({min(ratios):.2f}×)"
                if any(pct < TARGET_PCT[op] for op, pct in here.items()):
                    text += " ✗"
                if any(_short_of_neighbour(N, pcts[(op, dt)]) for op, _ in got):
                    text += " ↓"
                cells.append(text)
        out.append(f"| {N} | " + " | ".join(cells) + " |")
    return "\n".join(out) + "\n"


def _tree_name(path) -> str:
    """An A/B tree's name from its CSV: benchmarks/ab.sh writes ab-NAME.csv."""
    stem = str(path).replace("\\", "/").rsplit("/", 1)[-1].rsplit(".", 1)[0]
    return stem[3:] if stem.startswith("ab-") else stem


def _backends(rows) -> set:
    """The backends of ours (api.cuda, api.triton) whose op rows `rows` hold."""
    return {r["variant"][: -len(r["op"]) - 1] for r in rows
            if r["variant"].startswith("api.") and r["variant"].endswith("." + r["op"])}


def _our_backend(rows) -> str:
    """The one backend of ours (api.cuda or api.triton) whose op rows `rows` hold: an A/B sweeps one."""
    found = _backends(rows)
    if len(found) != 1:
        raise OnlineSoftmaxError(f"--ab compares one backend of ours, the CSVs hold {sorted(found) or 'none'}")
    return found.pop()


def ab_markdown(csv_paths, ours: str = None, elements: int = 1 << 27, worst: int = 4) -> str:
    """The same sweep of ours over several source trees (benchmarks/ab.sh: a CSV per tree, the base first): % of
    copy side by side per (op, dtype, shape) ('!' = a wrong output), then per later tree its change against the first
    over the long rows (M = elements // N) and the few-row shapes apart: cells, median, mean, range, the `worst`
    cells that lost most and the two that gained most; a cell with a wrong output in either tree is left out of the
    changes and named. Last, each tree's long cells at issue 12's target (TARGET_PCT), right outputs only. ours: the
    backend's rows (api.cuda, api.triton); None: the one the CSVs hold (benchmarks/ab.sh BACKEND)."""
    paths = _paths(csv_paths)
    if len(paths) < 2:
        raise OnlineSoftmaxError("--ab compares trees: give two or more CSVs of the same sweep, the base first")
    names = [_tree_name(p) for p in paths]
    if len(set(names)) < len(names):
        raise OnlineSoftmaxError(f"--ab: two CSVs name the same tree ({', '.join(names)}): a tree is named by its "
                                 "file, ab-NAME.csv")
    tables = [read_csv(path) for path in paths]
    ours = ours or _our_backend([r for rows in tables for r in rows])
    trees = []
    for rows in tables:
        cells = {}
        for r in rows:
            if r["variant"] == f"{ours}.{r['op']}" and r["pct_copy"]:
                cells[(r["op"], r["dtype"], int(r["M"]), int(r["N"]))] = (float(r["pct_copy"]), r["ok"] == "True")
        trees.append(cells)

    def is_long(k) -> bool:
        return k[2] == elements // k[3]

    keys = sorted(set().union(*trees), key=lambda k: (k[0], k[1], not is_long(k), k[3], k[2]))
    if not keys:
        raise OnlineSoftmaxError(f"{', '.join(map(str, paths))}: no timed rows of {ours}.<op>; --ab reads the CSVs "
                                 "benchmarks/ab.sh writes (`onlinesoftmax sweep --ours-only`)")

    def cell(t, k):
        return "–" if k not in t else f"{t[k][0]:.1f}" + ("" if t[k][1] else " !")

    out = ["| op | dtype | M × N | " + " | ".join(names) + " |", "|---|---|---:|" + "---:|" * len(names)]
    out += [f"| {op} | {dt} | {M} × {N} | " + " | ".join(cell(t, (op, dt, M, N)) for t in trees) + " |"
            for op, dt, M, N in keys]
    long_ = [k for k in keys if is_long(k)]
    kinds = (("long rows (M × N = 2^27)", long_), ("few rows", [k for k in keys if not is_long(k)]))
    base = trees[0]
    for name, tree in zip(names[1:], trees[1:]):
        out += ["", f"**{name} against {names[0]}** (points of copy)", ""]
        for kind, ks in kinds:
            both = [k for k in ks if k in tree and k in base]
            moved = sorted((tree[k][0] - base[k][0], k) for k in both if tree[k][1] and base[k][1])
            wrong = [k for k in both if not (tree[k][1] and base[k][1])]
            if not moved and not wrong:
                continue
            if moved:
                d = [x for x, _ in moved]
                out.append(f"- {kind}: {len(d)} cells, median {statistics.median(d):+.1f}, mean "
                           f"{statistics.mean(d):+.2f}, {d[0]:+.1f} to {d[-1]:+.1f}")
                shown = moved[:worst] + moved[max(worst, len(moved) - 2):][::-1]  # the most lost, then gained
                for x, (op, dt, M, N) in shown:
                    out.append(f"  - {x:+.1f}: {op} {dt} {M} × {N}, {base[(op, dt, M, N)][0]:.1f} → "
                               f"{tree[(op, dt, M, N)][0]:.1f}")
            if wrong:
                out.append(f"- {kind}, a wrong output (left out): " + ", ".join(f"{op} {dt} {M} × {N}"
                                                                                 for op, dt, M, N in wrong))
    if long_:
        at = [(sum(k in t and t[k][1] and t[k][0] >= TARGET_PCT.get(k[0], 0) for k in long_),
               sum(k in t for k in long_)) for t in trees]
        out += ["", f"Long cells at issue 12's target (forward {TARGET_PCT['softmax']}%, backward "
                    f"{TARGET_PCT['softmax_backward']}%), right outputs only: "
                    + ", ".join(f"{n} {a} of {m}" for n, (a, m) in zip(names, at))]
    return "\n".join(out) + "\n"

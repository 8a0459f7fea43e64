"""The measurement loops every command runs: check variants against float64, time groups of variants with the
copy ceiling around the run. They report progress through two callbacks and return rows (data); the CLI draws
the progress bar and the tables.

    step(label, done, total)    before each case; done of total cases finished
    say(text)                   a line for the log (a table starting, the copy ceiling)
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

from ..errors import OnlineSoftmaxError
from ..registry import Variant
from . import results
from .results import Rows
from .bench import copy_samples, measure
from .check import check_variant
from .inputs import kinds_for
from .suites import Group, check_shapes

COPY_ROUNDS = 5  # copy ceiling: rounds before a timed run (and one after it); % copy uses their median


def _quiet(*_args) -> None:
    pass


def dtype_name(dtype) -> str:
    return str(dtype).replace("torch.", "")


# ---- check ------------------------------------------------------------------------------------------------


@dataclass
class CheckStats:
    variant: Variant
    run: int = 0
    passed: int = 0
    skipped: int = 0
    rel: float = 0.0
    abs: float = 0.0


@dataclass
class CheckRun:
    stats: dict = field(default_factory=dict)  # variant name -> CheckStats
    failures: list = field(default_factory=list)  # (name, M, N, dtype, kind, message)
    unavailable: list = field(default_factory=list)  # (variant, reason)


def check_cases(variants, shapes=None, dtypes=None, kinds=None) -> tuple[list, list]:
    """The (variant, M, N, dtype, kind) cases a check runs, and the (variant, reason) it cannot run here."""
    cases, unavailable = [], []
    for v in variants:
        reason = "baseline: timed by sweep, not held to this package's semantics" if v.baseline else v.available()
        if reason:
            unavailable.append((v, reason))
            continue
        vkinds = [k for k in (kinds or kinds_for(v.op)) if k in kinds_for(v.op)]
        for dtype in dtypes or v.dtypes:
            for M, N in shapes or check_shapes(v):
                cases.extend((v, M, N, dtype, kind) for kind in vkinds)
    return cases, unavailable


def run_checks(variants, seed: int, shapes=None, dtypes=None, kinds=None, step=_quiet) -> CheckRun:
    """Every variant on every case against float64 (harness/check.py); case i runs with seed + i."""
    cases, unavailable = check_cases(variants, shapes, dtypes, kinds)
    out = CheckRun(unavailable=unavailable)
    for i, (v, M, N, dtype, kind) in enumerate(cases):
        step(f"{v.name} {M}x{N} {dtype_name(dtype)} {kind}", i, len(cases))
        s = out.stats.setdefault(v.name, CheckStats(v))
        try:
            rep = check_variant(v, M, N, dtype, kind, seed + i)
        except OnlineSoftmaxError as exc:
            s.run += 1
            out.failures.append((v.name, M, N, dtype, kind, f"raised: {exc}"))
            continue
        if rep.skipped:
            s.skipped += 1
            continue
        s.run += 1
        s.passed += rep.ok
        if rep.rel_err == rep.rel_err:  # not NaN
            s.rel = max(s.rel, rep.rel_err)
        s.abs = max(s.abs, rep.max_abs_err)
        if not rep.ok:
            out.failures.append((v.name, M, N, dtype, kind, rep.message))
    step("", len(cases), len(cases))
    return out


# ---- timing -----------------------------------------------------------------------------------------------


def _resources(v: Variant, M: int, N: int, dtype) -> dict:
    if v.resources is None:
        return {}
    try:
        return v.resources(M, N, dtype) or {}
    except OnlineSoftmaxError:
        return {}


def run_groups(groups: list[Group], device_for_copy: str, step=_quiet, say=_quiet) -> Rows:
    """Measure every member of every group; returns result rows (see results.FIELDS).

    The copy ceiling is measured COPY_ROUNDS times before the run and once after it: rows carry the
    median (copy_gbps, what % copy divides by) and the range (copy_min, copy_max). An interrupt stops the
    measurements, not the run: the rows so far come back complete (copy ceiling, speed-ups), marked interrupted."""
    env = results.environment(device_for_copy)
    say(f"{env['device']}: measuring the copy ceiling ({COPY_ROUNDS} rounds now, 1 after the run)")
    samples = copy_samples(device_for_copy, COPY_ROUNDS)
    plan = [(g, v) for g in groups for v in g.members()]
    rows = Rows.collect(_measured_rows(plan, env, step, say))
    if rows.interrupted:
        say(f"interrupted: {len(rows)} of {len(plan)} measurements done, kept")
    step("", len(plan), len(plan))
    try:
        samples += copy_samples(device_for_copy, 1)
    except KeyboardInterrupt:  # a second interrupt: the rows keep the copy rounds made before the run
        rows.interrupted = True
    copy = statistics.median(samples)
    say(f"{results.copy_text(copy, min(samples), max(samples))}: the median of {len(samples)} "
        "rounds of a large copy (read + write); % copy divides by it")
    for row in rows:
        row.update(copy_gbps=copy, copy_min=min(samples), copy_max=max(samples))
        if "gbps_ideal" in row:
            row["pct_copy"] = 100 * row["gbps_ideal"] / copy
    speedups(rows)
    return rows


def _measured_rows(plan: list, env: dict, step, say):
    """run_groups' rows, one per (group, variant) of the plan: its timing, or why it has none (refused, or an error:
    the run goes on)."""
    for i, (g, v) in enumerate(plan):
        if i == 0 or g is not plan[i - 1][0]:  # a line per table: progress in logs, where a bar is not drawn
            say(f"timing {g.title} ({i} of {len(plan)} measurements done)")
        step(f"{v.name} {g.M}x{g.N}", i, len(plan))
        reason = v.refuses(g.M, g.N, g.dtype)
        row = dict(op=g.op, variant=v.name, backend=v.backend, rung=v.rung, M=g.M, N=g.N,
                   dtype=dtype_name(g.dtype), group=g.title, **env)
        try:
            m = None if reason else measure(v, g.M, g.N, g.dtype)
        except OnlineSoftmaxError as exc:
            reason, m = f"error: {exc}", None
            row["ok"] = False
        if m is None:
            row["note"] = reason
        else:
            row.update(time_ms=m.time_ms, ideal_bytes=m.ideal_bytes, algo_bytes=m.algo_bytes,
                       gbps_ideal=m.gbps_ideal(), gbps_algo=m.gbps_algo(), rel_err=m.rel_err,
                       max_abs_err=m.max_abs_err, ok=m.ok, **_resources(v, g.M, g.N, g.dtype))
            if m.queued_ms is not None:
                row["queued_ms"] = m.queued_ms
        yield row


def speedups(rows: list[dict]) -> None:
    """speedup: over the group's first timed rung; speedup_cpu: over its CPU baseline, if any."""
    by_group: dict[str, list[dict]] = {}
    for r in rows:
        by_group.setdefault(r["group"], []).append(r)
    for members in by_group.values():
        timed = [r for r in members if "time_ms" in r]
        gpu = [r for r in timed if r["backend"] != "numpy"] or timed
        cpu = [r for r in timed if r["backend"] == "numpy"]
        for r in timed:
            r["speedup"] = gpu[0]["time_ms"] / r["time_ms"] if r in gpu else cpu[0]["time_ms"] / r["time_ms"]
            if cpu and r["backend"] != "numpy":
                r["speedup_cpu"] = cpu[0]["time_ms"] / r["time_ms"]

"""The attention ladder's table (`onlinesoftmax attention-ladder`): every rung of ladder/attention.py and torch
SDPA's math, flash and cuDNN backends, at the anchors' shapes (B S = 16384 tokens, H D = 2048), non-causal and causal.

Per row: median time (triton's do_bench, L2 flushed), TFLOP/s on 4 B H S^2 D (half when causal), the bytes models
(HBM, and loads from L2), the workspace (model, and measured as the peak allocated above inputs and output), the
speed-up over A0, the ptxas report of our kernels, and a float64 check of that same output on sampled query rows of
its heads (check_sample).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Callable, Optional

import numpy as np
import torch

from ..errors import OnlineSoftmaxError
from ..ladder import attention as attn
from ..reference import attention as reference_attention
from . import results
from .bench import median_ms
from .check import compare

# (B, H, S, D): the anchors' shapes (shared/anchors/h200-wave2.md)
SHAPES = ((16, 32, 1024, 64), (16, 16, 1024, 128), (4, 32, 4096, 64), (4, 16, 4096, 128))
SDPA = (("torch.sdpa_math", "SDPA math", "MATH"),
        ("torch.sdpa_flash", "SDPA flash", "FLASH_ATTENTION"),
        ("torch.sdpa_cudnn", "SDPA cuDNN", "CUDNN_ATTENTION"))
SAMPLE_ROWS = 64  # checked query rows at each end of a longer sequence (check_sample) ...
FULL_ROWS = 1024  # ... and every row of a sequence of up to this many queries
CHECKED_HEADS = 8  # up to this many (batch, head) pairs: every one checked; beyond, the first, middle and last
FIELDS = ("group", "variant", "rung", "B", "H", "S", "D", "causal", "dtype", "time_ms", "tflops", "pct_flash",
          "speedup_a0", "hbm_model_bytes", "l2_model_bytes", "extra_model_bytes", "extra_measured_bytes",
          "registers", "smem", "stack", "spill_stores", "spill_loads", "kernel", "max_abs_err", "rel_err", "ok",
          "note", "device", "torch", "cuda_core", "commit", "timestamp")


def _sdpa(backend: str) -> Callable:
    def call(q, k, v, causal):
        from torch.nn.attention import SDPBackend, sdpa_kernel

        with sdpa_kernel(getattr(SDPBackend, backend)):
            return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)

    return call


def _ours(name: str) -> Callable:
    return lambda q, k, v, causal, out=None: attn.attention(name, q, k, v, causal, out)


def candidates() -> list[tuple[str, str, Callable, Optional[attn.Rung]]]:
    """(name, label, call, rung or None): our rungs in ladder order, then the SDPA backends."""
    return ([(r.name, r.label, _ours(r.name), r) for r in attn.RUNGS]
            + [(name, label, _sdpa(be), None) for name, label, be in SDPA])


def inputs(B: int, H: int, S: int, D: int, dtype: torch.dtype, seed: int = 0, kind: str = "randn"):
    """q, k, v on the GPU: N(0, 1), or "large" (q and k times 30: logits in the hundreds, one-hot-like rows)."""
    gen = torch.Generator(device="cuda").manual_seed(seed)
    q, k, v = (torch.randn((B, H, S, D), generator=gen, device="cuda", dtype=torch.float32) for _ in range(3))
    if kind == "large":
        q, k = q * 30, k * 30
    return q.to(dtype), k.to(dtype), v.to(dtype)


def check_sample(out, q, k, v, causal: bool):
    """The float64 check of `out` on every query row up to FULL_ROWS of them, else on SAMPLE_ROWS at both ends, of
    every head (of the first, middle and last beyond CHECKED_HEADS), and of every element's finiteness (q, k and v
    are finite: an element left NaN, as a poisoned output's unwritten one, fails wherever it is). (Both ends alone
    left a wrong but finite middle tile unchecked: at S = 257, rows 64-192.)"""
    S = q.shape[-2]
    rows = list(range(S)) if S <= FULL_ROWS else sorted(set(range(SAMPLE_ROWS)) | set(range(S - SAMPLE_ROWS, S)))
    flat = [t.reshape(-1, S, t.shape[-1]) for t in (out, q, k, v)]
    n = flat[1].shape[0]
    heads = range(n) if n <= CHECKED_HEADS else sorted({0, n // 2, n - 1})
    got, ref, scale = [], [], []
    for h in heads:
        o, qh, kh, vh = (t[h].cpu() for t in flat)
        got.append(o[rows])
        ref.append(reference_attention(qh, kh, vh, causal, rows=rows)[0])
        scale.append(reference_attention(qh, kh, vh.abs(), causal, rows=rows)[0])  # sum_j p_j |v_j|: P's rounding scale
    report = compare(torch.cat(got), np.concatenate(ref), out.dtype, np.concatenate(scale))
    finite = torch.isfinite(out)
    if not finite.all():
        where = tuple(int(i) for i in (~finite).nonzero()[0])
        report = replace(report, ok=False, n_bad=report.n_bad + int((~finite).sum()),
                         bad=[(where, float(out[where]), "finite")] + report.bad)
    return report


def measure(call, q, k, v, causal: bool, ours: bool) -> dict:
    """Time one call, check that same output, measure its workspace."""
    out = None
    if ours:
        out = torch.full_like(q, float("nan"))  # poisoned: an element never written fails the check
        run = lambda: call(q, k, v, causal, out)  # noqa: E731
    else:
        run = lambda: call(q, k, v, causal)  # noqa: E731
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    got = run()
    torch.cuda.synchronize()
    out_bytes = 0 if ours else got.numel() * got.element_size()
    extra = torch.cuda.max_memory_allocated() - base - out_bytes
    report = check_sample(got, q, k, v, causal)
    del got
    ms = median_ms(run, "cuda")
    return {"time_ms": ms, "extra_measured_bytes": max(0, extra), "max_abs_err": report.max_abs_err,
            "rel_err": report.rel_err, "ok": report.ok, **({} if report.ok else {"note": report.message[:200]})}


def attention_rows(shapes=SHAPES, causals=(False, True), dtype=torch.bfloat16, step=None) -> results.Rows:
    """The table's rows: per shape and causal flag, every candidate (a candidate that fails gets a note); an
    interrupt keeps the rows measured before it."""
    env = results.environment("cuda")
    todo = [(s, c, cand) for s in shapes for c in causals for cand in candidates()]
    rows = results.Rows.collect(_measured_rows(todo, dtype, env, step))
    _relative(rows)
    return rows


def _measured_rows(todo: list, dtype, env: dict, step):
    """attention_rows' rows, one per (shape, causal flag, candidate) of todo."""
    for i, ((B, H, S, D), causal, (name, label, call, rung)) in enumerate(todo):
        group = f"attention B={B} H={H} S={S} D={D} {str(dtype).replace('torch.', '')}" + (" causal" if causal else "")
        if step:
            step(f"{group}: {label}", i, len(todo))
        row = {"group": group, "variant": name, "rung": label, "B": B, "H": H, "S": S, "D": D, "causal": causal,
               "dtype": str(dtype).replace("torch.", ""), **env}
        q, k, v = inputs(B, H, S, D, dtype)
        BH, s = B * H, q.element_size()
        if rung is not None:
            row.update(hbm_model_bytes=rung.hbm_bytes(BH, S, D, s, causal), l2_model_bytes=rung.l2_bytes(BH, S, D, s, causal),
                       extra_model_bytes=rung.extra_bytes(BH, S))
            try:
                row.update(attn.resources(name, D, dtype, causal))
            except OnlineSoftmaxError as e:
                row["note"] = f"no ptxas report: {e}"
        try:
            row.update(measure(call, q, k, v, causal, rung is not None))
            row["tflops"] = attn.flops(BH, S, D, causal) / (row["time_ms"] * 1e-3) / 1e12
        except (RuntimeError, OnlineSoftmaxError) as e:  # a backend without a kernel for this case, or OOM
            row["note"] = f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"
            if rung is not None:
                row["ok"] = False  # ours must run every shape of the table
        del q, k, v
        torch.cuda.empty_cache()
        yield row


def _relative(rows: list[dict]) -> None:
    """speed-up over A0 and % of SDPA flash, within each group."""
    by_group: dict = {}
    for r in rows:
        by_group.setdefault(r["group"], {})[r["variant"]] = r
    for members in by_group.values():
        a0 = members.get("cuda.attn_a0", {}).get("time_ms")
        flash = members.get("torch.sdpa_flash", {}).get("time_ms")
        for r in members.values():
            if "time_ms" not in r:
                continue
            if a0:
                r["speedup_a0"] = a0 / r["time_ms"]
            if flash:
                r["pct_flash"] = 100.0 * flash / r["time_ms"]


def write_csv(rows: list[dict], path):
    return results.write_csv(rows, path, FIELDS)


def _gb(x) -> str:
    return "-" if x in (None, "") else f"{float(x) / 1e9:.3g}"


def markdown(rows: list[dict]) -> str:
    """One Markdown table per group (the README's and the evidence file's layout)."""
    out = []
    head = ("| rung | ms | TFLOP/s | % flash | vs A0 | HBM GB (model) | L2→SM GB (model) | extra GB (model / measured) "
            "| regs | smem B | spills | max err | ok |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    group = None
    for r in rows:
        if r["group"] != group:
            group = r["group"]
            out.append(f"\n**{group}**\n\n{head}")
        if r.get("time_ms") in (None, ""):
            out.append(f"| {r['rung']} | – | – | – | – | | | | | | | | {r.get('note', '')} |")
            continue
        extra = (f"{_gb(r.get('extra_model_bytes'))} / {_gb(r.get('extra_measured_bytes'))}"
                 if r.get("extra_model_bytes") not in (None, "") else f"– / {_gb(r.get('extra_measured_bytes'))}")
        spills = ("" if r.get("registers") in (None, "")
                  else str(int(float(r.get("spill_stores") or 0)) + int(float(r.get("spill_loads") or 0))))
        out.append(
            f"| {r['rung']} | {float(r['time_ms']):.3f} | {float(r['tflops']):.1f} | "
            f"{_num(r.get('pct_flash'), '{:.0f}%')} | {_num(r.get('speedup_a0'), '{:.1f}x')} | "
            f"{_gb(r.get('hbm_model_bytes'))} | {_gb(r.get('l2_model_bytes'))} | {extra} | "
            f"{r.get('registers', '')} | {r.get('smem', '')} | {spills} | {float(r['max_abs_err']):.1e} | "
            f"{'yes' if str(r['ok']) in ('True', 'true', '1') else 'NO ' + str(r.get('note', ''))} |")
    return "\n".join(out).strip() + "\n"


def _num(x, fmt: str) -> str:
    return "–" if x in (None, "") else fmt.format(float(x))

"""The production attention op (ops/attention.py, Triton FA2) beside SDPA's flash, cuDNN and efficient backends,
forward and backward, in one run on one GPU, bf16, on the anchors' shapes (issue 14): B * S = 16384 tokens,
H * D = 2048, S x D x causal x GQA (H / Hkv = 4). `onlinesoftmax attention-sweep` runs it; `report --attention`
and `plot` draw a CSV it wrote.

TFLOP/s with FLOPs = 4 B H S^2 D, half when causal; the backward counts 2.5x the forward's. Times are
triton.testing.do_bench medians (forward: the call; backward: o.backward(dO) on a kept graph, gradients reset to
None). The first call of ours at a new key autotunes before anything is timed. The efficient backend has no GQA
kernel in torch 2.11: empty there. Every row records ours against flash (max |difference| of O, dQ, dK, dV on the
same inputs), so a fast wrong kernel cannot enter the table unseen.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Callable, Optional

from ..errors import OnlineSoftmaxError

TOKENS, WIDTH, GQA_RATIO = 16384, 2048, 4
LENGTHS, DIMS = (1024, 4096, 16384), (64, 128)
IMPLS = ("ours", "flash", "cudnn", "efficient")
GRADS = ("O", "dQ", "dK", "dV")
FIELDS = (["S", "D", "causal", "H", "Hkv"] + [f"{i}_{d}" for i in IMPLS for d in ("fwd", "bwd")]
          + [f"max_abs_diff_{g}_vs_flash" for g in GRADS] + ["device", "torch", "triton", "commit", "timestamp"])


def configurations(lengths=LENGTHS, dims=DIMS) -> list[tuple[int, int, bool, bool]]:
    """(S, D, causal, gqa) of the sweep, in its order."""
    return list(itertools.product(lengths, dims, (False, True), (False, True)))


def _measure(impl: str, S: int, D: int, causal: bool, gqa: bool):
    """(outputs O, dQ, dK, dV; forward TFLOP/s; backward TFLOP/s), or None where the backend has no kernel."""
    import torch
    import torch.nn.functional as F
    import triton
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from ..ops.attention import attention

    B, H = TOKENS // S, WIDTH // D
    Hkv = H // GQA_RATIO if gqa else H
    g = torch.Generator(device="cuda").manual_seed(0)
    q = torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16, generator=g).requires_grad_()
    k = torch.randn(B, Hkv, S, D, device="cuda", dtype=torch.bfloat16, generator=g).requires_grad_()
    v = torch.randn(B, Hkv, S, D, device="cuda", dtype=torch.bfloat16, generator=g).requires_grad_()
    if impl == "ours":
        def fn():
            return attention(q, k, v, causal=causal)
    else:
        backend = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION,
                   "efficient": SDPBackend.EFFICIENT_ATTENTION}[impl]

        def fn():
            with sdpa_kernel(backend):
                return F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=gqa)
    try:
        o = fn()
    except RuntimeError:  # no kernel of this backend for this shape
        return None
    do = torch.randn(o.shape, device="cuda", dtype=o.dtype, generator=g)
    o.backward(do, retain_graph=True)  # the backward's first call (its autotuning, for ours)
    outputs = (o.detach(), q.grad.clone(), k.grad.clone(), v.grad.clone())
    with torch.no_grad():
        fwd_ms = triton.testing.do_bench(fn)
    bwd_ms = triton.testing.do_bench(lambda: o.backward(do, retain_graph=True), grad_to_none=[q, k, v])
    flops = 4 * B * H * S * S * D * (0.5 if causal else 1.0)
    return outputs, flops / fwd_ms / 1e9, 2.5 * flops / bwd_ms / 1e9


def sweep(lengths=LENGTHS, dims=DIMS, step: Optional[Callable[[str, int, int], None]] = None):
    """One row per configuration: TFLOP/s of each implementation forward and backward, ours against flash.
    step(label, done, total) reports progress (the CLI's progress bar); an interrupt keeps the rows done before it."""
    from .results import Rows, environment

    return Rows.collect(_measured_rows(configurations(lengths, dims), environment("cuda"), step))


def _measured_rows(todo: list, env: dict, step):
    """sweep's rows, one per configuration."""
    import torch

    for n, (S, D, causal, gqa) in enumerate(todo):
        if step:
            step(f"S={S} D={D} causal={causal} gqa={gqa}", n, len(todo))
        row = dict(S=S, D=D, causal=causal, H=WIDTH // D, Hkv=WIDTH // D // (GQA_RATIO if gqa else 1), **env)
        outputs = {}
        for impl in IMPLS:
            got = None if (impl == "efficient" and gqa) else _measure(impl, S, D, causal, gqa)
            if got is not None:
                outputs[impl], row[f"{impl}_fwd"], row[f"{impl}_bwd"] = got[0], round(got[1], 1), round(got[2], 1)
            torch.cuda.empty_cache()
        if "ours" in outputs and "flash" in outputs:
            for name, a, b in zip(GRADS, outputs["ours"], outputs["flash"]):
                row[f"max_abs_diff_{name}_vs_flash"] = float(f"{(a.float() - b.float()).abs().max():.3g}")
        yield row


def autotuned() -> str:
    """The configurations our kernels' autotuning picked in this process, as Markdown lines."""
    from ..engines.triton import attention as triton_attention

    lines = [f"- {kernel} {key}: {cfg}" for kernel, picks in triton_attention.best_configs().items()
             for key, cfg in picks.items()]
    return "Autotuned configurations (key: HEAD_D, CAUSAL, Sq bucket, Sk bucket, dtypes):\n\n" + "\n".join(lines) + "\n"


def read(path) -> list[dict]:
    """The rows of a CSV that sweep's rows were written to, or a clear error."""
    import csv

    path = Path(path)
    if not path.is_file():
        raise OnlineSoftmaxError(f"{path}: no such attention sweep CSV")
    with path.open(newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    if not rows or "ours_fwd" not in rows[0]:
        raise OnlineSoftmaxError(f"{path}: not an attention sweep CSV (written by `onlinesoftmax attention-sweep`)")
    return rows


def _num(row: dict, key: str) -> Optional[float]:
    value = row.get(key)
    return float(value) if value not in (None, "") else None


def markdown(rows: list[dict]) -> str:
    """The sweep as a Markdown table: TFLOP/s of each implementation, ours over flash and over cuDNN."""
    def ratio(row, a, b):
        x, y = _num(row, a), _num(row, b)
        return f"{x / y:.2f}" if x and y else "–"

    head = ["S", "D", "causal", "H/Hkv"] + [f"{i} {d}" for d in ("fwd", "bwd") for i in IMPLS]
    head += ["fwd vs flash / cuDNN", "bwd vs flash / cuDNN", "max diff vs flash O/dQ/dK/dV"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = [str(r["S"]), str(r["D"]), "yes" if str(r["causal"]) == "True" else "no", f"{r['H']}/{r['Hkv']}"]
        cells += [f"{_num(r, f'{i}_{d}'):.0f}" if _num(r, f"{i}_{d}") else "–" for d in ("fwd", "bwd") for i in IMPLS]
        cells += [f"{ratio(r, f'ours_{d}', f'flash_{d}')} / {ratio(r, f'ours_{d}', f'cudnn_{d}')}" for d in ("fwd", "bwd")]
        cells += ["/".join(str(r.get(f"max_abs_diff_{g}_vs_flash") or "–") for g in GRADS)]
        lines.append("| " + " | ".join(cells) + " |")
    first = rows[0]
    where = ", ".join(f"{k} {first[k]}" for k in ("device", "torch", "triton", "commit") if first.get(k))
    title = (f"Attention, bf16, B·S = {TOKENS}, H·D = {WIDTH}, TFLOP/s (FLOPs 4·B·H·S²·D, half when causal; "
             f"backward 2.5×)" + (f" — {where}" if where else ""))
    return title + "\n\n" + "\n".join(lines) + "\n"


def plot(rows: list[dict], png) -> Path:
    """TFLOP/s against S: a panel per (D, forward / backward), a line per implementation and (causal, GQA)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    dims = sorted({int(r["D"]) for r in rows})
    fig, axes = plt.subplots(len(dims), 2, figsize=(12, 4 * len(dims)), squeeze=False)
    styles = {("False", False): "-", ("True", False): "--", ("False", True): ":", ("True", True): "-."}
    for i, D in enumerate(dims):
        for j, d in enumerate(("fwd", "bwd")):
            ax = axes[i][j]
            for n, impl in enumerate(IMPLS):
                for (causal, gqa), style in styles.items():
                    pts = [(int(r["S"]), _num(r, f"{impl}_{d}")) for r in rows
                           if int(r["D"]) == D and str(r["causal"]) == causal and (r["H"] != r["Hkv"]) == gqa
                           and _num(r, f"{impl}_{d}")]
                    if pts:
                        xs, ys = zip(*sorted(pts))
                        ax.plot(xs, ys, style, marker="o", color=f"C{n}",
                                label=f"{impl}{' causal' if causal == 'True' else ''}{' GQA' if gqa else ''}")
            ax.set_xscale("log", base=2)
            ax.set_title(f"D = {D}, {'forward' if d == 'fwd' else 'backward'}")
            ax.set_xlabel("S")
            ax.set_ylabel("TFLOP/s")
            ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    png = Path(png)
    fig.savefig(png, dpi=110)
    plt.close(fig)
    return png

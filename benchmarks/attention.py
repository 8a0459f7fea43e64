"""Attention sweep: onlinesoftmax.attention (Triton, FA2) beside SDPA's flash, cuDNN and efficient backends, forward
and backward, in one run on one GPU, in bf16, on the anchors' shapes (../shared/anchors/h200-wave2.md):
B * S = 16384 tokens, H * D = 2048, S in {1024, 4096, 16384} x D in {64, 128} x causal x GQA (H / Hkv = 4).

    PYTHONPATH=src python benchmarks/attention.py benchmarks/results/h200x2-attention   # writes .csv and .md

TFLOP/s with FLOPs = 4 B H S^2 D, half when causal; the backward counts 2.5x the forward's. Times are
triton.testing.do_bench medians (forward: the call; backward: o.backward(dO) on a kept graph, gradients reset to
None). The first call of ours at a new key autotunes (attention_rules' candidates) before anything is timed. The
efficient backend has no GQA kernel in this torch: '-' there. Every result is checked (ours vs flash, max abs
difference of O, dQ, dK, dV on the same inputs) so a fast wrong kernel cannot enter the table unseen.
"""

from __future__ import annotations

import argparse
import csv
import itertools
import os
import platform
import subprocess
import sys

import torch
import torch.nn.functional as F
import triton
from torch.nn.attention import SDPBackend, sdpa_kernel

import onlinesoftmax as osm
from onlinesoftmax.engines.triton import attention as triton_attention

TOKENS, WIDTH, GQA_RATIO = 16384, 2048, 4
IMPLS = ("ours", "flash", "cudnn", "efficient")
BACKENDS = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION,
            "efficient": SDPBackend.EFFICIENT_ATTENTION}


def _call(impl, q, k, v, causal):
    if impl == "ours":
        return lambda: osm.attention(q, k, v, causal=causal)
    gqa = q.shape[1] != k.shape[1]

    def sdpa():
        with sdpa_kernel(BACKENDS[impl]):
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=gqa)
    return sdpa


def measure(impl, S, D, causal, gqa):
    B, H = TOKENS // S, WIDTH // D
    Hkv = H // GQA_RATIO if gqa else H
    g = torch.Generator(device="cuda").manual_seed(0)
    q = torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16, generator=g).requires_grad_()
    k = torch.randn(B, Hkv, S, D, device="cuda", dtype=torch.bfloat16, generator=g).requires_grad_()
    v = torch.randn(B, Hkv, S, D, device="cuda", dtype=torch.bfloat16, generator=g).requires_grad_()
    fn = _call(impl, q, k, v, causal)
    try:
        o = fn()
    except RuntimeError as exc:  # no kernel of this backend for this shape
        return None, None, None, str(exc).splitlines()[0][:80]
    do = torch.randn(o.shape, device="cuda", dtype=o.dtype, generator=g)
    o.backward(do, retain_graph=True)  # the backward's first call (its autotuning for ours)
    results = (o.detach(), q.grad.clone(), k.grad.clone(), v.grad.clone())
    with torch.no_grad():
        fwd_ms = triton.testing.do_bench(fn)
    bwd_ms = triton.testing.do_bench(lambda: o.backward(do, retain_graph=True), grad_to_none=[q, k, v])
    flops = 4 * B * H * S * S * D * (0.5 if causal else 1.0)
    return results, flops / fwd_ms / 1e9, 2.5 * flops / bwd_ms / 1e9, ""


def environment() -> str:
    commit = os.environ.get("ONLINESOFTMAX_COMMIT") or subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    return (f"GPU {torch.cuda.get_device_name()}, torch {torch.__version__} (cuDNN {torch.backends.cudnn.version()}),"
            f" triton {triton.__version__}, python {platform.python_version()}, commit {commit or '?'}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", help="path without suffix: writes OUT.csv and OUT.md")
    ap.add_argument("--lengths", type=int, nargs="+", default=[1024, 4096, 16384])
    ap.add_argument("--dims", type=int, nargs="+", default=[64, 128])
    args = ap.parse_args()
    rows = []
    print(environment(), flush=True)
    for S, D, causal, gqa in itertools.product(args.lengths, args.dims, (False, True), (False, True)):
        row = dict(S=S, D=D, causal=causal, H=WIDTH // D, Hkv=WIDTH // D // (GQA_RATIO if gqa else 1))
        outputs = {}
        for impl in IMPLS:
            if impl == "efficient" and gqa:
                row[f"{impl}_fwd"] = row[f"{impl}_bwd"] = ""
                continue
            o, fwd, bwd, note = measure(impl, S, D, causal, gqa)
            outputs[impl] = o
            row[f"{impl}_fwd"] = f"{fwd:.1f}" if fwd else ""
            row[f"{impl}_bwd"] = f"{bwd:.1f}" if bwd else ""
            if note:
                print(f"  {impl}: {note}", flush=True)
            torch.cuda.empty_cache()
        if outputs.get("ours") is not None and outputs.get("flash") is not None:
            for name, a, b in zip(("O", "dQ", "dK", "dV"), outputs["ours"], outputs["flash"]):
                row[f"max_abs_diff_{name}_vs_flash"] = f"{(a.float() - b.float()).abs().max():.3g}"
        rows.append(row)
        print(row, flush=True)
    fields = list(rows[0])
    with open(args.out + ".csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields)
        w.writeheader()
        w.writerows(rows)
    with open(args.out + ".md", "w") as f:
        f.write(f"# Attention sweep, bf16, B*S = {TOKENS}, H*D = {WIDTH} (TFLOP/s)\n\n{environment()}\n\n"
                f"Command: `{' '.join(sys.argv)}`\n\n")
        f.write("| S | D | causal | H/Hkv | ours fwd | flash fwd | cuDNN fwd | eff. fwd | ours bwd | flash bwd | "
                "cuDNN bwd | eff. bwd | ours/flash fwd | ours/flash bwd | max abs diff vs flash O/dQ/dK/dV |\n|"
                + "---|" * 15 + "\n")
        for r in rows:
            def ratio(a, b):
                return f"{float(r[a]) / float(r[b]):.2f}" if r[a] and r[b] else "-"
            cells = [r["S"], r["D"], r["causal"], f"{r['H']}/{r['Hkv']}"]
            cells += [r[f"{i}_fwd"] or "-" for i in IMPLS] + [r[f"{i}_bwd"] or "-" for i in IMPLS]
            cells += [ratio("ours_fwd", "flash_fwd"), ratio("ours_bwd", "flash_bwd")]
            cells += ["/".join(r.get(f"max_abs_diff_{n}_vs_flash", "-") for n in ("O", "dQ", "dK", "dV"))]
            f.write("| " + " | ".join(map(str, cells)) + " |\n")
        f.write("\nAutotuned configurations (key: HEAD_D, CAUSAL, Sq bucket, Sk bucket, dtypes):\n\n")
        for kernel, picks in triton_attention.best_configs().items():
            for key, cfg in picks.items():
                f.write(f"- {kernel} {key}: {cfg}\n")


if __name__ == "__main__":
    main()

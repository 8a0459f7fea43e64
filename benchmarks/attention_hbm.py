"""HBM bytes of the attention rungs, measured with Nsight Compute beside the models (issue 16).

    python benchmarks/attention_hbm.py run B H S D [--causal]    each rung once, then SDPA flash once (under ncu)
    python benchmarks/attention_hbm.py summarize NCU_CSV B H S D [--causal]    Markdown: measured vs model

benchmarks/device.sh attention-hbm runs the first under
    ncu --csv --print-units base -k 'regex:attn_|online_v4|flash' --metrics dram__bytes_read.sum,dram__bytes_write.sum,
        lts__t_sectors_srcunit_tex_op_read.sum
(every kernel is launched exactly once, so every profiled launch is one rung's), then the second on its output.
L2->SM is the L2 sectors read by the SMs' load units (32 bytes each).
"""

import argparse
import csv
import io
import sys

import torch

from onlinesoftmax.harness.attention import candidates, inputs
from onlinesoftmax.ladder import attention as at

METRICS = ("dram__bytes_read.sum", "dram__bytes_write.sum", "lts__t_sectors_srcunit_tex_op_read.sum")


def run(B, H, S, D, causal):
    q, k, v = inputs(B, H, S, D, torch.bfloat16)
    for name, _label, call, rung in candidates():
        if rung is not None or name == "torch.sdpa_flash":
            call(q, k, v, causal)
            torch.cuda.synchronize()


def _rung_of(kernel: str) -> str:
    if "attn_a0" in kernel or "online_v4" in kernel:
        return "cuda.attn_a0"
    for r in ("a1", "a2"):
        if f"attn_{r}" in kernel:
            return f"cuda.attn_{r}"
    return "torch.sdpa_flash"


def summarize(path, B, H, S, D, causal):
    text = open(path, encoding="utf-8", errors="replace").read()
    start = text.find('"ID"')
    if start < 0:
        sys.exit(f"{path}: no ncu CSV in it")
    per: dict = {}
    kernels: dict = {}
    for row in csv.DictReader(io.StringIO(text[start:])):
        name, metric = row.get("Kernel Name", ""), row.get("Metric Name", "")
        if metric not in METRICS:
            continue
        value = float(row["Metric Value"].replace(",", ""))
        unit = row.get("Metric Unit", "")
        scale = {"byte": 1, "Kbyte": 1e3, "Mbyte": 1e6, "Gbyte": 1e9, "sector": 32}.get(unit, 1)
        r = _rung_of(name)
        per.setdefault(r, dict.fromkeys(METRICS, 0.0))[metric] += value * scale
        kernels.setdefault(r, set()).add(name.split("(")[0])
    BH, s = B * H, 2
    print(f"B={B} H={H} S={S} D={D} bf16{' causal' if causal else ''}; GB = 1e9 bytes\n")
    print("| rung | kernels | HBM read GB | HBM write GB | HBM total GB | model GB | L2→SM GB (measured) "
          "| L2→SM GB (model) |\n|---|---|---:|---:|---:|---:|---:|---:|")
    for name, m in per.items():
        rung = at.BY_NAME.get(name)
        model = f"{rung.hbm_bytes(BH, S, D, s, causal) / 1e9:.3g}" if rung else "–"
        l2 = f"{rung.l2_bytes(BH, S, D, s, causal) / 1e9:.3g}" if rung else "–"
        rd, wr, l2m = m[METRICS[0]], m[METRICS[1]], m[METRICS[2]]
        print(f"| {name} | {', '.join(sorted(kernels[name]))} | {rd / 1e9:.3g} | {wr / 1e9:.3g} | "
              f"{(rd + wr) / 1e9:.3g} | {model} | {l2m / 1e9:.3g} | {l2} |")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("mode", choices=("run", "summarize"))
    ap.add_argument("rest", nargs="+")
    ap.add_argument("--causal", action="store_true")
    a = ap.parse_args()
    if a.mode == "run":
        run(*map(int, a.rest), a.causal)
    else:
        summarize(a.rest[0], *map(int, a.rest[1:]), a.causal)


if __name__ == "__main__":
    main()

"""A full training step of a GPT-style model (causal attention with F.softmax, an LM head with F.log_softmax +
F.nll_loss, AdamW) with torch's softmax and with onlinesoftmax.enable() routing it (and its backward) to ours.

    PYTHONPATH=src python benchmarks/train_step.py OUT.csv [--precision fp32 --precision bf16-autocast ...]

Precisions: fp32; bf16-autocast (softmax and log_softmax still run in fp32 under autocast); bf16 (the model in
bf16: the 16-bit kernels). The same model and optimizer serve both modes, in alternating rounds; each round times
`--steps` steps run back to back (CUDA events between them) after `--warmup` untimed ones. Prints and writes, per
precision and mode, the median step time, and for ours the speed-up over torch (torch's median / ours). The loss
of one fixed batch is printed for both modes as a check that routing changes nothing but the kernels.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import math
import os
import statistics

import torch
import torch.nn.functional as F

import onlinesoftmax as osm

PRECISIONS = ("fp32", "bf16-autocast", "bf16")
MODES = ("torch", "onlinesoftmax")


class Block(torch.nn.Module):
    def __init__(self, d: int, heads: int):
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = torch.nn.LayerNorm(d), torch.nn.LayerNorm(d)
        self.qkv = torch.nn.Linear(d, 3 * d, bias=False)
        self.out = torch.nn.Linear(d, d, bias=False)
        self.up, self.down = torch.nn.Linear(d, 4 * d), torch.nn.Linear(4 * d, d)

    def forward(self, h, causal):
        B, T, d = h.shape
        q, k, v = (t.transpose(1, 2) for t in self.qkv(self.norm1(h)).view(B, T, 3, self.heads, -1).unbind(2))
        scores = (q @ k.transpose(-1, -2)) * (1.0 / math.sqrt(d // self.heads))
        att = F.softmax(scores.masked_fill(causal, float("-inf")), dim=-1)
        h = h + self.out((att @ v).transpose(1, 2).reshape(B, T, d))
        return h + self.down(F.gelu(self.up(self.norm2(h))))


class GPT(torch.nn.Module):
    def __init__(self, vocab: int, seq: int, d: int, heads: int, layers: int):
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, d)
        self.pos = torch.nn.Parameter(torch.randn(seq, d) * 0.02)
        self.blocks = torch.nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.norm = torch.nn.LayerNorm(d)
        self.head = torch.nn.Linear(d, vocab, bias=False)

    def forward(self, idx, targets):
        T = idx.shape[1]
        causal = torch.ones(T, T, dtype=torch.bool, device=idx.device).triu_(1)
        h = self.embed(idx) + self.pos[:T]
        for block in self.blocks:
            h = block(h, causal)
        logp = F.log_softmax(self.head(self.norm(h)), dim=-1)
        return F.nll_loss(logp.flatten(0, 1), targets.flatten())


def _timed_steps(step, n: int) -> list[float]:
    """n steps back to back, as a training loop runs them (no synchronisation between steps): the time between
    consecutive events on the stream, ms."""
    events = [torch.cuda.Event(enable_timing=True) for _ in range(n + 1)]
    events[0].record()
    for e in events[1:]:
        step()
        e.record()
    events[-1].synchronize()
    return [a.elapsed_time(b) for a, b in zip(events, events[1:])]


def run(precision: str, args) -> list[dict]:
    torch.manual_seed(0)
    model = GPT(args.vocab, args.seq, args.d, args.heads, args.layers).cuda()
    if precision == "bf16":
        model = model.to(torch.bfloat16)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    idx = torch.randint(0, args.vocab, (args.batch, args.seq), device="cuda")
    targets = torch.randint(0, args.vocab, (args.batch, args.seq), device="cuda")
    autocast = precision == "bf16-autocast"

    def loss_of_batch():
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=autocast):
            return model(idx, targets)

    def step():
        opt.zero_grad(set_to_none=True)
        loss_of_batch().backward()
        opt.step()

    assert not osm.is_enabled()
    with torch.no_grad():
        check = {}
        for mode in MODES:
            with _routing(mode):
                check[mode] = loss_of_batch().item()
    print(f"{precision}: loss of one batch, torch {check['torch']:.6f}, onlinesoftmax {check['onlinesoftmax']:.6f}")
    times = {mode: [] for mode in MODES}
    for r in range(args.rounds):
        for mode in MODES if r % 2 == 0 else MODES[::-1]:  # neither mode always first
            with _routing(mode):
                _timed_steps(step, args.warmup)
                times[mode] += _timed_steps(step, args.steps)
    base = statistics.median(times["torch"])
    rows = []
    for mode in MODES:
        med = statistics.median(times[mode])
        rows.append(dict(precision=precision, mode=mode, median_ms=round(med, 3), min_ms=round(min(times[mode]), 3),
                         steps=len(times[mode]), speedup=round(base / med, 4), loss_check=check[mode]))
    del model, opt
    torch.cuda.empty_cache()
    return rows


def _routing(mode: str):
    return osm.enabled() if mode == "onlinesoftmax" else contextlib.nullcontext()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", help="CSV path")
    ap.add_argument("--precision", action="append", choices=PRECISIONS, help="default: all")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--d", type=int, default=768)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--vocab", type=int, default=50304)
    ap.add_argument("--steps", type=int, default=10, help="timed steps per round and mode")
    ap.add_argument("--warmup", type=int, default=3, help="untimed steps before each round's timed ones")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    config = (f"batch {args.batch} seq {args.seq} d {args.d} heads {args.heads} layers {args.layers} "
              f"vocab {args.vocab}")
    device = torch.cuda.get_device_name()
    print(f"{device}, torch {torch.__version__}; {config}; median of {args.rounds} x {args.steps} steps")
    rows = []
    for precision in args.precision or PRECISIONS:
        rows += run(precision, args)
    print(f"{'precision':14s} {'mode':14s} {'median ms':>10s} {'min ms':>9s} {'speed-up':>9s}")
    for r in rows:
        print(f"{r['precision']:14s} {r['mode']:14s} {r['median_ms']:10.2f} {r['min_ms']:9.2f} {r['speedup']:9.3f}")
    commit = os.environ.get("ONLINESOFTMAX_COMMIT", "unknown")
    with open(args.out, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]) + ["config", "device", "torch", "commit"])
        w.writeheader()
        for r in rows:
            w.writerow(dict(r, config=config, device=device, torch=torch.__version__, commit=commit))


if __name__ == "__main__":
    main()

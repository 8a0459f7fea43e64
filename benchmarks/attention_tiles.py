"""Time each tile candidate of the attention backward's dK/dV kernel, one at a time, beside SDPA's flash backward:
the evidence for the candidate lists of engines/triton/attention_rules.py.

    PYTHONPATH=src python benchmarks/attention_tiles.py [--extra BM,BN,WARPS,STAGES ...] > tiles.txt

For every (S, D, causal, GQA) of the attention sweep at S >= 4096 (B * S = 16384, H * D = 2048, bf16), the
backward (o.backward(dO), triton.testing.do_bench median) runs through the public op with the autotuner's list
narrowed to one candidate, for each candidate of "dkdvq" (dQ by atomics; --extra adds more) and, once, with
torch.use_deterministic_algorithms(True) (the dq kernel). Each candidate's dQ, dK, dV are compared with the
deterministic path's (max |difference|), so a fast wrong tile is seen. TFLOP/s: 2.5 x 4 B H S^2 D, half causal.
"""

from __future__ import annotations

import argparse
import itertools

import torch
import torch.nn.functional as F
import triton
from torch.nn.attention import SDPBackend, sdpa_kernel

from onlinesoftmax.engines.triton import attention_kernels as K
from onlinesoftmax.engines.triton import attention_rules as rules
from onlinesoftmax.harness.attention_sweep import GQA_RATIO, TOKENS, WIDTH
from onlinesoftmax.ops.attention import attention


def only(kernel: str, D: int, candidate) -> None:
    """Narrow the autotuner of `kernel` to one candidate and forget what it picked before."""
    rules.CANDIDATES[kernel, 64 if D <= 64 else 128] = (candidate,)
    tuned = {"dkdvq": K.dkdvq_tuned, "dkdv": K.dkdv_tuned}[kernel]
    if candidate not in {rules.Candidate(c.kwargs["BLOCK_M"], c.kwargs["BLOCK_N"], c.num_warps, c.num_stages)
                         for c in tuned.configs}:
        tuned.configs.append(triton.Config({"BLOCK_M": candidate.BLOCK_M, "BLOCK_N": candidate.BLOCK_N},
                                           num_warps=candidate.num_warps, num_stages=candidate.num_stages))
    tuned.cache.clear()


def backward(q, k, v, causal, do):
    """(median ms of the backward, its dQ, dK, dV)."""
    o = attention(q, k, v, causal=causal)
    o.backward(do, retain_graph=True)
    grads = tuple(t.grad.clone() for t in (q, k, v))
    ms = triton.testing.do_bench(lambda: o.backward(do, retain_graph=True), grad_to_none=[q, k, v])
    return ms, grads


def flash_backward(q, k, v, causal, gqa, do) -> float:
    """Median ms of SDPA flash's backward."""
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        o = F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=gqa)
    return triton.testing.do_bench(lambda: o.backward(do, retain_graph=True), grad_to_none=[q, k, v])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--extra", nargs="*", default=[], help="more dkdvq candidates, BM,BN,WARPS,STAGES")
    ap.add_argument("--lengths", nargs="*", type=int, default=[4096, 16384])
    args = ap.parse_args()
    extra = [rules.Candidate(*map(int, e.split(","))) for e in args.extra]
    lists = {D: tuple(dict.fromkeys(rules.candidates("dkdvq", D) + tuple(extra))) for D in (64, 128)}
    print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}, triton {triton.__version__}")
    print("S D causal H/Hkv | flash bwd | deterministic (dkdv + dq) | dkdvq candidate: TFLOP/s, max diff dQ/dK/dV")
    for S, D, causal, gqa in itertools.product(args.lengths, (64, 128), (False, True), (False, True)):
        B, H = TOKENS // S, WIDTH // D
        Hkv = H // GQA_RATIO if gqa else H
        g = torch.Generator(device="cuda").manual_seed(0)
        q, k, v = (torch.randn(B, h, S, D, device="cuda", dtype=torch.bfloat16, generator=g).requires_grad_()
                   for h in (H, Hkv, Hkv))
        do = torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16, generator=g)
        flops = 2.5 * 4 * B * H * S * S * D * (0.5 if causal else 1.0)
        flash = flash_backward(q, k, v, causal, gqa, do)
        torch.use_deterministic_algorithms(True)
        ms, ref = backward(q, k, v, causal, do)
        torch.use_deterministic_algorithms(False)
        line = f"{S} {D} {causal} {H}/{Hkv} | {flops / flash / 1e9:.0f} | {flops / ms / 1e9:.0f}"
        for c in lists[D]:
            only("dkdvq", D, c)
            try:
                ms, grads = backward(q, k, v, causal, do)
            except triton.runtime.OutOfResources as e:
                line += f" | {tuple(c)}: {type(e).__name__}"
                continue
            diff = "/".join(f"{(a.float() - b.float()).abs().max().item():.2g}" for a, b in zip(grads, ref))
            line += f" | {tuple(c)}: {flops / ms / 1e9:.0f} {diff}"
        print(line, flush=True)
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()

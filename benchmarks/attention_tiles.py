"""Time the tile candidates of the attention backward's kernels one at a time, beside SDPA's flash backward: the
evidence for the candidate lists of engines/triton/attention_rules.py.

    PYTHONPATH=src python benchmarks/attention_tiles.py [--try KERNEL:BM,BN,WARPS,STAGES ...] > tiles.txt

For every (S, D, causal, GQA) of the attention sweep at the given lengths (B * S = 16384, H * D = 2048, bf16),
the backward (o.backward(dO), triton.testing.do_bench median) runs through the public op: first with both
kernels autotuned over their lists ("tuned"), then, for each kernel ("dkdv", "dq") and each of its candidates
(the list's and --try's), with that kernel's list narrowed to the one candidate and the other kernel tuned.
Each run's dQ, dK, dV are compared with the tuned run's (max |difference|), so a fast wrong tile is seen.
TFLOP/s: 2.5 x 4 B H S^2 D, half when causal. A candidate that does not fit shows the error's name.
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

TUNED = {"dkdv": K.dkdv_tuned, "dq": K.dq_tuned}


def narrow(kernel: str, D: int, candidates: tuple) -> None:
    """Let the autotuner of `kernel` pick among `candidates` only, and forget what it picked before."""
    rules.CANDIDATES[kernel, 64 if D <= 64 else 128] = candidates
    tuned = TUNED[kernel]
    known = {rules.Candidate(c.kwargs["BLOCK_M"], c.kwargs["BLOCK_N"], c.num_warps, c.num_stages)
             for c in tuned.configs}
    tuned.configs += [triton.Config({"BLOCK_M": c.BLOCK_M, "BLOCK_N": c.BLOCK_N}, num_warps=c.num_warps,
                                    num_stages=c.num_stages) for c in candidates if c not in known]
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
    ap.add_argument("--try", dest="extra", nargs="*", default=[], metavar="KERNEL:BM,BN,WARPS,STAGES",
                    help="more candidates of a kernel (dkdv or dq), at both head dims")
    ap.add_argument("--lengths", nargs="*", type=int, default=[4096, 16384])
    ap.add_argument("--dims", nargs="*", type=int, default=[64, 128])
    args = ap.parse_args()
    base = {key: tuple(c) for key, c in rules.CANDIDATES.items()}
    extra = {kernel: [] for kernel in TUNED}
    for e in args.extra:
        kernel, tile = e.split(":")
        extra[kernel].append(rules.Candidate(*map(int, tile.split(","))))
    print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}, triton {triton.__version__}")
    print("S D causal H/Hkv | flash | tuned | kernel (BM, BN, warps, stages): TFLOP/s, max diff dQ/dK/dV vs tuned")
    for S, D, causal, gqa in itertools.product(args.lengths, args.dims, (False, True), (False, True)):
        B, H = TOKENS // S, WIDTH // D
        Hkv = H // GQA_RATIO if gqa else H
        g = torch.Generator(device="cuda").manual_seed(0)
        q, k, v = (torch.randn(B, h, S, D, device="cuda", dtype=torch.bfloat16, generator=g).requires_grad_()
                   for h in (H, Hkv, Hkv))
        do = torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16, generator=g)
        flops = 2.5 * 4 * B * H * S * S * D * (0.5 if causal else 1.0)
        line = f"{S} {D} {causal} {H}/{Hkv} | {flops / flash_backward(q, k, v, causal, gqa, do) / 1e9:.0f}"
        for kernel in TUNED:
            narrow(kernel, D, base[kernel, D])
        ms, ref = backward(q, k, v, causal, do)
        line += f" | {flops / ms / 1e9:.0f}"
        for kernel in TUNED:
            for c in dict.fromkeys(base[kernel, D] + tuple(extra[kernel])):
                narrow(kernel, D, (c,))
                try:
                    ms, grads = backward(q, k, v, causal, do)
                except (triton.runtime.OutOfResources, RuntimeError) as e:
                    line += f" | {kernel} {tuple(c)}: {type(e).__name__}"
                    continue
                diff = "/".join(f"{(a.float() - b.float()).abs().max().item():.2g}" for a, b in zip(grads, ref))
                line += f" | {kernel} {tuple(c)}: {flops / ms / 1e9:.0f} {diff}"
            narrow(kernel, D, base[kernel, D])
        print(line, flush=True)
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()

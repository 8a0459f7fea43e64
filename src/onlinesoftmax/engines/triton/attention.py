"""The Triton attention engine's launchers: `attention_forward` -> (O, LSE) and `attention_backward`
-> (dQ, dK, dV) on (B, H, S, D) fp16/bf16 CUDA tensors with unit stride along D (CPU tensors under
TRITON_INTERPRET=1), K and V of Hkv heads with Hkv dividing H.

On a GPU every kernel is autotuned over attention_rules' short candidate list, keyed on the head
dim, causal and the power-of-two buckets of Sq and Sk; under the interpreter one small tile
(INTERPRETER_BLOCK) is used. The op layer validates shapes and dtypes; this layer only refuses
what its kernels cannot run (head dims, strides).

Import this module only after TRITON_INTERPRET is set (if it is to be set): it imports the kernels.
"""

from __future__ import annotations

import contextlib
import threading

import torch

from ...errors import OnlineSoftmaxError
from ...intmath import cdiv
from . import attention_kernels as K
from . import attention_rules as rules

LOG2E = 1.4426950408889634
PREPROCESS_BLOCK = 64
MAX_GRID_Y = 65535  # CUDA's limit on grid axis 1: the (batch, head) pairs, or dK/dV's key tiles when HEADS_FIRST
# Triton's autotuner keeps per-call state (its nargs) while it benchmarks a new key: one tuned launch at a time.
# (A first call at a new key also synchronises to time its candidates: call once before capturing a CUDA graph.)
_TUNING = threading.Lock()
_DKDV_MIN_KEYS = min(c.BLOCK_N for c in rules.KERNELS["dkdv"])  # the shortest key tile dK/dV's autotuner may pick

def _check(names_tensors, head_dim: int, backward: bool) -> None:
    reason = rules.unsupported(head_dim, backward)
    if reason:
        raise OnlineSoftmaxError(reason)
    q = names_tensors[0][1]
    if q.dim() == 4 and q.shape[0] * q.shape[1] > MAX_GRID_Y:
        raise OnlineSoftmaxError(f"batch x heads = {q.shape[0] * q.shape[1]} exceeds the {MAX_GRID_Y} programs the "
                                 "kernels' second grid axis takes: split the batch")
    for name, t in names_tensors:
        if t.dim() != 4 or t.stride(-1) != 1:
            raise OnlineSoftmaxError(f"{name} must be 4-D (B, H, S, D) with unit stride along D, "
                                     f"got shape {tuple(t.shape)} strides {t.stride()}")


def _on_device(t: torch.Tensor):
    """Triton launches on the current device's context and stream: make them the tensors' device."""
    if t.is_cuda and t.device.index != torch.cuda.current_device():
        return torch.cuda.device(t.device)
    return contextlib.nullcontext()


def _strides(t: torch.Tensor) -> tuple:
    return t.stride(0), t.stride(1), t.stride(2)


def _tiles(tuned, plain):
    """The tuned kernel and its meta-parameters on a GPU; the plain kernel with the interpreter's tile under it."""
    if K.interpreting():
        b = rules.INTERPRETER_BLOCK
        return plain, dict(BLOCK_M=b, BLOCK_N=b, num_warps=4, num_stages=1), (lambda meta: b, lambda meta: b)
    return tuned, {}, (lambda meta: meta["BLOCK_M"], lambda meta: meta["BLOCK_N"])


def attention_forward(q, k, v, causal: bool, scale: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(O, LSE, LSE2): O (B, H, Sq, D) in q's dtype, LSE (B, H, Sq) fp32 in natural log (-inf: no visible key),
    LSE2 the same in base 2 as the kernel computed it (what attention_backward takes)."""
    _check((("q", q), ("k", k), ("v", v)), q.shape[-1], backward=False)
    B, H, SQ, D = q.shape
    HKV, SK = k.shape[1], k.shape[2]
    o = torch.empty((B, H, SQ, D), dtype=q.dtype, device=q.device)
    lse = torch.empty((B, H, SQ), dtype=torch.float32, device=q.device)
    lse2 = torch.empty_like(lse)
    if o.numel() == 0:
        return o, lse, lse2
    kernel, meta, (bm, _) = _tiles(K.fwd_tuned, K.fwd_kernel)
    with _on_device(q), _TUNING:
        kernel[lambda m: (cdiv(SQ, bm(m)), B * H)](
            q, k, v, o, lse, lse2, scale * LOG2E, *_strides(q), *_strides(k), *_strides(v), *_strides(o),
            H, H // HKV, SQ, SK, rules.length_bucket(SQ), rules.length_bucket(SK),
            HEAD_D=D, CAUSAL=bool(causal), **meta)
    return o, lse, lse2


def heads_first_dkdv(causal: bool, H: int, HKV: int, SK: int) -> bool:
    """Whether the dK/dV grid starts every head's first key tile first (the kernel's HEADS_FIRST): causal with
    grouped heads, where programs are long and uneven. On the H200 (benchmarks/results/h200-attention-*-37307f5)
    that order took causal GQA at S = 4096, D = 128 from 1.10x to 1.27x flash, but lost 5-15% elsewhere, where
    the programs running at once no longer share a head's Q and dO in L2. The key tiles then ride on grid axis 1
    (at most 65535): a longer key sequence keeps the usual order."""
    return bool(causal) and HKV < H and cdiv(SK, _DKDV_MIN_KEYS) <= MAX_GRID_Y


def attention_backward(q, k, v, o, lse2, do, dlse, causal: bool, scale: float):
    """(dQ, dK, dV) in the inputs' dtypes and shapes, contiguous, given the forward's O and base-2 LSE, dO and the
    (natural) LSE's own gradient dlse (None: zero)."""
    _check((("q", q), ("k", k), ("v", v), ("o", o), ("do", do)), q.shape[-1], backward=True)
    B, H, SQ, D = q.shape
    HKV, SK = k.shape[1], k.shape[2]
    dq, dk, dv = (t.new_empty(t.shape) for t in (q, k, v))  # contiguous whatever the inputs' layout (the fake's)
    if q.numel() == 0 or k.numel() == 0:
        return dq.zero_(), dk.zero_(), dv.zero_()
    delta = torch.empty((B, H, SQ), dtype=torch.float32, device=q.device)
    mlog2 = torch.empty_like(delta)
    if dlse is not None:
        dlse = dlse.to(torch.float32).contiguous()
    keys = (rules.length_bucket(SQ), rules.length_bucket(SK))
    with _on_device(q), _TUNING:
        K.bwd_preprocess[(cdiv(SQ, PREPROCESS_BLOCK), B * H)](
            o, do, lse2.contiguous(), dlse, delta, mlog2, *_strides(o), *_strides(do), H, SQ,
            HEAD_D=D, BLOCK_M=PREPROCESS_BLOCK)
        kernel, meta, (_, bn) = _tiles(K.dkdv_tuned, K.dkdv_kernel)
        heads_first = heads_first_dkdv(causal, H, HKV, SK)
        kernel[lambda m: (B * HKV, cdiv(SK, bn(m))) if heads_first else (cdiv(SK, bn(m)), B * HKV)](
            q, k, v, do, dk, dv, mlog2, delta, scale * LOG2E, scale,
            *_strides(q), *_strides(k), *_strides(v), *_strides(do), *_strides(dk), *_strides(dv),
            H, HKV, H // HKV, SQ, SK, *keys, HEAD_D=D, CAUSAL=bool(causal), HEADS_FIRST=heads_first, **meta)
        kernel, meta, (bm, _) = _tiles(K.dq_tuned, K.dq_kernel)
        kernel[lambda m: (cdiv(SQ, bm(m)), B * H)](
            q, k, v, do, dq, mlog2, delta, scale * LOG2E, scale,
            *_strides(q), *_strides(k), *_strides(v), *_strides(do), *_strides(dq),
            H, H // HKV, SQ, SK, *keys, HEAD_D=D, CAUSAL=bool(causal), **meta)
    return dq, dk, dv


def best_configs() -> dict:
    """What the autotuner picked for every key it has seen (for the benchmark's record)."""
    return {name: {str(key): str(cfg) for key, cfg in kernel.cache.items()}
            for name, kernel in (("forward", K.fwd_tuned), ("dkdv", K.dkdv_tuned), ("dq", K.dq_tuned))}

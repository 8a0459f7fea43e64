"""The public attention ops: scaled dot-product attention on the online (m, d) fold, differentiable, visible to
torch.compile, and the merge of partial results.

    o = onlinesoftmax.attention(q, k, v, causal=True)                 # (B, H, Sq, D), like SDPA
    o, lse = onlinesoftmax.attention(q, k, v, return_lse=True)        # lse (B, H, Sq) fp32, natural log
    o, lse = onlinesoftmax.merge_attention(o1, lse1, o2, lse2)        # two disjoint key sets -> their union

Semantics (reference.attention is the specification):
- q (B, H, Sq, D), k and v (B, Hkv, Sk, D) with Hkv dividing H (grouped-query attention: query head h reads
  key/value head h // (H / Hkv)); Sq != Sk allowed; causal aligns to the bottom right (query i sees key j iff
  j <= i + Sk - Sq), as flash-attn; scale defaults to 1/sqrt(D) and must be a positive finite float;
- a row with no visible key (Sk = 0, or causal with Sq > Sk) gives O = 0 and LSE = -inf, and zero
  gradients, never NaN (SDPA gives NaN there);
- gradients flow to q, k, v through O and through LSE (dLSE folds into the backward's delta), so a merged
  result (ring attention, split-KV) trains.

Backends:
- "triton": FlashAttention-2 kernels (engines/triton/attention.py): fp16/bf16 CUDA tensors, head dim 64 or
  128 forward and backward, 256 forward only (16 and 32 too, for the interpreter tests); the default for fp16 and
  bf16 CUDA tensors;
- "reference": torch ops in fp32 (float64 for float64) on the tensors' device, through the same state.py fold:
  materialises the (Sq, Sk) scores, so for checking and small problems; the default for CPU tensors and for
  fp32/fp64 CUDA tensors, any head dim.

Two ways in, one autograd rule (as ops/softmax.py): eager calls go through a thin autograd.Function around the
launchers; torch.compile traces `torch.ops.onlinesoftmax.attention_forward/backward`, custom ops with fake
kernels and registered autograd, so `fullgraph=True` holds.
"""

from __future__ import annotations

import math
import os
from typing import Optional

import torch

from .. import state
from . import engines
from ..errors import ArgumentTypeError, OnlineSoftmaxError

BACKENDS = ("auto", "triton", "reference")
KERNEL_DTYPES = (torch.float16, torch.bfloat16)
DTYPES = KERNEL_DTYPES + (torch.float32, torch.float64)
NEG_INF = float("-inf")
LOG2E = 1.4426950408889634


# ------------------------------------------------------------------------------- validation
def _dtype_names(dtypes) -> str:
    return ", ".join(str(d).replace("torch.", "") for d in dtypes)


def resolve(q, k, v, causal, scale, backend: str, grad: bool) -> tuple[float, str]:
    """The scale and the backend that runs (one of _FORWARD's keys), or a clear error. grad: a backward will be
    asked for (the kernels' backward takes fewer head dims than their forward)."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise ArgumentTypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dim() != 4:
            raise OnlineSoftmaxError(f"{name} must be 4-D (B, H, S, D), got shape {tuple(t.shape)}")
    if not isinstance(causal, bool):
        raise ArgumentTypeError(f"causal must be a bool, got {type(causal).__name__}")
    B, H, _, D = q.shape
    if k.shape != v.shape:
        raise OnlineSoftmaxError(f"k and v must have one shape (B, Hkv, Sk, D), got {tuple(k.shape)} and "
                                 f"{tuple(v.shape)}")
    if k.shape[0] != B or k.shape[3] != D:
        raise OnlineSoftmaxError(f"k and v {tuple(k.shape)} must share q's batch and head dim: q is {tuple(q.shape)}")
    if k.shape[1] == 0 or H % k.shape[1]:
        raise OnlineSoftmaxError(f"the key/value heads ({k.shape[1]}) must divide the query heads ({H})")
    if not (q.dtype == k.dtype == v.dtype):
        raise OnlineSoftmaxError(f"q, k, v must share a dtype, got {q.dtype}, {k.dtype}, {v.dtype}")
    if q.dtype not in DTYPES:
        raise OnlineSoftmaxError(f"dtype {q.dtype} not supported (supported: {_dtype_names(DTYPES)})")
    if not (q.device == k.device == v.device):
        raise OnlineSoftmaxError(f"q, k, v must be on one device, got {q.device}, {k.device}, {v.device}")
    if scale is None:
        scale = 1.0 / math.sqrt(D) if D else 1.0
    if isinstance(scale, bool) or not isinstance(scale, (int, float)):
        raise ArgumentTypeError(f"scale must be a float, got {type(scale).__name__}")
    scale = float(scale)
    if not (math.isfinite(scale) and scale > 0):
        raise OnlineSoftmaxError(f"scale must be positive and finite, got {scale}")
    if backend == "auto":
        backend = "triton" if q.is_cuda and q.dtype in KERNEL_DTYPES else "reference"
    elif backend == "triton":
        if not q.is_cuda and os.environ.get("TRITON_INTERPRET") != "1":
            raise OnlineSoftmaxError(f"backend 'triton' needs CUDA tensors; got them on {q.device} "
                                     "(use backend='auto' or 'reference' for CPU tensors)")
        if q.dtype not in KERNEL_DTYPES:
            raise OnlineSoftmaxError(f"backend 'triton' takes {_dtype_names(KERNEL_DTYPES)}, got {q.dtype} "
                                     "(backend='reference' takes any float dtype)")
    elif backend != "reference":
        raise OnlineSoftmaxError(f"unknown backend {backend!r}; choose one of {', '.join(BACKENDS)}")
    if backend == "triton":
        from ..engines.triton import attention_rules as rules

        reason = rules.unsupported(D, backward=False) or (grad and rules.unsupported(D, backward=True))
        if reason:
            raise OnlineSoftmaxError(reason)
    if q.numel() == 0 or k.shape[2] == 0:
        return scale, "empty"
    return scale, backend


# ------------------------------------------------------------------------------ the launchers
def forward(q, k, v, causal: bool, scale: float, backend: str):
    """(O, LSE, LSE2) by `backend`, as resolve returns it: O contiguous in q's dtype, LSE fp32 (float64 for
    float64) in natural log, LSE2 the same in base 2 as the engine computed it: what `backward` takes (the Triton
    kernels' backward needs the forward's own base-2 value; converting LSE back would cost precision)."""
    return _FORWARD[backend](q, k, v, causal, scale)


def backward(q, k, v, o, lse2, do, dlse, causal: bool, scale: float, backend: str):
    """(dQ, dK, dV), contiguous, from the forward's inputs, O and LSE2, and the gradients of O and LSE (dlse None:
    zero)."""
    return _BACKWARD[backend](q, k, v, o, lse2, do.to(q.dtype), dlse, causal, scale)


def _unit_stride(t: torch.Tensor) -> torch.Tensor:
    return t if t.stride(-1) == 1 else t.contiguous()


def _triton_forward(q, k, v, causal, scale):
    q, k, v = (_unit_stride(t) for t in (q, k, v))
    return engines.triton("attention").attention_forward(q, k, v, causal, scale)


def _triton_backward(q, k, v, o, lse2, do, dlse, causal, scale):
    q, k, v, o, do = (_unit_stride(t) for t in (q, k, v, o, do))
    return engines.triton("attention").attention_backward(q, k, v, o, lse2, do, dlse, causal, scale)


def _accumulator(dtype: torch.dtype) -> torch.dtype:
    return torch.float64 if dtype == torch.float64 else torch.float32


def _reference_probabilities(q, k, causal, scale):
    """(q, k expanded to q's heads, P, LSE) in the accumulator dtype, through state.py's guarded fold."""
    acc = _accumulator(q.dtype)
    group = q.shape[1] // k.shape[1]
    qf, kf = q.to(acc), k.to(acc).repeat_interleave(group, dim=1)
    s = scale * (qf @ kf.transpose(-1, -2))
    if causal:
        sq, sk = s.shape[-2:]
        visible = torch.ones(sq, sk, dtype=torch.bool, device=s.device).tril(sk - sq)
        s = s.masked_fill(~visible, NEG_INF)
    m, d = state.of_values(s, axis=-1)
    lse = torch.where(d == 0, torch.full_like(d, NEG_INF), state.safe_shift(m) + torch.log(d)).squeeze(-1)
    return qf, kf, state.probabilities(s, (m, d)), lse


def _reference_forward(q, k, v, causal, scale):
    _, _, p, lse = _reference_probabilities(q, k, causal, scale)
    vf = v.to(p.dtype).repeat_interleave(q.shape[1] // k.shape[1], dim=1)
    return (p @ vf).to(q.dtype), lse, lse * LOG2E


def _reference_backward(q, k, v, o, lse2, do, dlse, causal, scale):
    """reference.attention_backward in torch: dS = P (dP - rowsum(dO O) + dLSE), P recomputed (from the scores:
    o and lse2 are not used)."""
    group = q.shape[1] // k.shape[1]
    qf, kf, p, _ = _reference_probabilities(q, k, causal, scale)
    vf, dof = v.to(p.dtype).repeat_interleave(group, dim=1), do.to(p.dtype)
    delta = (dof * (p @ vf)).sum(-1, keepdim=True)
    if dlse is not None:
        delta = delta - dlse.to(p.dtype).unsqueeze(-1)
    ds = p * (dof @ vf.transpose(-1, -2) - delta)
    dq = scale * (ds @ kf)
    dk = scale * (ds.transpose(-1, -2) @ qf)
    dv = p.transpose(-1, -2) @ dof

    def group_sum(g):
        b, h, s, d = g.shape
        return g.view(b, h // group, group, s, d).sum(2)

    return dq.to(q.dtype), group_sum(dk).to(k.dtype), group_sum(dv).to(v.dtype)


def _empty_forward(q, k, v, causal, scale):
    """No query, or no key: O = 0, LSE = -inf (every row has no visible key)."""
    B, H, SQ, D = q.shape
    lse = torch.full((B, H, SQ), NEG_INF, dtype=_accumulator(q.dtype), device=q.device)
    return torch.zeros((B, H, SQ, D), dtype=q.dtype, device=q.device), lse, lse.clone()


def _empty_backward(q, k, v, o, lse2, do, dlse, causal, scale):
    return q.new_zeros(q.shape), k.new_zeros(k.shape), v.new_zeros(v.shape)


_FORWARD = {"triton": _triton_forward, "reference": _reference_forward, "empty": _empty_forward}
_BACKWARD = {"triton": _triton_backward, "reference": _reference_backward, "empty": _empty_backward}


# ---------------------------------------------------------------------- torch.compile: custom ops
@torch.library.custom_op("onlinesoftmax::attention_forward", mutates_args=())
def attention_forward_op(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, scale: float,
                         backend: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return forward(q, k, v, causal, scale, backend)


@attention_forward_op.register_fake
def _(q, k, v, causal, scale, backend):
    B, H, SQ, D = q.shape
    acc = _accumulator(q.dtype)
    return q.new_empty((B, H, SQ, D)), q.new_empty((B, H, SQ), dtype=acc), q.new_empty((B, H, SQ), dtype=acc)


@torch.library.custom_op("onlinesoftmax::attention_backward", mutates_args=())
def attention_backward_op(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, o: torch.Tensor, lse2: torch.Tensor,
                          do: torch.Tensor, dlse: Optional[torch.Tensor], causal: bool, scale: float,
                          backend: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return backward(q, k, v, o, lse2, do, dlse, causal, scale, backend)


@attention_backward_op.register_fake
def _(q, k, v, o, lse2, do, dlse, causal, scale, backend):  # every backend's gradients are contiguous
    return q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape)


# ---------------------------------------------------------------- one autograd rule, two ways in
# LSE2 (the base-2 LSE) is an output only so that the backward can have it; it is never returned to users, so
# no gradient reaches it.
def _setup_context(ctx, inputs, output):
    q, k, v, causal, scale, backend = inputs
    o, _, lse2 = output
    ctx.save_for_backward(q, k, v, o, lse2)
    ctx.args = (causal, scale, backend)


def _gradient(ctx, do, dlse, backward_fn):
    q, k, v, o, lse2 = ctx.saved_tensors
    if do is None:
        do = torch.zeros_like(o)
    dq, dk, dv = backward_fn(q, k, v, o, lse2, do, dlse, *ctx.args)
    return dq, dk, dv, None, None, None


attention_forward_op.register_autograd(lambda ctx, do, dlse, _: _gradient(ctx, do, dlse, attention_backward_op),
                                       setup_context=_setup_context)


class _Attention(torch.autograd.Function):
    setup_context = staticmethod(_setup_context)

    @staticmethod
    def forward(q, k, v, causal, scale, backend):
        return forward(q, k, v, causal, scale, backend)

    @staticmethod
    def backward(ctx, do, dlse, _):
        return _gradient(ctx, do, dlse, backward)


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, causal: bool = False,
              scale: Optional[float] = None, return_lse: bool = False, backend: str = "auto"):
    """Scaled dot-product attention, softmax(scale q k^T [+ causal mask]) v, per head: O (B, H, Sq, D) in q's
    dtype, and with return_lse=True also LSE (B, H, Sq) in fp32 (natural log; -inf for a row with no visible
    key, whose O is 0). k and v may have fewer heads than q (grouped-query attention). See the module docstring."""
    grad = torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v) if isinstance(t, torch.Tensor))
    scale, backend = resolve(q, k, v, causal, scale, backend, grad)
    if torch.compiler.is_compiling():
        o, lse, _ = attention_forward_op(q, k, v, causal, scale, backend)
    elif grad:
        o, lse, _ = _Attention.apply(q, k, v, causal, scale, backend)
    else:
        o, lse, _ = forward(q, k, v, causal, scale, backend)
    return (o, lse) if return_lse else o


def merge_attention(o1: torch.Tensor, lse1: torch.Tensor, o2: torch.Tensor, lse2: torch.Tensor):
    """(O, LSE) of attention over the union of two disjoint key sets, from each set's (O, LSE) as `attention(...,
    return_lse=True)` gives them: O (..., S, D), LSE (..., S). Overflow-safe (state.merge_lse's sigmoid form); a part
    with LSE = -inf (no visible key) is the identity. Differentiable (torch autograd). O in o1's dtype, computed in
    fp32 (float64 for float64); LSE in the LSEs' dtype."""
    for name, t in (("o1", o1), ("lse1", lse1), ("o2", o2), ("lse2", lse2)):
        if not isinstance(t, torch.Tensor):
            raise ArgumentTypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if o1.shape != o2.shape or lse1.shape != lse2.shape or tuple(o1.shape[:-1]) != tuple(lse1.shape):
        raise OnlineSoftmaxError(f"merge_attention needs o1, o2 of one shape (..., S, D) and lse1, lse2 of shape "
                                 f"(..., S); got o {tuple(o1.shape)}, {tuple(o2.shape)}, lse {tuple(lse1.shape)}, "
                                 f"{tuple(lse2.shape)}")
    acc = _accumulator(o1.dtype)
    lse_dtype = torch.promote_types(lse1.dtype, lse2.dtype)
    o, lse = state.merge_lse(o1.to(acc), lse1.to(acc), o2.to(acc), lse2.to(acc))
    return o.to(o1.dtype), lse.to(lse_dtype)

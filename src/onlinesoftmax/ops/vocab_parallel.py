"""Vocab-parallel cross-entropy through torch.distributed: the logits sharded over V across a process group,
exactly ONE collective in the forward and none in the backward.

    loss = onlinesoftmax.vocab_parallel_cross_entropy(logits_shard, target, vocab_start, vocab_size, group=g)

Every rank holds the same targets (N,) (global class indices) and its own columns [vocab_start, vocab_start + V_r)
of the (N, vocab_size) logits; shards may be uneven, even empty. The forward:
1. folds its shard's rows into (m, d), the target logit (0 when the target is in another shard) and the row sum
   (label smoothing): one read of the shard (the Triton stats kernel, or torch ops on CPU);
2. packs them, with one header row (vocab_start, V_r, N, vocab_size), into an (N + 1, 4) fp32 tensor (fp64 for
   fp64 logits) and makes the ONE collective: an all_gather;
3. merges the ranks' states with state.merge (the same (m, d) algebra as every other fold), sums the target
   logits and row sums: the global lse and the loss, the same formula as the single-GPU path; checks from the
   gathered headers that the shards tile [0, vocab_size) (every rank sees the same headers, so every rank
   raises the same error: no hang);
4. writes its shard's gradient from the global lse (a second read of the shard), scaled for the reduction.
The backward multiplies that gradient by grad_output, locally: no collective.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from .. import state
from ..errors import OnlineSoftmaxError
from . import cross_entropy as ce


def _check_shards(headers: torch.Tensor, vocab_size: int, rows: int) -> None:
    """The gathered headers (world, 4) = (start, width, rows, vocab_size) must tile [0, vocab_size)."""
    h = headers.double().tolist()
    if any(int(r[2]) != rows or int(r[3]) != vocab_size for r in h):
        raise OnlineSoftmaxError(f"mismatched shards: the ranks disagree on the rows or vocab_size "
                                 f"(start, width, rows, vocab_size) per rank = {[tuple(map(int, r)) for r in h]}")
    spans = sorted((int(r[0]), int(r[1])) for r in h)
    at = 0
    for start, width in spans:
        if start != at:
            raise OnlineSoftmaxError(f"mismatched shards: the shards (start, width) = {spans} do not tile "
                                     f"[0, {vocab_size}) (a gap or an overlap at column {min(at, start)})")
        at = start + width
    if at != vocab_size:
        raise OnlineSoftmaxError(f"mismatched shards: the shards (start, width) = {spans} cover [0, {at}), "
                                 f"not [0, {vocab_size})")


def forward(x, target, vocab_start, vocab_size, group, ignore_index, label_smoothing, z_loss, softcap,
            reduction, backend, want_grad):
    """(loss, lse, grad of this shard or None) for validated (N, V_r) logits."""
    M, V = x.shape
    acc = ce.accumulator(x.dtype)
    st = ce.shard_stats(x, target, backend, offset=vocab_start, softcap=softcap)
    # float64: the header's integers stay exact beyond 2^24 (fp32 would round them)
    header = torch.tensor([[vocab_start, V, M, vocab_size]], dtype=torch.float64, device=x.device)
    packed = torch.cat([st.double(), header])
    world = dist.get_world_size(group)
    parts = [torch.empty_like(packed) for _ in range(world)]
    dist.all_gather(parts, packed, group=group)  # the one collective
    gathered = torch.stack(parts)  # (world, M + 1, 4)
    _check_shards(gathered[:, M], vocab_size, M)
    # after the collective, so that every rank raises alike (a rank raising alone would leave the others waiting)
    ce.check_targets(target, 0, vocab_size, ignore_index)
    gathered = gathered.to(acc)
    m, d = gathered[0, :M, 0], gathered[0, :M, 1]
    for r in range(1, world):
        m, d = state.merge((m, d), (gathered[r, :M, 0], gathered[r, :M, 1]))
    total = torch.stack([m, d, gathered[:, :M, 2].sum(0), gathered[:, :M, 3].sum(0)], dim=1)
    rows = ce.loss_rows(total, target, ignore_index, label_smoothing, z_loss, vocab_size)
    loss = ce.reduce(rows, target, ignore_index, reduction).to(x.dtype)
    lse = ce.lse_of(total)
    grad = None
    if want_grad:
        scale = ce.grad_scale(target, ignore_index, reduction, torch.float32 if backend == "triton" else acc)
        grad = torch.empty_like(x, memory_format=torch.contiguous_format)
        ce.shard_grad(x, target, lse, scale, backend, grad, offset=vocab_start, v_total=vocab_size,
                      ignore_index=ignore_index, label_smoothing=label_smoothing, z_loss=z_loss, softcap=softcap)
    return loss, lse, grad


class _VocabParallel(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, target, vocab_start, vocab_size, group, ignore_index, label_smoothing, z_loss, softcap,
                reduction, backend):
        loss, lse, ctx.grad = forward(x, target, vocab_start, vocab_size, group, ignore_index, label_smoothing,
                                      z_loss, softcap, reduction, backend, True)
        ctx.backend = backend
        ctx.mark_non_differentiable(lse)
        return loss, lse

    @staticmethod
    def backward(ctx, dloss, _dlse):
        return (ce.handed_grad(ctx, dloss, "the shard's"),) + (None,) * 10


def vocab_parallel_cross_entropy(logits: torch.Tensor, target: torch.Tensor, vocab_start: int, vocab_size: int, *,
                                 group=None, ignore_index: int = -100, label_smoothing: float = 0.0,
                                 z_loss: float = 0.0, reduction: str = "mean", softcap=None,
                                 return_lse: bool = False, backend: str = "auto"):
    """cross_entropy of the (N, vocab_size) logits whose columns [vocab_start, vocab_start + V_r) this rank
    holds (logits (N, V_r)); targets (N,) the same on every rank, global indices. One all_gather forward, no
    collective backward. The loss (and lse) is the same on every rank; the gradient is this shard's."""
    ce.check_options(ignore_index, label_smoothing, z_loss, softcap, reduction)
    x, t = ce.check_logits_target(logits, target)
    if logits.dim() != 2:
        raise OnlineSoftmaxError(f"logits must be (N, V_r), got shape {tuple(logits.shape)}")
    for name, v in (("vocab_start", vocab_start), ("vocab_size", vocab_size)):
        if isinstance(v, bool) or not isinstance(v, int):
            raise OnlineSoftmaxError(f"{name} must be an int, got {type(v).__name__}")
    # a shard outside [0, vocab_size) and targets out of range are caught after the collective, on every rank
    # alike (raising here, on one rank, would leave the others waiting in the all_gather)
    backend = ce.pick_backend(x, backend, cuda=False)  # its kernels (stats, gradient from lse) are Triton
    softcap = None if softcap is None else float(softcap)
    args = (vocab_start, vocab_size, group, ignore_index, float(label_smoothing), float(z_loss), softcap,
            reduction, backend)
    if logits.requires_grad and torch.is_grad_enabled():
        loss, lse = _VocabParallel.apply(x, t, *args)
    else:
        loss, lse, _ = forward(x, t, *args, False)
    return (loss, lse.detach()) if return_lse else loss

"""The Triton cross-entropy launchers, on 2-D logits (M, V) with column stride 1 and any row stride, fp32, fp16
or bf16; the targets (M,) int; fp32 per-row outputs; the gradient in the logits' dtype (it may be the logits
themselves: written in place).

    target_info(t, V, ignore_index, mean, info)        info (4,) fp32 <- (scale, non-ignored rows, any bad target)
    cross_entropy(x, t, grad=g, scale=info, loss=l, lse=s)     fused: loss and lse per row, and the gradient
    cross_entropy(x, t, loss=l, lse=s)                         loss only: one read, no gradient
    cross_entropy(x, t, stats=st, offset=o)                    a shard's stats (m, d, x[target], sum x) per row
    cross_entropy(x, t, grad=g, scale=info, lse_in=s, ...)     the gradient from the rows' lse (vocab-parallel)
    scale_rows(g, go)                                           g *= go (per row, or a scalar), not where it is 1

Import this module only after TRITON_INTERPRET is set (if it is to be set): it imports the kernels.
"""

from __future__ import annotations

from typing import Optional

import torch

from ...errors import OnlineSoftmaxError
from . import cross_entropy_rules as rules
from .cross_entropy_kernels import rows_kernel, scale_rows_kernel, split_kernel, target_kernel
from .softmax import sm_count


def _on_device(t: torch.Tensor, launch) -> None:
    if t.is_cuda and t.device.index != torch.cuda.current_device():
        with torch.cuda.device(t.device):
            launch()
    else:
        launch()


def target_info(target: torch.Tensor, V: int, ignore_index: int, mean: bool, info: torch.Tensor) -> torch.Tensor:
    """info[:3] <- (1 / non-ignored rows if mean else 1, non-ignored rows, 1.0 if a target is out of [0, V) and
    not ignore_index): one small launch, no sync."""
    _on_device(target, lambda: target_kernel[(1,)](target, info, target.shape[0], V, ignore_index, MEAN=mean,
                                                   BLOCK=1024, num_warps=4))
    return info


def cross_entropy(x: torch.Tensor, target: torch.Tensor, *, stats: Optional[torch.Tensor] = None,
                  loss: Optional[torch.Tensor] = None, lse: Optional[torch.Tensor] = None,
                  grad: Optional[torch.Tensor] = None, lse_in: Optional[torch.Tensor] = None,
                  scale: Optional[torch.Tensor] = None, ignore_index: int = -100, offset: int = 0,
                  v_total: Optional[int] = None, label_smoothing: float = 0.0, z_loss: float = 0.0,
                  softcap: Optional[float] = None, regime: Optional[str] = None) -> None:
    """One launch over the rows of x (see the module docstring for what each output means). scale: a device
    tensor whose first element multiplies every gradient (target_info's). offset: the shard's first column in the
    full vocabulary of v_total columns (vocab-parallel)."""
    if x.dim() != 2 or (x.shape[1] > 1 and x.stride(1) != 1):
        raise OnlineSoftmaxError(f"logits must be 2-D with column stride 1, got shape {tuple(x.shape)} "
                                 f"strides {x.stride()}")
    M, V = x.shape
    mode = rules.MODES["grad" if lse_in is not None else "fused" if grad is not None else "stats"]
    regime = regime or rules.pick_regime(V)
    reason = rules.unsupported(regime, V, x.dtype)
    if reason:
        raise OnlineSoftmaxError(reason)
    if M == 0 or V == 0:
        return
    sms = sm_count(x.device)
    g = grad if grad is not None else x  # pointers a launch does not use are never dereferenced
    common = dict(ignore_index=ignore_index, offset=offset, inv_v=1.0 / (v_total or V), eps=float(label_smoothing),
                  z=float(z_loss), cap=float(softcap or 1.0))
    # SMOOTH: the rows' sum of logits; the stats of a shard always carry it (vocab-parallel merges them first)
    flags = dict(MODE=mode, SOFTCAP=softcap is not None, SMOOTH=label_smoothing != 0.0 or stats is not None,
                 STATS=stats is not None, LOSS=loss is not None)
    pointers = (x, g, target, x if stats is None else stats, x if loss is None else loss,
                lse_in if lse_in is not None else x if lse is None else lse, x if scale is None else scale)
    if regime == "rows":
        cfg = rules.rows_config(V, x.dtype)
        grid = (rules.rows_programs(cfg, sms, M),)
        _on_device(x, lambda: rows_kernel[grid](
            *pointers, M, V, x.stride(0), g.stride(0), **common, BLOCK=cfg.BLOCK, **flags,
            NUM_STAGES=cfg.num_stages, num_warps=cfg.num_warps, num_stages=cfg.num_stages))
        return
    cfg = rules.split_config(V, x.dtype)
    tasks = M * cfg.C
    progs = rules.split_programs(sms, tasks)
    lag = 0 if mode == rules.MODES["grad"] else rules.split_lag(cfg.C, M, progs)
    ws = torch.empty(4 * tasks if mode != rules.MODES["grad"] else 1, dtype=torch.float32, device=x.device)
    sync = torch.zeros(M + 1, dtype=torch.int32, device=x.device)
    _on_device(x, lambda: split_kernel[(progs,)](
        *pointers, ws, sync, M, V, x.stride(0), g.stride(0), cfg.C, lag, **common,
        CHUNK=cfg.CHUNK, SEG_CHUNKS=cfg.SEG_CHUNKS, PBLOCK=cfg.PBLOCK, **flags, LANES=cfg.LANES,
        num_warps=cfg.num_warps, num_stages=1))


def scale_rows(g: torch.Tensor, go: torch.Tensor) -> None:
    """g (M, N) *= go: a scalar, or one value per row; rows whose factor is 1 are not touched (decided on the
    device: the usual loss.backward() passes 1 and costs one tiny launch, no sync)."""
    M, N = g.shape
    if M == 0 or N == 0:
        return
    go = go.reshape(-1)
    scalar = go.numel() == 1
    if g.stride(1) != 1:  # the kernel walks a row's elements at unit stride
        g.mul_(go.to(g.dtype) if scalar else go.to(g.dtype).reshape(-1, 1))
        return
    grid = (rules.programs(sm_count(g.device), 4, M),)
    _on_device(g, lambda: scale_rows_kernel[grid](g, go, M, N, g.stride(0), 0 if scalar else 1, BLOCK=2048,
                                                  SCALAR=scalar, num_warps=8))

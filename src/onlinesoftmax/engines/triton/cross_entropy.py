"""The Triton cross-entropy launchers, on 2-D logits (M, V) with column stride 1 and any row stride, fp32, fp16
or bf16; the statistics in fp32 (M, 4) = (m, d, x[target], sum x) per row, the gradient in the logits' dtype
(it may be the logits themselves: written in place).

    cross_entropy(x, target, stats, grad=g, scale=s, ...)            mode "fused": stats and gradient
    cross_entropy(x, target, stats, ...)                             mode "stats": one read, no gradient
    cross_entropy(x, target, None, grad=g, lse=l, scale=s, ...)      mode "grad": the gradient from lse
    scale_rows(g, go)                                                g *= go (per row, or a scalar), not where 1

Import this module only after TRITON_INTERPRET is set (if it is to be set): it imports the kernels.
"""

from __future__ import annotations

from typing import Optional

import torch

from ...errors import OnlineSoftmaxError
from . import cross_entropy_rules as rules
from .cross_entropy_kernels import rows_kernel, scale_rows_kernel, split_kernel
from .softmax import sm_count


def _on_device(t: torch.Tensor, launch) -> None:
    if t.is_cuda and t.device.index != torch.cuda.current_device():
        with torch.cuda.device(t.device):
            launch()
    else:
        launch()


def cross_entropy(x: torch.Tensor, target: torch.Tensor, stats: Optional[torch.Tensor], *,
                  grad: Optional[torch.Tensor] = None, lse: Optional[torch.Tensor] = None,
                  scale: Optional[torch.Tensor] = None, ignore_index: int = -100, offset: int = 0,
                  v_total: Optional[int] = None, label_smoothing: float = 0.0, z_loss: float = 0.0,
                  softcap: Optional[float] = None, regime: Optional[str] = None) -> None:
    """One launch over the rows of x; the mode follows from what is given (see the module docstring).
    offset: the shard's first column in the full vocabulary of v_total columns (vocab-parallel)."""
    if x.dim() != 2 or (x.shape[1] > 1 and x.stride(1) != 1):
        raise OnlineSoftmaxError(f"logits must be 2-D with column stride 1, got strides {x.stride()}")
    M, V = x.shape
    mode = rules.MODES["grad" if lse is not None else "fused" if grad is not None else "stats"]
    regime = regime or rules.pick_regime(V)
    reason = rules.unsupported(regime, V, x.dtype)
    if reason:
        raise OnlineSoftmaxError(reason)
    if M == 0 or V == 0:
        return
    sms = sm_count(x.device)
    dummy = x  # pointers a mode does not use (never dereferenced)
    g = grad if grad is not None else dummy
    common = dict(ignore_index=ignore_index, offset=offset, inv_v=1.0 / (v_total or V), eps=float(label_smoothing),
                  z=float(z_loss), cap=float(softcap or 1.0))
    flags = dict(MODE=mode, SOFTCAP=softcap is not None, SMOOTH=label_smoothing != 0.0)
    pointers = (x, g, target, stats if stats is not None else dummy, lse if lse is not None else dummy,
                scale if scale is not None else dummy)
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
    stride_go = 0 if go.numel() == 1 else 1
    grid = (rules.programs(sm_count(g.device), 4, M),)
    _on_device(g, lambda: scale_rows_kernel[grid](g, go, M, N, g.stride(0), stride_go, BLOCK=2048, num_warps=8))

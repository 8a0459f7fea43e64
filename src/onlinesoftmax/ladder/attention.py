"""The seeds' Stage 7 as CUDA rungs (seed 001's stage table row 7 and §5.1-5.2, seed 000 §8, seed 002 §8.2):
attention forward O = softmax(Q K^T / sqrt(D)) V, kernels in kernels/attention.cu compiled with NVRTC like the other
rungs. Each rung differs from the one before by one idea:

    cuda.attn_a0  materialised   S = scale Q K^T to HBM (fp32, plain tiled GEMM), the ladder's online_v4 softmax
                                 S -> P in HBM, then O = P V (the same GEMM): three passes over BH x S x S floats
    cuda.attn_a1  online         one warp per query row, K and V streamed from global memory, (m, d) and the output
                                 row rescaled in registers: S is never stored (CUDA cores, as A0)
    cuda.attn_a2  tiled (FA2)    64-row query tiles per CTA, K/V tiles in shared memory (cp.async, double-buffered,
                                 swizzled), Q K^T and P V on tensor cores (mma.sync m16n8k16), P in registers

A3 (Hopper TMA + wgmma, producer/consumer warp groups) is not built.

Tensors: q, k, v of shape [B, H, S, D] or [BH, S, D], contiguous, bf16 or fp16, D in {64, 128}, any S >= 1; the
output has their shape and dtype. Causal: key j is visible to query i when j <= i (torch's is_causal). Nothing here
needs a GPU to import, list or compile (`resources`); running does.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

import numpy as np
import torch

from .. import registry
from ..errors import OnlineSoftmaxError, Unavailable
from ..intmath import cdiv
from ..runtime import available
from . import cuda as ladder

FILE = "attention.cu"
LOG2E = 1.4426950408889634
A0_TILE = 16  # A0_TILE in attention.cu
A1_ROWS = 8  # A1_WARPS: query rows (warps) per block
A2_BM = A2_BN = 64  # A2_BM, A2_BN
A2_THREADS = 128
DTYPES = (torch.bfloat16, torch.float16)
MAX_GRID_YZ = 65535  # BH rides on grid y (A1, A2) or z (A0)


def _t(dtype: torch.dtype) -> str:
    return "true" if dtype == torch.bfloat16 else "false"


def flops(BH: int, S: int, D: int, causal: bool) -> float:
    """4 BH S^2 D (two GEMMs), half when causal: the count torch's and FlashAttention's TFLOP/s use."""
    return 4.0 * BH * S * S * D / (2 if causal else 1)


# ---- models: bytes to and from HBM, loads from L2, workspace --------------------------------------
# s = bytes per element of q, k, v, o. "qkvo" = reading q, k, v and writing o once: 4 BH S D s.


def _qkvo(BH, S, D, s):
    return 4 * BH * S * D * s


def _a0_hbm(BH, S, D, s, causal):
    # scores written (4 S^2), online_v4 reads them twice and writes P (12 S^2), P V reads P (4 S^2); causal masks
    # but does not skip: the S x S matrix is whole either way
    return 20 * BH * S * S + _qkvo(BH, S, D, s)


def _streamed_hbm(BH, S, D, s, causal):
    return _qkvo(BH, S, D, s)  # K and V of a head (S D s each) stay in the 50 MB L2 while they are re-read


def _visible_pairs(S, rows_per_block, causal):
    """Sum over query blocks of the keys each block loads (whole K/V rows)."""
    if not causal:
        return cdiv(S, rows_per_block) * S
    return sum(min(S, (b + 1) * rows_per_block) for b in range(cdiv(S, rows_per_block)))


def _a0_l2(BH, S, D, s, causal):
    # 16 x 16 output tiles: Q K^T loads a 16 x D strip of Q and of K per tile; P V a 16 x S strip of P (fp32) and
    # an S x 16 strip of V per tile; plus the softmax's 3 passes and the writes
    t = A0_TILE
    qk = cdiv(S, t) ** 2 * 2 * t * D * s
    pv = cdiv(S, t) * (D // t) * t * S * (4 + s)
    return BH * (qk + pv) + 16 * BH * S * S + BH * S * D * s


def _a1_l2(BH, S, D, s, causal):
    # every query row (warp) reads the K and V rows it sees
    pairs = S * (S + 1) // 2 if causal else S * S
    return BH * (2 * pairs * D * s + 2 * S * D * s)


def _a2_l2(BH, S, D, s, causal):
    # every 64-row query tile reads the K and V tiles it sees, once, into shared memory
    return BH * (2 * _visible_pairs(S, A2_BM, causal) * D * s + 2 * S * D * s)


def _a0_extra(BH, S):
    return 2 * 4 * BH * S * S  # the fp32 scores and probabilities


def _no_extra(BH, S):
    return 0


# ---- launches ------------------------------------------------------------------------------------


def _run_a0(q, k, v, o, causal):
    BH, S, D = q.shape
    dev = q.device.index
    scores = torch.empty((BH * S, S), dtype=torch.float32, device=q.device)
    probs = torch.empty_like(scores)
    b = _t(q.dtype)
    ladder.launch_kernel(FILE, f"attn_a0_scores<{b}>", dev, (cdiv(S, A0_TILE), cdiv(S, A0_TILE), BH), A0_TILE * A0_TILE,
                   (q.data_ptr(), k.data_ptr(), scores.data_ptr(), np.int32(S), np.int32(D),
                    np.float32(D ** -0.5), np.int32(causal)))
    registry.get("cuda.online_v4").run((scores,), probs)  # the ladder's own row softmax, -inf rows give 0
    ladder.launch_kernel(FILE, f"attn_a0_pv<{b}>", dev, (D // A0_TILE, cdiv(S, A0_TILE), BH), A0_TILE * A0_TILE,
                   (probs.data_ptr(), v.data_ptr(), o.data_ptr(), np.int32(S), np.int32(D)))


def _run_a1(q, k, v, o, causal):
    BH, S, D = q.shape
    ladder.launch_kernel(FILE, f"attn_a1<{D}, {_t(q.dtype)}>", q.device.index, (cdiv(S, A1_ROWS), BH), 32 * A1_ROWS,
                   (q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr(), np.int32(S),
                    np.float32(D ** -0.5 * LOG2E), np.int32(causal)))


def a2_smem(D: int) -> int:
    return 5 * A2_BN * D * 2  # the Q tile and two stages of K and V tiles, 16-bit elements


def _run_a2(q, k, v, o, causal):
    BH, S, D = q.shape
    name = f"attn_a2<{D}, {_t(q.dtype)}, {'true' if causal else 'false'}>"
    ladder.launch_kernel(FILE, name, q.device.index, (cdiv(S, A2_BM), BH), A2_THREADS,
                   (q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr(), np.int32(S),
                    np.float32(D ** -0.5 * LOG2E)), a2_smem(D))


# ---- the rungs -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Rung:
    name: str
    label: str
    summary: str
    run: Callable  # (q, k, v, o, causal) on [BH, S, D] tensors, validated
    kernels: Callable  # (D, dtype, causal) -> [(file, kernel name expression, block, dynamic smem)]
    hbm_bytes: Callable  # (BH, S, D, itemsize, causal) -> bytes to and from HBM (model)
    l2_bytes: Callable  # (BH, S, D, itemsize, causal) -> bytes loaded by the SMs from L2 (model)
    extra_bytes: Callable  # (BH, S) -> workspace bytes beyond q, k, v, o


RUNGS = (
    Rung("cuda.attn_a0", "A0 materialised",
         "S = QK^T to HBM (plain tiled GEMM), the ladder's online_v4 softmax, then P V: three passes over S x S",
         _run_a0,
         lambda D, dt, c: [(FILE, f"attn_a0_scores<{_t(dt)}>", 256, 0), ("online_softmax.cu", "online_v4<true>", 256, 0),
                           (FILE, f"attn_a0_pv<{_t(dt)}>", 256, 0)],
         _a0_hbm, _a0_l2, _a0_extra),
    Rung("cuda.attn_a1", "A1 online per row",
         "one warp per query row, K/V streamed from global, (m, d) and O rescaled in registers; CUDA cores",
         _run_a1, lambda D, dt, c: [(FILE, f"attn_a1<{D}, {_t(dt)}>", 256, 0)],
         _streamed_hbm, _a1_l2, _no_extra),
    Rung("cuda.attn_a2", "A2 tiled FA2 (mma.sync)",
         "64-row query tile per CTA, K/V tiles in smem (cp.async x2, swizzled), mma.sync m16n8k16, P in registers",
         _run_a2,
         lambda D, dt, c: [(FILE, f"attn_a2<{D}, {_t(dt)}, {'true' if c else 'false'}>", A2_THREADS, a2_smem(D))],
         _streamed_hbm, _a2_l2, _no_extra),
)
BY_NAME = {r.name: r for r in RUNGS}


def rung(name: str) -> Rung:
    try:
        return BY_NAME[name]
    except KeyError:
        raise OnlineSoftmaxError(f"no attention rung {name!r}; rungs: {', '.join(BY_NAME)}") from None


def supports(S: int, D: int, dtype: torch.dtype, BH: int = 1) -> Optional[str]:
    """None if every rung runs this problem, else why not."""
    if dtype not in DTYPES:
        return f"dtype {dtype}: the attention rungs take bfloat16 or float16"
    if D not in ladder.ATTN_D:
        return f"head dim D = {D}: the attention rungs are compiled for D in {ladder.ATTN_D}"
    if S < 1 or BH < 1:
        return f"empty problem (BH = {BH}, S = {S})"
    if BH > MAX_GRID_YZ:
        return f"B * H = {BH} > {MAX_GRID_YZ}: the heads ride on a grid dimension of at most 65535 blocks"
    if S * S >= 2 ** 31 or BH * S >= 2 ** 31:
        return f"S = {S}: the kernels index with int32 (S^2 and BH S must stay below 2^31)"
    return None


def _as3d(t: torch.Tensor) -> torch.Tensor:
    return t.reshape(-1, t.shape[-2], t.shape[-1])


def attention(name: str, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
              out: Optional[torch.Tensor] = None) -> torch.Tensor:
    """O = softmax(q k^T / sqrt(D)) v by the rung `name` (cuda.attn_a0 / a1 / a2)."""
    r = rung(name)
    reason = available()
    if reason:
        raise Unavailable(f"{name} cannot run here: {reason}")
    if not (q.dim() in (3, 4) and q.shape == k.shape == v.shape):
        raise OnlineSoftmaxError(f"{name}: q, k, v must share one shape [B, H, S, D] or [BH, S, D] "
                                 f"(got {tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)})")
    if not (q.dtype == k.dtype == v.dtype):
        raise OnlineSoftmaxError(f"{name}: q, k, v must share one dtype (got {q.dtype}, {k.dtype}, {v.dtype})")
    if not (q.is_cuda and k.device == q.device and v.device == q.device):
        raise OnlineSoftmaxError(f"{name}: q, k, v must be on one CUDA device")
    S, D = q.shape[-2], q.shape[-1]
    BH = q.numel() // (S * D) if q.numel() else 0
    why = supports(S, D, q.dtype, BH)
    if why:
        raise OnlineSoftmaxError(f"{name}: {why}")
    for t in (q, k, v):
        if not t.is_contiguous() or t.data_ptr() % 16:
            raise OnlineSoftmaxError(f"{name}: q, k, v must be contiguous and 16-byte aligned")
    if out is None:
        out = torch.empty_like(q)
    elif out.shape != q.shape or out.dtype != q.dtype or out.device != q.device or not out.is_contiguous():
        raise OnlineSoftmaxError(f"{name}: out must be a contiguous tensor of q's shape, dtype and device")
    r.run(_as3d(q), _as3d(k), _as3d(v), _as3d(out), bool(causal))
    return out


def resources(name: str, D: int, dtype: torch.dtype, causal: bool, arch: Optional[str] = None) -> dict:
    """The ptxas report of the kernels the rung launches (several: max registers/smem, summed spills); "smem" is
    static plus dynamic shared memory per block. Compiles with NVRTC; no GPU needed."""
    rows = []
    for filename, kname, block, dyn in rung(name).kernels(D, dtype, causal):
        r = ladder.module(filename, arch).resources(kname)
        rows.append(dict(r, kernel=kname, block=block, smem=r["smem"] + dyn))
    return ladder.combined_report(rows, " + ")

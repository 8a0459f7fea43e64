"""The Triton backend: one variant per (op, regime) of the Triton engine (this folder).

Each variant forces its regime (rows / online / split); `rules.pick_regime` is the rule that
would choose among them. On a machine without CUDA the variants run on CPU tensors under
TRITON_INTERPRET=1 (Triton's interpreter), which is how the CPU tests exercise them.

What a variant accepts and the bytes it moves come from `engines/triton/softmax_rules.py`, the rules the
launchers apply, which imports no triton. The launchers (`engines/triton/softmax.py`) are
imported lazily, on the first run: `triton.jit` decides when a kernel is defined whether it is
interpreted, so TRITON_INTERPRET must be set before that import.
"""

from __future__ import annotations

import os
from typing import Optional

import torch

from ...install import pip_line
from ...opdefs import GPU_DTYPES
from . import softmax_rules as rules
from ...registry import Variant, register

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"

# op -> (backward, log)
_OPS = {
    "softmax": (False, False),
    "log_softmax": (False, True),
    "softmax_backward": (True, False),
    "log_softmax_backward": (True, True),
}

# regime -> (rung, seed_ref, summary)
_REGIMES = {
    "rows": (
        "triton rows (row in registers)",
        "seed 002 §6 (V3 idea) / triton tutorial 02",
        "whole rows in registers, several rows per tile for small N, one tile a program, 1 read + 1 write",
    ),
    "online": (
        "triton online (chunked fold + re-read)",
        "seed 002 §5 (V2, two passes) / seed 001 §3",
        "one row per program, chunks folded into per-lane (m, d) states, then an L2 re-read and write",
    ),
    "split": (
        "triton split rows (partials + merge)",
        "seed 001 §3.3 (two-block merge) / DESIGN: several CTAs and a second phase",
        "rows cut into chunks over many programs; partial states merged through a workspace, one kernel",
    ),
}


def kernels():
    """The launchers' module, imported on first use (after TRITON_INTERPRET is set, if it is)."""
    from . import softmax

    return softmax


def available() -> Optional[str]:
    try:
        import triton  # noqa: F401
    except Exception as exc:  # noqa: BLE001 - any import failure makes the backend unavailable
        return f"triton does not import ({exc}); install it with {pip_line('triton')}"
    if torch.cuda.is_available() or os.environ.get("TRITON_INTERPRET") == "1":
        return None
    return "no CUDA device (set TRITON_INTERPRET=1 to run the Triton kernels on CPU in the interpreter)"


def _runner(backward: bool, log: bool, regime: str):
    if backward:

        def run(inputs, out):
            y, dy = inputs
            kernels().softmax_backward(y, dy, out, log=log, regime=regime)

    else:

        def run(inputs, out):
            (x,) = inputs
            kernels().softmax_forward(x, out, log=log, regime=regime)

    return run


def _supports(backward: bool, regime: str):
    def supports(M: int, N: int, dtype: torch.dtype) -> Optional[str]:
        if M < 1 or N < 1:
            return f"empty shape ({M}, {N})"
        return rules.unsupported(regime, N, dtype, backward)

    return supports


def _algo_bytes(backward: bool, regime: str):
    """Bytes the algorithm moves through global memory (L2 hits included):
    rows: 1 read + 1 write (forward), 2 reads + 1 write (backward);
    online: every input read twice (the second pass re-reads), 1 write;
    split: as online, plus the workspace (partials written once, read by each of a row's chunks)."""
    n_in = 2 if backward else 1

    def algo_bytes(M: int, N: int, itemsize: int) -> int:
        mn = M * N * itemsize
        if regime == "rows":
            return (n_in + 1) * mn
        if regime == "online":
            return (2 * n_in + 1) * mn
        return (2 * n_in + 1) * mn + rules.split_workspace_bytes(M, N, backward, itemsize=itemsize)

    return algo_bytes


def _resources(backward: bool, log: bool, regime: str):
    def resources(M: int, N: int, dtype: torch.dtype):
        if available() is not None:
            return None
        return kernels().kernel_resources(M, N, dtype, backward, log, regime)

    return resources


for _op, (_backward, _log) in _OPS.items():
    for _regime in rules.REGIMES:
        _rung, _seed, _summary = _REGIMES[_regime]
        register(
            Variant(
                name=f"triton.{_op}_{_regime}",
                op=_op,
                backend="triton",
                rung=_rung,
                seed_ref=_seed,
                summary=f"{_op}: {_summary}",
                run=_runner(_backward, _log, _regime),
                algo_bytes=_algo_bytes(_backward, _regime),
                device=DEVICE,
                dtypes=GPU_DTYPES,
                supports=_supports(_backward, _regime),
                available=available,
                resources=_resources(_backward, _log, _regime),
            )
        )

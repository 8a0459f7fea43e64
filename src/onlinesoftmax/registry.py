"""Every implementation is a `Variant` in one registry; the CLI, tests and benchmarks enumerate it. The modules
that register variants (the ladders, the engines' regimes, the public ops, the baselines) are imported by
harness/catalog.py, which the package imports, so the registry itself imports none of them.

Calling convention, the same for every backend:

    variant.run(inputs, out)    # inputs: tuple of 2-D tensors (M, N) on `variant.device`
                                # out: preallocated tensor the variant must fill completely

    op                    inputs      out
    softmax               (x,)        y          (M, N)
    log_softmax           (x,)        y          (M, N)
    softmax_backward      (y, dy)     dx         (M, N)
    log_softmax_backward  (y, dy)     dx         (M, N)
    sum                   (x,)        s          (1,)   x is (1, N): a flat reduction

The harness poisons `out` with NaN before each run, so an element a variant forgets to write fails.
Variants never allocate their output and never pick a kernel for a shape they were not asked for.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Optional

import torch

from .errors import OnlineSoftmaxError
from .opdefs import OPS


def _always(*_args) -> Optional[str]:
    return None


@dataclass(frozen=True)
class Variant:
    name: str  # unique, "<backend>.<rung>", e.g. "cpu.online_2pass", "cuda.online_v3"
    op: str  # a key of opdefs.OPS
    backend: str  # "numpy" | "cuda" | "triton" | "torch" | "liger" ...: whose code runs
    rung: str  # short label of the ladder step, e.g. "online V3 (1-pass, registers)"
    seed_ref: str  # where the seeds describe it, e.g. "seed 000 §5"
    summary: str  # one line: what it does
    run: Callable[[tuple, torch.Tensor], None]
    algo_bytes: Callable[[int, int, int], int]  # (M, N, itemsize) -> bytes the algorithm really moves
    device: str = "cpu"  # where inputs and out live: "cpu" or "cuda"
    dtypes: tuple = (torch.float32,)
    # (M, N, dtype) -> None if the shape is supported, else the reason it is refused
    supports: Callable[[int, int, torch.dtype], Optional[str]] = field(default=_always)
    # () -> None if this machine can run it, else why not (no GPU, no Triton, ...)
    available: Callable[[], Optional[str]] = field(default=_always)
    # (M, N, dtype) -> {"registers": int, "stack": int, "spill_stores": int, ...} of the
    # instantiation that would run, or None when the backend has no such report
    resources: Optional[Callable[[int, int, torch.dtype], dict]] = None
    # The user-facing call, which allocates its output (inputs -> tensor). When set, benchmarks
    # time this instead of `run`, so libraries without an out= form are timed without a copy.
    call: Optional[Callable[[tuple], torch.Tensor]] = None
    # A library we compare against (torch, torch.compile, Liger): timed, never held to this
    # package's semantics by `check` (torch.softmax gives NaN for fully masked rows).
    baseline: bool = False
    # One thread walks each row, term after term (the ladder's thread-per-row kernels): its sum rounds N - 1 times
    # in a chain, where a tree's rounds log2 N deep; the checker holds it to check.serial_rtol, not TOLERANCE's rtol.
    serial_rows: bool = False

    def __post_init__(self):
        if self.op not in OPS:
            raise ValueError(f"variant {self.name}: unknown op {self.op!r}")

    def refuses(self, M: int, N: int, dtype: torch.dtype) -> Optional[str]:
        """None if this variant can run (M, N, dtype) here, else the reason it cannot."""
        if dtype not in self.dtypes:
            names = ", ".join(str(d).replace("torch.", "") for d in self.dtypes)
            return f"dtype {str(dtype).replace('torch.', '')} not supported (supports {names})"
        return self.available() or self.supports(M, N, dtype)


_REGISTRY: dict[str, Variant] = {}


def register(variant: Variant) -> Variant:
    if variant.name in _REGISTRY:
        raise ValueError(f"variant {variant.name} registered twice")
    _REGISTRY[variant.name] = variant
    return variant


def variants(op: Optional[str] = None, backend: Optional[str] = None) -> list[Variant]:
    """All registered variants, in registration order (which is ladder order), optionally filtered."""
    return [
        v
        for v in _REGISTRY.values()
        if (op is None or v.op == op) and (backend is None or v.backend == backend)
    ]


def get(name: str) -> Variant:
    try:
        return _REGISTRY[name]
    except KeyError:
        known = ", ".join(sorted(_REGISTRY))
        raise OnlineSoftmaxError(f"unknown variant {name!r}; known variants: {known}") from None

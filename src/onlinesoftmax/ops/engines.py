"""The op modules' way to the engines' launchers, imported on first use: the Triton engine (the package imports
without triton; one clear error where it is missing) and the production CUDA engine."""

from __future__ import annotations

import functools
import importlib

from ..errors import Unavailable


def triton(module: str):
    """engines/triton/<module>.py (softmax, attention, cross_entropy), or Unavailable naming what is missing."""
    try:
        return importlib.import_module(f"..engines.triton.{module}", __package__)
    except ImportError as exc:
        raise Unavailable(f"the Triton backend needs triton: {exc}") from None


@functools.cache
def cuda_runs() -> bool:
    """Whether the production CUDA kernels can run here (torch sees a GPU, cuda.core imports): decided once."""
    from ..runtime import available

    return available() is None


def cuda():
    """engines/cuda/run.py: the production CUDA engine's launchers."""
    from ..engines.cuda import run

    return run

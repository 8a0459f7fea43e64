"""The op modules' way to the engines' launchers, imported on first use: the Triton engine (the package imports
without triton; one clear error where it is missing) and the production CUDA engine."""

from __future__ import annotations

import importlib

import torch

from ..errors import Unavailable


_triton_engines: dict = {}  # module name -> the module, once imported (import_module per call cost ~1.3 us)


def triton(module: str):
    """engines/triton/<module>.py (softmax, attention, cross_entropy), or Unavailable naming what is missing."""
    engine = _triton_engines.get(module)
    if engine is None:
        try:
            engine = _triton_engines[module] = importlib.import_module(f"..engines.triton.{module}", __package__)
        except ImportError as exc:
            raise Unavailable(f"the Triton backend needs triton: {exc}") from None
    return engine


_cuda_runs: list = []  # cuda_runs' answer, once known


@torch.compiler.assume_constant_result
def cuda_runs() -> bool:
    """Whether the production CUDA kernels can run here (torch sees a GPU, cuda.core imports): decided once. A
    constant to torch.compile: Dynamo calls it while tracing instead of tracing into it. Its first call can be inside
    a compiled region, where tracing reached NVRTC's nvrtcVersion (Cython) and broke a fullgraph trace (seen on the
    H200; functools.cache hid the mark from Dynamo, hence the list)."""
    if not _cuda_runs:
        from ..runtime import available

        _cuda_runs.append(available() is None)
    return _cuda_runs[0]


_cuda_engine: list = []  # engines/cuda/run.py once imported (an import statement per call costs ~1.5 us)


def cuda():
    """engines/cuda/run.py: the production CUDA engine's launchers."""
    if not _cuda_engine:
        from ..engines.cuda import run

        _cuda_engine.append(run)
    return _cuda_engine[0]

"""Run-time CUDA: NVRTC compilation with an on-disk cache (nvrtc) and launches on torch's stream
(launch), both through `cuda.core`. Knows nothing of softmax; compiling works without a GPU."""

from typing import Optional

from ..errors import Unavailable
from . import launch
from .nvrtc import CompileOptions, CompiledModule, compile_source, current_arch, nvrtc_version, parse_ptxas

__all__ = ["CompileOptions", "CompiledModule", "available", "compile_source", "current_arch",
           "nvrtc_version", "parse_ptxas"]

_avail: Optional[tuple] = None


def available() -> Optional[str]:
    """None if kernels can be compiled and launched here (a GPU visible to torch, cuda.core and
    NVRTC load), else the reason; computed once."""
    global _avail
    if _avail is None:
        reason = launch.available()
        if reason is None:
            try:
                nvrtc_version()
            except Unavailable as e:
                reason = str(e)
        _avail = (reason,)
    return _avail[0]

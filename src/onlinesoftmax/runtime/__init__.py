"""Run-time CUDA: NVRTC compilation with an on-disk cache (nvrtc) and launches on torch's stream
(launch), both through `cuda.core`. Knows nothing of softmax; compiling works without a GPU."""

from typing import Optional

from ..errors import Unavailable
from . import launch, nvrtc
from .nvrtc import CompileOptions, CompiledModule, compile_source, current_arch, nvrtc_version, parse_ptxas

# The H200's: what inspect and the compile tests build for, and the SM count plans assume, where no GPU is present
DEFAULT_ARCH = "sm_90"
DEFAULT_SMS = 132

__all__ = ["DEFAULT_ARCH", "DEFAULT_SMS", "CompileOptions", "CompiledModule", "available", "compile_source", "compile_unavailable",
           "current_arch", "nvrtc_version", "parse_ptxas"]

_avail: Optional[tuple] = None


def compile_unavailable() -> Optional[str]:
    """None if kernels can be compiled here (cuda.core and NVRTC load; no GPU needed), else the reason."""
    try:
        nvrtc._cuda_core()
        nvrtc_version()
    except Unavailable as e:
        return str(e)
    return None


def available() -> Optional[str]:
    """None if kernels can be compiled and launched here (a GPU visible to torch, cuda.core and
    NVRTC load), else the reason; computed once."""
    global _avail
    if _avail is None:
        _avail = (launch.available() or compile_unavailable(),)
    return _avail[0]

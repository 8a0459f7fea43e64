"""Run-time CUDA: NVRTC compilation with an on-disk cache (nvrtc) and launches on torch's stream
(launch), both through `cuda.core`. Knows nothing of softmax; compiling works without a GPU."""

from .nvrtc import CompileOptions, CompiledModule, compile_source, current_arch, nvrtc_version, parse_ptxas

__all__ = ["CompileOptions", "CompiledModule", "compile_source", "current_arch", "nvrtc_version",
           "parse_ptxas"]

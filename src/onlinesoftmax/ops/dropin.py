"""Route torch's own softmax on CUDA tensors through this package: `enable()`, `disable()`, `enabled()`.

    import onlinesoftmax
    onlinesoftmax.enable()              # every softmax / log_softmax on a CUDA tensor, and its backward, is ours
    with onlinesoftmax.enabled():       # ... or only inside the block
        loss = model(x).backward()

Every entry point (torch.softmax, torch.log_softmax, F.softmax, F.log_softmax, Tensor.softmax,
Tensor.log_softmax, nn.Softmax, F.cross_entropy, ...) ends in aten::_softmax or aten::_log_softmax,
and autograd's formulas for those call aten::_softmax_backward_data and
aten::_log_softmax_backward_data. enable() registers kernels for the CUDA dispatch key of these four
ops with torch.library (a Library("aten", "IMPL")); nothing in Python is patched. disable() destroys
the Library, and the dispatcher serves torch's kernels again. CPU tensors are never affected.

The kernels call ops.py's launchers, below autograd (autograd's own nodes call the backward ops):
- float32, float16, bfloat16: the CUDA backend (Triton where it cannot run);
- half_to_float (torch's fused 16-bit in, fp32 out): the CUDA kernels' fused cast (ops.softmax's "cuda_f32"),
  or the input cast to fp32 first where no plan fuses it;
- float64: the reference path, torch elementwise ops in float64 on the GPU (never aten::_softmax,
  which would come back here);
- 0-d and empty tensors as torch;
- the package's semantics, including its one difference from torch: a fully masked row (all -inf)
  gives 0 (log: -inf) with zero gradient, not NaN.
Not routed: the out= overloads, torch.compile'd graphs (Inductor generates its own softmax code), and
attention functions that do not call these ops (scaled_dot_product_attention).
"""

from __future__ import annotations

import contextlib
import warnings
from typing import Optional

import torch

from . import softmax as ops


def _forward_kernel(log: bool):
    def kernel(x: torch.Tensor, dim: int, half_to_float: bool) -> torch.Tensor:
        x, dim, backend = ops.resolve(x, dim, "auto", torch.float32 if half_to_float else None)
        return ops.forward(x, dim, log, backend)

    return kernel


def _backward_kernel(log: bool):
    def kernel(grad_output: torch.Tensor, output: torch.Tensor, dim: int, input_dtype: torch.dtype) -> torch.Tensor:
        output, dim, backend = ops.resolve(output, dim, "auto")
        return ops.backward(output, grad_output, dim, log, backend).to(input_dtype)  # half_to_float: back to 16 bits

    return kernel


# aten op -> our kernel for its CUDA key (schemas: _softmax(Tensor self, int dim, bool half_to_float);
# _softmax_backward_data(Tensor grad_output, Tensor output, int dim, ScalarType input_dtype); the same for log)
KERNELS = {
    "_softmax": _forward_kernel(False),
    "_log_softmax": _forward_kernel(True),
    "_softmax_backward_data": _backward_kernel(False),
    "_log_softmax_backward_data": _backward_kernel(True),
}

_library: Optional[torch.library.Library] = None


def enable() -> None:
    """Route torch's softmax and log_softmax (forward and backward) on CUDA tensors through this package.
    Idempotent; not thread-safe against a concurrent disable()."""
    global _library
    if _library is None:
        lib = torch.library.Library("aten", "IMPL")
        with warnings.catch_warnings():  # torch warns (once) that a CUDA kernel is overridden: the point here
            warnings.filterwarnings("ignore", "(?s).*Overriding a previously registered kernel", UserWarning)
            for name, kernel in KERNELS.items():
                lib.impl(name, kernel, "CUDA")
        _library = lib


def disable() -> None:
    """Give torch its own CUDA kernels back (a no-op when not enabled)."""
    global _library
    if _library is not None:
        _library._destroy()
        _library = None


def is_enabled() -> bool:
    return _library is not None


@contextlib.contextmanager
def enabled():
    """enable() inside the block; on leaving it, disable() unless routing was already on before."""
    was = is_enabled()
    enable()
    try:
        yield
    finally:
        if not was:
            disable()

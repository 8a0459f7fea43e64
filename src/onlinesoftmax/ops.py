"""The public ops: softmax and log_softmax over any dim, differentiable, visible to torch.compile.

    y = onlinesoftmax.softmax(x, dim=-1)                  # backend="auto"
    y = onlinesoftmax.log_softmax(x, dim=1, backend="triton")

Backends:
- "cuda": the production CUDA kernels (NVRTC through cuda.core; variants/production.py picks the
  regime for the shape); the default for CUDA tensors;
- "triton": the Triton kernels (kernels/triton/softmax.py); a non-last `dim` is moved last with
  one contiguous copy (documented: the CUDA backend has a strided kernel instead);
- "reference": torch on the CPU, fp32 accumulation, the package's semantics; the default for CPU
  tensors (float64 accepted here, e.g. for gradcheck).

Semantics (the same for every backend; reference.py is the specification): a row of all -inf
gives softmax 0 and log-softmax -inf with zero gradient; a row with NaN or +inf gives NaN; inputs
near the dtype's max do not overflow.

Three ways in, one implementation:
- eager without grad: the kernel launcher is called directly (the custom-op dispatcher costs
  ~19 µs per call on the H200, more than the kernel for small inputs);
- eager with grad: a thin autograd.Function around the same launchers;
- torch.compile: `torch.ops.onlinesoftmax.softmax_forward/backward`, custom ops with fake
  (meta) kernels and registered autograd, so `fullgraph=True` traces through.
"""

from __future__ import annotations

import os

import torch

from . import state
from .errors import OnlineSoftmaxError, Unavailable

BACKENDS = ("auto", "cuda", "triton", "reference")
GPU_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
REFERENCE_DTYPES = GPU_DTYPES + (torch.float64,)


# ------------------------------------------------------------------------------- validation
def _resolve(x, dim: int, backend: str) -> tuple[int, str]:
    """Normalised dim and concrete backend, or a clear error."""
    if not isinstance(x, torch.Tensor):
        raise OnlineSoftmaxError(f"expected a torch.Tensor, got {type(x).__name__}")
    if backend not in BACKENDS:
        raise OnlineSoftmaxError(f"unknown backend {backend!r}; choose one of {', '.join(BACKENDS)}")
    if x.dim() == 0:
        raise OnlineSoftmaxError("softmax needs at least one dimension; got a 0-d tensor")
    if not -x.dim() <= dim < x.dim():
        raise OnlineSoftmaxError(f"dim {dim} out of range for a {x.dim()}-d tensor")
    dim %= x.dim()
    if x.shape[dim] == 0 or x.numel() == 0:
        raise OnlineSoftmaxError(f"empty input: shape {tuple(x.shape)} has nothing along a dimension")
    if backend == "auto":
        backend = _default_backend(x)
    if backend == "reference":
        allowed = REFERENCE_DTYPES
    else:
        allowed = GPU_DTYPES
        if not x.is_cuda and not (backend == "triton" and os.environ.get("TRITON_INTERPRET") == "1"):
            raise OnlineSoftmaxError(
                f"backend {backend!r} needs a CUDA tensor; got one on {x.device} "
                "(use backend='reference' or 'auto' for CPU tensors)")
    if x.dtype not in allowed:
        names = ", ".join(str(d).replace("torch.", "") for d in allowed)
        raise OnlineSoftmaxError(f"dtype {x.dtype} not supported by backend {backend!r} (supported: {names})")
    return dim, backend


def _default_backend(x) -> str:
    if not x.is_cuda:
        return "reference"
    from .runtime import available

    return "cuda" if available() is None else "triton"


# ------------------------------------------------------------------------------ the launchers
def _forward(x: torch.Tensor, dim: int, log: bool, backend: str) -> torch.Tensor:
    if backend == "reference":
        xf = x.float() if x.dtype != torch.float64 else x
        st = state.of_values(xf, axis=dim)
        y = state.log_probabilities(xf, st) if log else state.probabilities(xf, st)
        return y.to(x.dtype)
    out = torch.empty_like(x) if x.is_contiguous() else torch.empty_like(x, memory_format=torch.contiguous_format)
    if backend == "cuda":
        from .engines.cuda import run as cuda_engine

        cuda_engine.forward(x, out, dim, log)
    else:
        _triton_rows(lambda a, o: _triton().softmax_forward(a[0], o, log=log), (x,), out, dim)
    return out


def _backward(y: torch.Tensor, dy: torch.Tensor, dim: int, log: bool, backend: str) -> torch.Tensor:
    if backend == "reference":
        yf = y.float() if y.dtype != torch.float64 else y
        dyf = dy.to(yf.dtype)
        if log:
            dx = dyf - torch.exp(yf) * dyf.sum(dim, keepdim=True)
            dx = torch.where((yf == float("-inf")).all(dim, keepdim=True), torch.zeros_like(dx), dx)
        else:
            dx = yf * (dyf - (dyf * yf).sum(dim, keepdim=True))
        return dx.to(y.dtype)
    out = torch.empty_like(y, memory_format=torch.contiguous_format)
    if backend == "cuda":
        from .engines.cuda import run as cuda_engine

        cuda_engine.backward(y, dy.to(y.dtype), out, dim, log)
    else:
        _triton_rows(lambda a, o: _triton().softmax_backward(a[0], a[1], o, log=log),
                     (y, dy.to(y.dtype)), out, dim)
    return out


def _triton():
    try:
        from .kernels.triton import softmax as triton_softmax
    except ImportError as exc:
        raise Unavailable(f"the Triton backend needs triton: {exc}") from None
    return triton_softmax


def _triton_rows(launch, tensors, out, dim) -> None:
    """Run a Triton row launcher on 2-D (rows, N) views; a non-last dim costs one copy each way."""
    last = dim == out.dim() - 1
    moved = [t.movedim(dim, -1) for t in tensors]
    rows = [t.reshape(-1, t.shape[-1]) if t.stride(-1) == 1 else t.contiguous().view(-1, t.shape[-1])
            for t in moved]
    target = out.view(-1, out.shape[-1]) if last else torch.empty_like(rows[0])
    launch(rows, target)
    if not last:
        out.copy_(target.view(moved[0].shape).movedim(-1, dim))


# ---------------------------------------------------------------------- torch.compile: custom ops
@torch.library.custom_op("onlinesoftmax::softmax_forward", mutates_args=())
def softmax_forward_op(x: torch.Tensor, dim: int, log: bool, backend: str) -> torch.Tensor:
    return _forward(x, dim, log, backend)


@softmax_forward_op.register_fake
def _(x, dim, log, backend):
    return torch.empty_like(x, memory_format=torch.contiguous_format)


@torch.library.custom_op("onlinesoftmax::softmax_backward", mutates_args=())
def softmax_backward_op(y: torch.Tensor, dy: torch.Tensor, dim: int, log: bool, backend: str) -> torch.Tensor:
    return _backward(y, dy, dim, log, backend)


@softmax_backward_op.register_fake
def _(y, dy, dim, log, backend):
    return torch.empty_like(y, memory_format=torch.contiguous_format)


def _setup_context(ctx, inputs, output):
    _, dim, log, backend = inputs
    ctx.save_for_backward(output)
    ctx.args = (dim, log, backend)


def _op_backward(ctx, dy):
    (y,) = ctx.saved_tensors
    return softmax_backward_op(y, dy, *ctx.args), None, None, None


softmax_forward_op.register_autograd(_op_backward, setup_context=_setup_context)


# --------------------------------------------------------------------------------- eager path
class _Softmax(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, dim, log, backend):
        y = _forward(x, dim, log, backend)
        ctx.save_for_backward(y)
        ctx.args = (dim, log, backend)
        return y

    @staticmethod
    def backward(ctx, dy):
        (y,) = ctx.saved_tensors
        return _backward(y, dy, *ctx.args), None, None, None


def _apply(x, dim, log, backend):
    dim, backend = _resolve(x, dim, backend)
    if torch.compiler.is_compiling():
        return softmax_forward_op(x, dim, log, backend)
    if x.requires_grad and torch.is_grad_enabled():
        return _Softmax.apply(x, dim, log, backend)
    return _forward(x, dim, log, backend)


def softmax(x: torch.Tensor, dim: int = -1, *, backend: str = "auto") -> torch.Tensor:
    """Softmax over `dim`; fully masked (-inf) rows give 0. fp32/fp16/bf16 in, same dtype out."""
    return _apply(x, dim, False, backend)


def log_softmax(x: torch.Tensor, dim: int = -1, *, backend: str = "auto") -> torch.Tensor:
    """Log-softmax over `dim`; fully masked rows give -inf with zero gradient."""
    return _apply(x, dim, True, backend)


class Softmax(torch.nn.Module):
    """Drop-in for torch.nn.Softmax."""

    def __init__(self, dim: int = -1, backend: str = "auto"):
        super().__init__()
        self.dim, self.backend = dim, backend

    def forward(self, x):
        return softmax(x, self.dim, backend=self.backend)


class LogSoftmax(Softmax):
    """Drop-in for torch.nn.LogSoftmax."""

    def forward(self, x):
        return log_softmax(x, self.dim, backend=self.backend)

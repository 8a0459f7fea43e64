"""The public ops: torch.softmax / torch.log_softmax's signature and semantics, differentiable, visible to
torch.compile.

    y = onlinesoftmax.softmax(x, dim=-1)                          # backend="auto"
    y = onlinesoftmax.softmax(x16, 1, dtype=torch.float32)        # casts first, as torch does
    y = onlinesoftmax.log_softmax(x, dim=1, backend="triton")

Backends:
- "cuda": the production CUDA kernels (NVRTC through cuda.core; engines/cuda/plan.py picks the
  regime for the shape); the default for CUDA tensors;
- "triton": the Triton kernels (engines/triton/softmax.py); a non-last `dim` is moved last with
  one contiguous copy (documented: the CUDA backend has a strided kernel instead);
- "cpu": torch's own CPU kernel, then the fully masked rows set right (see below); the default for
  CPU tensors, as fast as torch.softmax;
- "reference": torch elementwise ops with fp32 accumulation (float64 for float64), on the tensor's
  device: the specification, slow.
The kernels take float32, float16 and bfloat16; float64 on "cuda" or "triton" goes through the
reference path on the GPU. Any backend takes 0-d tensors (one row of one element, dim 0 or -1) and
empty ones (an empty result, an empty gradient).

Semantics (the same for every backend; reference.py is the specification), torch's except for one
deliberate difference: a fully masked row (all -inf) gives softmax 0 and log-softmax -inf with zero
gradient, where torch gives NaN. A row with NaN or +inf gives NaN; inputs near the dtype's max do not
overflow. The output is contiguous (torch's strides for the shape) whatever the input's layout, as
torch's is; `dtype=` casts the input before the op (fused into the CUDA kernels for 16-bit in, float32
out, the attention-scores case: 2 bytes read and 4 written per element). A bad `dim` raises DimError (an
IndexError, as in torch) or ArgumentTypeError (a TypeError: None, a float, a bool); both are
OnlineSoftmaxErrors.

Three ways in, one implementation:
- eager without grad: the kernel launcher is called directly (the custom-op dispatcher costs
  ~19 µs per call on the H200, more than the kernel for small inputs);
- eager with grad: a thin autograd.Function around the same launchers;
- torch.compile: `torch.ops.onlinesoftmax.softmax_forward/backward`, custom ops with fake
  (meta) kernels and registered autograd, so `fullgraph=True` traces through.
dropin.py routes torch's own softmax calls on CUDA tensors to the same launchers.
"""

from __future__ import annotations

import math
import operator
import os

import torch

from .. import state
from . import engines
from ..errors import ArgumentTypeError, DimError, OnlineSoftmaxError
from ..opdefs import GPU_DTYPES as KERNEL_DTYPES  # what the CUDA and Triton kernels take
from ..runtime import native

BACKENDS = ("auto", "cuda", "triton", "cpu", "reference")
KERNEL_BACKENDS = ("cuda", "triton")
DTYPES = KERNEL_DTYPES + (torch.float64,)  # what every backend takes (see the module docstring)
NEG_INF = float("-inf")
CONTIGUOUS = torch.contiguous_format


# ------------------------------------------------------------------------------- validation
def _dim(dim, ndim: int) -> int:
    """dim in [0, max(ndim, 1)): an int, or anything torch takes as one (__index__), never a bool."""
    if type(dim) is not int:
        if isinstance(dim, bool):
            raise ArgumentTypeError(f"dim must be an int, got a bool ({dim})")
        try:
            dim = operator.index(dim)
        except TypeError:
            raise ArgumentTypeError(f"dim must be an int, got {type(dim).__name__} ({dim!r})") from None
    n = ndim or 1  # a 0-d tensor takes dim 0 or -1, as in torch
    if not -n <= dim < n:
        raise DimError(f"dim {dim} out of range for a {ndim}-d tensor (expected in [{-n}, {n - 1}])")
    return dim + n if dim < 0 else dim


def resolve(x, dim, backend: str, dtype=None) -> tuple[torch.Tensor, int, str]:
    """The input cast to `dtype` (when given), the normalised dim and the backend that runs it (one of
    _FORWARD's keys), or a clear error."""
    if not isinstance(x, torch.Tensor):
        raise ArgumentTypeError(f"expected a torch.Tensor, got {type(x).__name__}")
    if dtype is not None and not isinstance(dtype, torch.dtype):
        raise ArgumentTypeError(f"dtype must be a torch.dtype, got {type(dtype).__name__}")
    dim = _dim(dim, x.dim())
    if backend == "auto":
        backend = _gpu_backend() if x.is_cuda else "cpu" if x.device.type == "cpu" else "reference"
    elif backend in KERNEL_BACKENDS:
        if not x.is_cuda and not (backend == "triton" and os.environ.get("TRITON_INTERPRET") == "1"):
            raise OnlineSoftmaxError(
                f"backend {backend!r} needs a CUDA tensor; got one on {x.device} "
                "(use backend='auto', 'cpu' or 'reference' for CPU tensors)")
    elif backend == "cpu":
        if x.device.type != "cpu":
            raise OnlineSoftmaxError(f"backend 'cpu' runs torch's CPU kernel; got a tensor on {x.device}")
    elif backend != "reference":
        raise OnlineSoftmaxError(f"unknown backend {backend!r}; choose one of {', '.join(BACKENDS)}")
    if dtype is not None and dtype != x.dtype:
        if backend == "cuda" and dtype == torch.float32 and x.dtype in (torch.float16, torch.bfloat16) and x.numel():
            return x, dim, "cuda_f32"  # the cast fused into the kernels' stores (engines/cuda/run.py forward_cast)
        x = x.to(dtype)
    if x.dtype not in DTYPES:
        names = ", ".join(str(d).replace("torch.", "") for d in DTYPES)
        raise OnlineSoftmaxError(f"dtype {x.dtype} not supported (supported: {names}; dtype= casts the input)")
    if x.numel() == 0:
        return x, dim, "empty"
    if x.dtype == torch.float64 and backend in KERNEL_BACKENDS:
        return x, dim, "reference"  # the kernels take 16 and 32 bits: float64 through torch ops, on the GPU
    return x, dim, backend


def _gpu_backend() -> str:
    """The backend for CUDA tensors: the production CUDA kernels, or Triton where they cannot run."""
    return "cuda" if engines.cuda_runs() else "triton"


# ------------------------------------------------------------------------------ the launchers
def forward(x: torch.Tensor, dim: int, log: bool, backend: str) -> torch.Tensor:
    """softmax(x) over dim (log_softmax when log) by `backend`, as resolve returns them: contiguous, x's dtype
    (float32 for "cuda_f32"). A 0-d x is one row of one element."""
    if x.dim() == 0:
        return _FORWARD[backend](x.reshape(1), 0, log).reshape(())
    return _FORWARD[backend](x, dim, log)


def backward(y: torch.Tensor, dy: torch.Tensor, dim: int, log: bool, backend: str) -> torch.Tensor:
    """dx from the forward output y and the upstream gradient dy: contiguous, y's dtype."""
    if y.dim() == 0:
        return _BACKWARD[backend](y.reshape(1), dy.reshape(1), 0, log).reshape(())
    return _BACKWARD[backend](y, dy, dim, log)


def _cuda_forward(x, dim, log):
    return engines.cuda().forward_new(x, dim, log)


def _cuda_forward_f32(x, dim, log):
    """16-bit x, float32 out: softmax(x, dim, dtype=torch.float32) with the cast in the kernel."""
    out = torch.empty_like(x, dtype=torch.float32, memory_format=CONTIGUOUS)
    engines.cuda().forward_cast(x, out, dim, log)
    return out


def _cuda_backward(y, dy, dim, log):
    return engines.cuda().backward_new(y, dy.to(y.dtype), dim, log)


def _triton_forward(x, dim, log):
    """(The eager hot path, _apply, has asked the native helper already.)"""
    out = torch.empty_like(x, memory_format=CONTIGUOUS)
    if not _triton_columns((x,), out, dim, False, log):
        _triton_rows(lambda a, o: engines.triton("softmax").softmax_forward(a[0], o, log=log), (x,), out, dim)
        _triton_put_native((x,), out, dim, log)
    return out


def _triton_backward(y, dy, dim, log):
    mod = native.module()
    out = mod.backward(y, dy, dim, log, 1) if mod is not None and engines.triton("softmax").native_holds() else None
    if out is not None:
        return out
    out = torch.empty_like(y, memory_format=CONTIGUOUS)
    ins = (y, dy.to(y.dtype))
    if not _triton_columns(ins, out, dim, True, log):
        _triton_rows(lambda a, o: engines.triton("softmax").softmax_backward(a[0], a[1], o, log=log), ins, out, dim)
        _triton_put_native(ins, out, dim, log)
    return out


def _triton_put_native(ins, out, dim, log) -> None:
    """Contiguous rows over the last dim: the launch the Triton engine holds ready for the call just made goes into
    the native helper's table (where built), so the next such call is one C++ call."""
    if dim == out.dim() - 1 and all(t.is_contiguous() for t in ins):
        mod = native.module()
        if mod is not None:
            engines.triton("softmax").put_native(mod, ins, out, log)


def _triton_columns(tensors, out, dim, backward, log) -> bool:
    """A non-last dim of contiguous tensors through the Triton columns kernel, where it takes the dim (no copy
    each way); False where it does not run."""
    shape = out.shape
    inner = math.prod(shape[dim + 1:])
    if inner == 1 or not all(t.is_contiguous() for t in tensors):
        return False
    view = (math.prod(shape[:dim]), shape[dim], inner)
    return engines.triton("softmax").softmax_columns(tuple(t.view(view) for t in tensors), out.view(view), backward,
                                                    log)


def _triton_rows(launch, tensors, out, dim) -> None:
    """Run a Triton row launcher on 2-D (rows, N) views; a non-last dim costs one copy each way."""
    last = dim == out.dim() - 1
    if last and dim == 1 and all(t.stride(1) == 1 for t in tensors):  # rows already: no views to make
        launch(tensors, out)
        return
    moved = [t.movedim(dim, -1) for t in tensors]
    rows = [t.reshape(-1, t.shape[-1]) if t.stride(-1) == 1 else t.contiguous().view(-1, t.shape[-1])
            for t in moved]
    target = out.view(-1, out.shape[-1]) if last else torch.empty_like(rows[0])
    launch(rows, target)
    if not last:
        out.copy_(target.view(moved[0].shape).movedim(-1, dim))


def _cpu_forward(x, dim, log):
    """torch's CPU kernel gives NaN across a fully masked row; those rows are set to 0 (log: -inf). Only the
    first element of each row is read (M reads); the rows where it is NaN (masked, or holding NaN or +inf, which
    stay NaN) are the only ones scanned."""
    y = (torch.log_softmax if log else torch.softmax)(x, dim)
    candidates = y.select(dim, 0).isnan()
    if candidates.any():
        _fill_masked_rows(y, x, dim, candidates, NEG_INF if log else 0.0)
    return y


def _cpu_backward(y, dy, dim, log):
    """torch's CPU kernels. softmax: a masked row has y = 0, so dx = 0 already. log_softmax: there dx = dy, set to
    0; only the rows whose first y is -inf can be all -inf, and only those are scanned."""
    dy = dy.to(y.dtype)
    if not log:
        return torch._softmax_backward_data(dy, y, dim, y.dtype)
    dx = torch._log_softmax_backward_data(dy, y, dim, y.dtype)
    candidates = y.select(dim, 0) == NEG_INF
    if candidates.any():
        _fill_masked_rows(dx, y, dim, candidates, 0.0)
    return dx


def _fill_masked_rows(t, ref, dim, candidates, value) -> None:
    """t's rows along dim <- value where ref's row is all -inf, looking only at the candidate rows (a bool tensor
    over the other dims, as select(dim, 0) gives). A leading dim of 1 makes a 1-d tensor one row like the others."""
    t, ref = t.unsqueeze(0).movedim(dim + 1, -1), ref.unsqueeze(0).movedim(dim + 1, -1)
    idx = candidates.unsqueeze(0).nonzero(as_tuple=True)
    full = (ref[idx] == NEG_INF).all(-1)
    t[tuple(i[full] for i in idx)] = value


def _upcast(t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """A copy in `dtype` with torch's contiguous strides, so the elementwise ops on it give contiguous outputs."""
    return t.to(dtype, memory_format=CONTIGUOUS, copy=True)


def _accumulator(dtype: torch.dtype) -> torch.dtype:
    return torch.float64 if dtype == torch.float64 else torch.float32


def _reference_forward(x, dim, log):
    xf = _upcast(x, _accumulator(x.dtype))
    st = state.of_values(xf, axis=dim)
    y = state.log_probabilities(xf, st) if log else state.probabilities(xf, st)
    return y.to(x.dtype)


def _reference_backward(y, dy, dim, log):
    acc = _accumulator(y.dtype)
    yf, dyf = _upcast(y, acc), _upcast(dy, acc)
    if log:
        dx = dyf - torch.exp(yf) * dyf.sum(dim, keepdim=True)
        dx = torch.where((yf == NEG_INF).all(dim, keepdim=True), torch.zeros_like(dx), dx)
    else:
        dx = yf * (dyf - (dyf * yf).sum(dim, keepdim=True))
    return dx.to(y.dtype)


def _empty(t, *_):
    """An empty input (or gradient): nothing to compute, an empty result of its shape and dtype."""
    return torch.empty_like(t, memory_format=CONTIGUOUS)


# "cuda_f32": 16-bit in, float32 out (resolve's fused dtype=torch.float32); its backward is the float32 one, the
# gradient cast back to the input's dtype by _gradient, as the autograd of torch's x.to(float32) would.
_FORWARD = {"cuda": _cuda_forward, "cuda_f32": _cuda_forward_f32, "triton": _triton_forward, "cpu": _cpu_forward,
            "reference": _reference_forward, "empty": _empty}
_BACKWARD = {"cuda": _cuda_backward, "cuda_f32": _cuda_backward, "triton": _triton_backward, "cpu": _cpu_backward,
             "reference": _reference_backward, "empty": _empty}


# ---------------------------------------------------------------------- torch.compile: custom ops
@torch.library.custom_op("onlinesoftmax::softmax_forward", mutates_args=())
def softmax_forward_op(x: torch.Tensor, dim: int, log: bool, backend: str) -> torch.Tensor:
    return forward(x, dim, log, backend)


@softmax_forward_op.register_fake
def _(x, dim, log, backend):
    return torch.empty_like(x, dtype=torch.float32 if backend == "cuda_f32" else x.dtype,
                            memory_format=torch.contiguous_format)


@torch.library.custom_op("onlinesoftmax::softmax_backward", mutates_args=())
def softmax_backward_op(y: torch.Tensor, dy: torch.Tensor, dim: int, log: bool, backend: str) -> torch.Tensor:
    return backward(y, dy, dim, log, backend)


@softmax_backward_op.register_fake
def _(y, dy, dim, log, backend):
    return torch.empty_like(y, memory_format=torch.contiguous_format)


# ---------------------------------------------------------------- one autograd rule, two ways in
# The custom op (what torch.compile traces) and the eager autograd.Function (which skips the custom-op dispatcher:
# ~19 us per call on the H200, more than a small kernel) share the forward, the saved context and the gradient.
def _setup_context(ctx, inputs, output):
    x, dim, log, backend = inputs
    ctx.save_for_backward(output)
    ctx.args = (dim, log, backend)
    ctx.in_dtype = x.dtype  # "cuda_f32": the gradient goes back to 16 bits


def _gradient(ctx, dy, backward_fn):
    (y,) = ctx.saved_tensors
    dx = backward_fn(y, dy, *ctx.args)
    return dx.to(ctx.in_dtype) if dx.dtype != ctx.in_dtype else dx, None, None, None


softmax_forward_op.register_autograd(lambda ctx, dy: _gradient(ctx, dy, softmax_backward_op),
                                     setup_context=_setup_context)


class _Softmax(torch.autograd.Function):
    setup_context = staticmethod(_setup_context)

    @staticmethod
    def forward(x, dim, log, backend):
        return forward(x, dim, log, backend)  # the module's forward (looked up per call)

    @staticmethod
    def backward(ctx, dy):
        return _gradient(ctx, dy, backward)


_KERNEL_DTYPES = frozenset(KERNEL_DTYPES)


def _apply(input, dim, log, dtype, backend):
    # The eager hot paths, for a plain tensor, an int dim, no cast, not traced (is_compiling before native.module():
    # Dynamo must not trace into the loader). They decide what resolve and forward below decide for such a call (the
    # same backend, the same launcher), with only what that needs looked at: the host's time per small call is most
    # of the call (issue 12).
    if (type(input) is torch.Tensor and dtype is None and type(dim) is int
            and (backend == "auto" or backend == "cuda" or backend == "triton") and not torch.compiler.is_compiling()):
        # runtime/native.cpp, where built: a shape the engine (CUDA's, or Triton's for backend="triton") has launched
        # before, contiguous rows over the last dim, no grad, looked up, allocated and launched in one C++ call; None
        # for anything else
        mod = native.module()
        if mod is not None and backend == "triton" and not engines.triton("softmax").native_holds():
            mod = None
        out = mod.forward(input, dim, log, 1 if backend == "triton" else 0) if mod is not None else None
        if out is not None:
            return out
        # a CUDA tensor the kernels take, dim in range, no grad: the engine, the table not asked again
        if (backend != "triton" and input.is_cuda and input.dtype in _KERNEL_DTYPES
                and (backend == "cuda" or engines.cuda_runs())
                and not (input.requires_grad and torch.is_grad_enabled())):
            n = input.dim()
            if -n <= dim < n and input.numel():
                return engines.cuda().forward_new(input, dim + n if dim < 0 else dim, log, table=False)
    x, dim, backend = resolve(input, dim, backend, dtype)
    if torch.compiler.is_compiling():
        return softmax_forward_op(x, dim, log, backend)
    if x.requires_grad and torch.is_grad_enabled():
        return _Softmax.apply(x, dim, log, backend)
    return forward(x, dim, log, backend)


def softmax(input: torch.Tensor, dim: int = -1, *, dtype: torch.dtype | None = None,
            backend: str = "auto") -> torch.Tensor:
    """torch.softmax(input, dim, dtype=dtype), except that a fully masked (all -inf) row gives 0 with zero
    gradient, not NaN. fp32/fp16/bf16/fp64 in (dtype= casts first), the same dtype out."""
    return _apply(input, dim, False, dtype, backend)


def log_softmax(input: torch.Tensor, dim: int = -1, *, dtype: torch.dtype | None = None,
                backend: str = "auto") -> torch.Tensor:
    """torch.log_softmax(input, dim, dtype=dtype), except that a fully masked row gives -inf with zero gradient."""
    return _apply(input, dim, True, dtype, backend)


class _Module:
    """What Softmax and LogSoftmax add to torch's modules: the backend (in the repr unless "auto"). dim=None
    picks the dim by torch's legacy rule, with torch's deprecation warning (pointing at the caller)."""

    _log = False

    def __init__(self, dim: int | None = None, backend: str = "auto"):
        super().__init__(dim)
        self.backend = backend

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        dim = self.dim
        if dim is None:  # stacklevel 5: _get_softmax_dim, forward, Module._call_impl, Module.__call__, the caller
            dim = torch.nn.functional._get_softmax_dim(
                "log_softmax" if self._log else "softmax", input.dim(), 5)
        return _apply(input, dim, self._log, None, self.backend)

    def extra_repr(self) -> str:
        r = super().extra_repr()
        return r if self.backend == "auto" else f"{r}, backend={self.backend!r}"


class Softmax(_Module, torch.nn.Softmax):
    """torch.nn.Softmax (an instance of it) on this package's softmax."""


class LogSoftmax(_Module, torch.nn.LogSoftmax):
    """torch.nn.LogSoftmax (an instance of it) on this package's log_softmax."""

    _log = True

"""What we compare against on the GPU: torch eager, torch.compile (Inductor), Liger-Kernel.

Baselines are timed through their user-facing call (which allocates its output, as ours does),
and `check` does not hold them to this package's semantics (torch gives NaN for masked rows).
"""

from __future__ import annotations

import importlib.util
from typing import Optional

import torch

from ..opdefs import GPU_DTYPES, OPS, SOFTMAX_OPS
from ..registry import Variant, register

LIGER_MAX_N = 65536  # Liger 0.8.5 raises "n exceeds the recommended Triton blocksize" above this


def _gpu() -> Optional[str]:
    return None if torch.cuda.is_available() else "baselines run on a CUDA GPU only"


def _liger() -> Optional[str]:
    if importlib.util.find_spec("liger_kernel") is None:
        return "liger_kernel is not installed (carry its wheel to the device)"
    return _gpu()


def _register(name, op, rung, call, run=None, available=_gpu, supports=None):
    register(Variant(
        name=name, op=op, backend="baseline", rung=rung, seed_ref="-", summary=rung,
        run=run or (lambda inputs, out: out.copy_(call(inputs))), call=call,
        algo_bytes=OPS[op].ideal_bytes, device="cuda", dtypes=GPU_DTYPES,
        available=available, baseline=True,
        **({"supports": supports} if supports else {}),
    ))


# ---- torch eager: the ATen kernels, with their out= forms for `run`
aten = torch.ops.aten
_register("torch.softmax", "softmax", "torch.softmax (eager)",
          lambda a: torch.softmax(a[0], -1), lambda a, out: aten._softmax.out(a[0], -1, False, out=out))
_register("torch.log_softmax", "log_softmax", "torch.log_softmax (eager)",
          lambda a: torch.log_softmax(a[0], -1),
          lambda a, out: aten._log_softmax.out(a[0], -1, False, out=out))
_register("torch.softmax_backward", "softmax_backward", "torch softmax backward (eager)",
          lambda a: aten._softmax_backward_data(a[1], a[0], -1, a[0].dtype),
          lambda a, out: aten._softmax_backward_data.out(a[1], a[0], -1, a[0].dtype, grad_input=out))
_register("torch.log_softmax_backward", "log_softmax_backward", "torch log_softmax backward (eager)",
          lambda a: aten._log_softmax_backward_data(a[1], a[0], -1, a[0].dtype),
          lambda a, out: aten._log_softmax_backward_data.out(a[1], a[0], -1, a[0].dtype, out=out))


# ---- torch.compile: Inductor's generated Triton kernels for the same formulas
_COMPILE_FORMULAS = {
    "softmax": lambda x: torch.softmax(x, -1),
    "log_softmax": lambda x: torch.log_softmax(x, -1),
    "softmax_backward": lambda y, dy: y * (dy - (dy * y).sum(-1, keepdim=True)),
    "log_softmax_backward": lambda y, dy: dy - torch.exp(y) * dy.sum(-1, keepdim=True),
}
_compiled: dict = {}


def _compiled_call(op):
    def call(inputs):
        fn = _compiled.get(op)
        if fn is None:
            import torch._dynamo.config as dynamo_config

            # one graph per shape; never fall back to eager silently when shapes pile up
            dynamo_config.recompile_limit = 1024
            dynamo_config.accumulated_recompile_limit = 4096
            dynamo_config.fail_on_recompile_limit_hit = True
            fn = _compiled[op] = torch.compile(_COMPILE_FORMULAS[op], dynamic=False)
        return fn(*inputs)

    return call


COMPILE_SAMPLE_N = (1024, 4096, 32768, 131072)  # every shape costs a compile: time a sample


def _compile_supports(M, N, dtype):
    if N not in COMPILE_SAMPLE_N:
        return f"torch.compile is timed at N in {COMPILE_SAMPLE_N} only (each shape costs a compile)"
    return None


for _op in SOFTMAX_OPS:
    _register(f"compile.{_op.name}", _op.name, f"torch.compile of the {_op.name} formula (Inductor)",
              _compiled_call(_op.name), supports=_compile_supports)


# ---- Liger-Kernel 0.8.5 (softmax forward and backward only)
def _liger_forward(inputs):
    from liger_kernel.ops.softmax import _softmax_forward

    return _softmax_forward(inputs[0])[0]


def _liger_backward(inputs):
    from liger_kernel.ops.softmax import _softmax_backward
    from liger_kernel.ops.utils import calculate_settings

    y, dy = inputs
    block, warps = calculate_settings(y.shape[-1])
    return _softmax_backward(dy, y, block, warps, y.shape[-1] > block)


def _liger_supports(M, N, dtype):
    return f"Liger raises for N > {LIGER_MAX_N}" if N > LIGER_MAX_N else None


_register("liger.softmax", "softmax", "Liger-Kernel softmax (Triton)", _liger_forward,
          available=_liger, supports=_liger_supports)
_register("liger.softmax_backward", "softmax_backward", "Liger-Kernel softmax backward (Triton)",
          _liger_backward, available=_liger, supports=_liger_supports)

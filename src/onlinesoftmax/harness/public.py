"""The public ops (ops.py) as registry variants, one per (op, backend): what users call, with the
backend's own dispatch picking the regime. `sweep` times these against the baselines."""

from __future__ import annotations

import torch

from ..ops import softmax as ops
from ..opdefs import GPU_DTYPES, OPS, SOFTMAX_OPS
from ..registry import Variant, register
from ..runtime import available as runtime_available
from ..engines.triton.variants import available as triton_available


def _call(op: str, backend: str):
    log = op.startswith("log_")
    if op.endswith("_backward"):
        return lambda a: ops.backward(a[0], a[1], a[0].dim() - 1, log, backend)
    return lambda a: ops.forward(a[0], a[0].dim() - 1, log, backend)


for _backend, _available in (("cuda", runtime_available), ("triton", triton_available)):
    for _op in (op.name for op in SOFTMAX_OPS):
        _fn = _call(_op, _backend)
        register(Variant(
            name=f"api.{_backend}.{_op}", op=_op, backend=_backend,
            rung=f"onlinesoftmax.{_op.replace('_backward', '')} ({_backend}, auto regime)",
            seed_ref="issue: production ops", summary=f"the public op on the {_backend} backend",
            run=lambda inputs, out, fn=_fn: out.copy_(fn(inputs)), call=_fn,
            algo_bytes=OPS[_op].ideal_bytes,
            device="cuda" if torch.cuda.is_available() or _backend == "cuda" else "cpu",
            dtypes=GPU_DTYPES, available=_available,
        ))

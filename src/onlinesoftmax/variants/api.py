"""The public ops (ops.py) as registry variants, one per (op, backend): what users call, with the
backend's own dispatch picking the regime. `sweep` times these against the baselines."""

from __future__ import annotations

import torch

from .. import ops
from ..registry import OPS, Variant, ideal_bytes, register
from ..runtime import available as runtime_available
from .triton import available as triton_available

DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def _call(op: str, backend: str):
    log = op.startswith("log_")
    if op.endswith("_backward"):
        return lambda a: ops._backward(a[0], a[1], a[0].dim() - 1, log, backend)
    return lambda a: ops._forward(a[0], a[0].dim() - 1, log, backend)


for _backend, _available in (("cuda", runtime_available), ("triton", triton_available)):
    for _op in OPS:
        if _op == "sum":
            continue
        _fn = _call(_op, _backend)
        register(Variant(
            name=f"api.{_backend}.{_op}", op=_op, backend=_backend,
            rung=f"onlinesoftmax.{_op.replace('_backward', '')} ({_backend}, auto regime)",
            seed_ref="issue: production ops", summary=f"the public op on the {_backend} backend",
            run=lambda inputs, out, fn=_fn: out.copy_(fn(inputs)), call=_fn,
            algo_bytes=lambda M, N, s, op=_op: ideal_bytes(op, M, N, s),
            device="cuda" if torch.cuda.is_available() or _backend == "cuda" else "cpu",
            dtypes=DTYPES, available=_available,
        ))

"""PyTorch's own OpInfo samples for softmax and log_softmax, checked through our ops (used by test_opinfo.py on the
CPU and the GPU, and test_opinfo_triton.py under the Triton interpreter).

op_db holds four OpInfos: `softmax` and `log_softmax`, each plain (float dtypes) and `with_dtype` (any input
dtype, dtype=torch.float64). Their aliases `nn.functional.softmax` / `special.softmax` (and the log ones) and the
Tensor methods share the samples: each must give torch's own answer, which ours is compared with.

For every sample: the output's values, dtype, shape and strides; the gradient (values, dtype, shape, strides)
where the input requires grad. And for every sample with a floating input, a copy with one fully masked row (all
-inf along dim): the one documented difference, asserted explicitly: torch gives NaN on that row (and a NaN
gradient), ours 0 (log: -inf) and a zero gradient; every other element as torch.
"""

from __future__ import annotations

import torch
from torch.testing._internal.common_methods_invocations import op_db  # needs expecttest

import onlinesoftmax as osm

OPINFOS = [op for op in op_db if op.name in ("softmax", "log_softmax")]
assert len(OPINFOS) == 4, [(op.name, op.variant_test_name) for op in OPINFOS]
GPU_DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.float64)
# rtol per output dtype: a few ulps (both sides accumulate in fp32, fp64 for fp64); atol is rtol times the
# largest |value| of the output, as log_softmax = (x - m) - log d rounds like its largest term
RTOL = {torch.float64: 1e-12, torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1.6e-2}
NEG_INF = float("-inf")


def cases(device: str, dtypes=None) -> list:
    """(opinfo, input dtype) pairs, with readable ids, for pytest.mark.parametrize."""
    import pytest

    out = []
    for op in OPINFOS:
        for dtype in sorted(op.supported_dtypes(device), key=str):
            if dtypes is None or dtype in dtypes:
                out.append(pytest.param(op, dtype, id=f"{op.name}-{op.variant_test_name or 'plain'}-{dtype}"))
    return out


def check_samples(op, device: str, dtype: torch.dtype, backend: str, exact: bool = False) -> int:
    """Every sample of `op` (and its masked copy) through our op on `backend`; returns how many were checked.
    exact: bitwise equal to torch (the "cpu" backend runs torch's own kernel)."""
    n = 0
    gen = torch.Generator().manual_seed(0)
    for sample in op.sample_inputs(device, dtype, requires_grad=dtype.is_floating_point):
        _check(op, sample.input, sample.args, sample.kwargs, backend, exact, None, gen)
        n += 1
        x = sample.input
        if x.dtype.is_floating_point and x.numel() > 0:
            dim = sample.args[0] if sample.args else sample.kwargs["dim"]
            row = [0] * x.dim()
            if x.dim():
                row[dim] = slice(None)
            masked = x.detach().clone()
            masked[tuple(row)] = NEG_INF
            _check(op, masked.requires_grad_(x.requires_grad), sample.args, sample.kwargs, backend, exact,
                   tuple(row), gen)
            n += 1
    return n


def _check(op, x, args, kwargs, backend, exact, masked_row, gen) -> None:
    log = op.name == "log_softmax"
    ours = osm.log_softmax if log else osm.softmax
    want = op.op(x, *args, **kwargs)
    for name, torch_fn in [("method", op.method_variant)] + [(a.name, a.op) for a in op.aliases]:
        torch.testing.assert_close(torch_fn(x, *args, **kwargs), want, rtol=0, atol=0, equal_nan=True,
                                   msg=lambda m: f"torch's {name} disagrees with {op.name}: {m}")
    got = ours(x, *args, backend=backend, **kwargs)
    what = f"{op.name}({tuple(x.shape)} {x.dtype}, {args}, {kwargs}) on {backend}"
    _assert_matches(got, want, masked_row, NEG_INF if log else 0.0, exact, what)
    if not x.requires_grad:
        return
    dy = torch.randn(want.shape, generator=gen, dtype=torch.float64).to(want.dtype).to(want.device)
    (dx,) = torch.autograd.grad(got, x, dy)
    (dx_want,) = torch.autograd.grad(want, x, dy)
    _assert_matches(dx, dx_want, masked_row, 0.0, exact, f"the gradient of {what}")


def _assert_matches(got, want, masked_row, fill, exact, what) -> None:
    assert (got.dtype, got.shape, got.stride()) == (want.dtype, want.shape, want.stride()), \
        (what, (got.dtype, got.shape, got.stride()), (want.dtype, want.shape, want.stride()))
    if masked_row is not None:  # the documented difference: torch NaN, ours `fill`, on that row only
        assert want[masked_row].isnan().all(), (what, "torch no longer gives NaN on a masked row", want[masked_row])
        want = want.clone()
        want[masked_row] = fill
    finite = want[torch.isfinite(want)]
    rtol = 0.0 if exact else RTOL[want.dtype]
    scale = max(1.0, finite.abs().max().item()) if finite.numel() else 1.0
    torch.testing.assert_close(got, want, rtol=rtol, atol=rtol * scale, msg=lambda m: f"{what}: {m}")

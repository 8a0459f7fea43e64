"""The Triton cross-entropy kernels on the GPU (pytest -m gpu tests/test_gpu_cross_entropy.py): both kernels, every
dtype, the options, in place, loss only, linear CE and torch.compile, against the float64 reference on adversarial
logits. The vocab-parallel op on two GPUs with NCCL: benchmarks/vocab_parallel_nccl.py (torchrun)."""

import os

import numpy as np
import pytest
import torch

pytestmark = pytest.mark.gpu

if not torch.cuda.is_available():  # skip the module whole: no dozens of skipped items on CPU
    pytest.skip("needs a CUDA GPU (torch.cuda.is_available() is False)", allow_module_level=True)
if os.environ.get("TRITON_INTERPRET") == "1":
    pytest.skip("TRITON_INTERPRET=1: these are the compiled kernels' tests", allow_module_level=True)

import onlinesoftmax as osm  # noqa: E402
from onlinesoftmax import reference  # noqa: E402
from onlinesoftmax.engines.triton import cross_entropy_rules as R  # noqa: E402
TOL = {torch.float32: 2e-5, torch.bfloat16: 2e-2, torch.float16: 4e-3}


def _inputs(kind, M, V, dtype, gen):
    x = torch.randn(M, V, generator=gen, dtype=torch.float64) * 3
    t = torch.randint(0, V, (M,), generator=gen)
    if kind == "huge":
        x = torch.where(torch.rand(M, V, generator=gen) < 0.5, -1e4, 1e4)
    elif kind == "equal":
        x = torch.full((M, V), 3.0, dtype=torch.float64)
    elif kind == "argmin":
        t = x.argmin(1)
    elif kind == "ignored":
        t[:] = -100
    t[1::5] = -100
    return x.to(dtype).cuda(), t.cuda()


@pytest.mark.parametrize("V", (1000, 32000, 50257, 128256))
@pytest.mark.parametrize("dtype", (torch.float32, torch.bfloat16, torch.float16))
@pytest.mark.parametrize("kind", ("random", "huge", "equal", "argmin", "ignored"))
def test_against_float64(V, dtype, kind):
    gen = torch.Generator().manual_seed(V + len(kind))
    x, t = _inputs(kind, 67, V, dtype, gen)
    for kw in (dict(), dict(label_smoothing=0.1, z_loss=1e-4, softcap=30.0, reduction="sum")):
        xg = x.clone().requires_grad_()
        loss = osm.cross_entropy(xg, t, **kw)
        loss.backward()
        want_loss, want_grad = reference.cross_entropy(x, t, **kw)
        scale = 1e-2 if kind == "huge" and dtype != torch.float32 else 1.0  # x - lse at 1e4 in 16 bits
        got = float(loss.detach())
        if np.isnan(want_loss):
            assert np.isnan(got)
        else:
            assert abs(got - float(want_loss)) <= TOL[dtype] * max(1.0, abs(float(want_loss))) / scale
        np.testing.assert_allclose(xg.grad.double().cpu().numpy(), want_grad, atol=TOL[dtype] / scale * 5e-2,
                                   rtol=TOL[dtype] / scale)


def test_split_forced_small_and_inplace(monkeypatch):
    """The split kernel with many segments per row, and the gradient written over the logits."""
    monkeypatch.setattr(R, "SPLIT_CHUNK", 256)
    monkeypatch.setattr(R, "SPLIT_SEG_BYTES", 1024)
    gen = torch.Generator().manual_seed(1)
    x, t = _inputs("random", 300, 40000, torch.float32, gen)
    want_loss, want_grad = reference.cross_entropy(x, t, label_smoothing=0.05)
    xg = x.clone().requires_grad_()
    loss = osm.cross_entropy(xg, t, label_smoothing=0.05, inplace_grad=True)
    assert abs(float(loss) - float(want_loss)) < 1e-5 * abs(float(want_loss))
    np.testing.assert_allclose(xg.detach().double().cpu().numpy(), want_grad, atol=1e-7, rtol=1e-4)
    loss.backward(torch.tensor(2.0, device="cuda"))
    np.testing.assert_allclose(xg.grad.double().cpu().numpy(), 2 * want_grad, atol=2e-7, rtol=1e-4)


def test_loss_only_and_compile():
    gen = torch.Generator().manual_seed(2)
    x, t = _inputs("random", 64, 50257, torch.bfloat16, gen)
    want_loss, want_grad = reference.cross_entropy(x, t, reduction="none")
    got = osm.cross_entropy(x, t, reduction="none")  # no grad: the stats kernel alone
    np.testing.assert_allclose(got.double().cpu().numpy(), want_loss, rtol=2e-2, atol=2e-2)
    f = torch.compile(lambda a, b: osm.cross_entropy(a, b, z_loss=1e-4), fullgraph=True)
    xg = x.clone().requires_grad_()
    f(xg, t).backward()
    _, want_grad = reference.cross_entropy(x, t, z_loss=1e-4)
    np.testing.assert_allclose(xg.grad.double().cpu().numpy(), want_grad, atol=1e-4, rtol=2e-2)


def test_linear_cross_entropy_gpu():
    gen = torch.Generator(device="cuda").manual_seed(3)
    h = (torch.randn(1000, 256, device="cuda", generator=gen) * 0.5).to(torch.bfloat16).requires_grad_()
    w = (torch.randn(50257, 256, device="cuda", generator=gen) * 0.05).to(torch.bfloat16).requires_grad_()
    t = torch.randint(0, 50257, (1000,), device="cuda", generator=gen)
    loss = osm.linear_cross_entropy(h, w, t, chunk_tokens=256)
    loss.backward()
    hd, wd = h.detach().double().requires_grad_(), w.detach().double().requires_grad_()
    want = torch.nn.functional.cross_entropy(hd @ wd.t(), t)
    want.backward()
    assert abs(float(loss) - float(want)) < 2e-2
    assert float((h.grad.double() - hd.grad).abs().max()) < 1e-3 * float(hd.grad.abs().max()) * 20
    assert float((w.grad.double() - wd.grad).abs().max()) < 1e-3 * float(wd.grad.abs().max()) * 20

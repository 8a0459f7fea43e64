"""The Triton cross-entropy kernels on CPU tensors under TRITON_INTERPRET=1 (a process of its own: see the
Makefile): the rows kernel and the split kernel (tiny chunks and segments, a grid of 2 so reads and writes
interleave), every mode (fused, loss only, gradient from a given lse), against the float64 reference."""

import os

import numpy as np
import pytest
import torch

if os.environ.get("TRITON_INTERPRET") != "1":
    pytest.skip("run with TRITON_INTERPRET=1 in a process of its own", allow_module_level=True)
pytest.importorskip("triton")
pytestmark = [pytest.mark.filterwarnings("ignore::RuntimeWarning"),
              pytest.mark.filterwarnings("ignore::DeprecationWarning")]

from onlinesoftmax import reference  # noqa: E402
from onlinesoftmax.engines.triton import cross_entropy_rules as R  # noqa: E402
from onlinesoftmax.ops import cross_entropy as ce  # noqa: E402

SPLIT = dict(FORCE_CHUNK=16, FORCE_SEG_CHUNKS=2, FORCE_PROGRAMS=2)
OPTIONS = [dict(), dict(label_smoothing=0.1, z_loss=0.01, softcap=3.0), dict(reduction="sum", ignore_index=2),
           dict(reduction="none", label_smoothing=0.3)]


def _inputs(kind, M, V, dtype, seed):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(M, V, generator=gen, dtype=torch.float64) * 3
    t = torch.randint(0, V, (M,), generator=gen)
    if kind == "huge":
        x = torch.where(torch.rand(M, V, generator=gen) < 0.5, -1e4, 1e4) + x
    elif kind == "equal":
        x[:] = 2.0
    elif kind == "argmin":
        t = x.argmin(1)
    elif kind == "ignored":
        t[:] = -100
    t[1] = -100
    return x.to(dtype), t


@pytest.mark.parametrize("regime", ("rows", "split", "split_scalar"))
@pytest.mark.parametrize("kind", ("random", "huge", "equal", "argmin", "ignored"))
@pytest.mark.parametrize("opts", range(len(OPTIONS)))
def test_fused_against_float64(regime, kind, opts, monkeypatch):
    """Loss, gradient and each row's lse against float64; a grid of 2 programs in every regime, so that each walks
    several rows (a grid of one program a row had left the rows kernel's loop untested), and the lse unchecked
    before (a kernel storing 0.9 lse passed)."""
    monkeypatch.setattr(R, "FORCE_PROGRAMS", 2)
    if regime != "rows":
        for k, v in SPLIT.items():
            monkeypatch.setattr(R, k, v)
        monkeypatch.setattr(R, "SPLIT_LANES", regime == "split")
    kw = OPTIONS[opts]
    x, t = _inputs(kind, 5, 37, torch.float32, opts)
    t = torch.where(t == -100, kw.get("ignore_index", -100), t)
    xg = x.clone().requires_grad_()
    loss, lse = ce.cross_entropy(xg, t, backend="triton", return_lse=True, **kw)
    loss.sum().backward()
    want_loss, want_grad = reference.cross_entropy(x, t, **kw)
    cap = kw.get("softcap")
    xd = x.double() if cap is None else cap * torch.tanh(x.double() / cap)
    tol = 1e-5 * (1e3 if kind == "huge" else 1)
    np.testing.assert_allclose(lse.double().numpy(), torch.logsumexp(xd, 1).numpy(), rtol=1e-6, atol=tol)
    np.testing.assert_allclose(loss.detach().double().numpy(), want_loss, rtol=tol, atol=tol, equal_nan=True)
    np.testing.assert_allclose(xg.grad.double().numpy(), want_grad, rtol=2e-3 if kind == "huge" else 1e-4,
                               atol=tol * 1e-2)


@pytest.mark.parametrize("regime", ("rows", "split"))
def test_loss_only_inplace_bf16_and_grad_mode(regime, monkeypatch):
    if regime == "split":
        for k, v in SPLIT.items():
            monkeypatch.setattr(R, k, v)
    x, t = _inputs("random", 4, 70, torch.bfloat16, 7)
    want_loss, want_grad = reference.cross_entropy(x, t, reduction="none")
    got = ce.cross_entropy(x, t, backend="triton", reduction="none")  # stats only
    np.testing.assert_allclose(got.double().numpy(), want_loss, rtol=2e-2, atol=2e-2)
    xg = x.clone().requires_grad_()
    ce.cross_entropy(xg, t, backend="triton", inplace_grad=True).backward()
    _, want_grad = reference.cross_entropy(x, t)
    np.testing.assert_allclose(xg.detach().double().numpy(), want_grad, rtol=2e-2, atol=1e-3)
    # mode "grad": the gradient of a shard of columns from the rows' lse (vocab-parallel's second step)
    lse = torch.logsumexp(x.double(), 1).float()
    g = torch.full((4, 30), float("nan"))  # poisoned: row 1 (ignored) must be written as zeros
    x32 = x.float()
    ce.shard_grad(x32[:, 20:50].contiguous(), t, lse, torch.tensor(0.25), "triton", g, offset=20, v_total=70,
                  ignore_index=-100, label_smoothing=0.0, z_loss=0.0, softcap=None)
    _, want = reference.cross_entropy(x32, t, reduction="sum")
    np.testing.assert_allclose(g.double().numpy(), 0.25 * want[:, 20:50], rtol=1e-4, atol=1e-6)


def test_scale_rows_skips_ones():
    """Per-row factors, and a scalar one, through the kernel (unit-stride rows): the scalar path had no test (a
    kernel that never applied a scalar passed). Skipping the rows whose factor is 1 saves traffic, not values:
    only the values are checked."""
    from onlinesoftmax.engines.triton import cross_entropy as engine

    g = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    engine.scale_rows(g, torch.tensor([1.0, 2.0, 1.0]))
    want = torch.tensor([[0, 1, 2, 3], [8, 10, 12, 14], [8, 9, 10, 11]], dtype=torch.float32)
    assert torch.equal(g, want)
    engine.scale_rows(g, torch.tensor(0.5))
    assert torch.equal(g, want * 0.5)
    engine.scale_rows(g, torch.tensor(1.0))
    assert torch.equal(g, want * 0.5)


def test_target_out_of_range_flagged_by_the_kernel():
    from onlinesoftmax.ops.cross_entropy import TargetError

    x = torch.randn(3, 9)
    with pytest.raises(TargetError, match="target 9 out of range"):
        ce.cross_entropy(x, torch.tensor([0, 9, -100]), backend="triton")
    with pytest.raises(TargetError, match="target -3 out of range"):
        ce.cross_entropy(x, torch.tensor([-3, 1, 2]), backend="triton", reduction="none")


def test_linear_cross_entropy_triton(monkeypatch):
    for k, v in SPLIT.items():
        monkeypatch.setattr(R, k, v)
    gen = torch.Generator().manual_seed(5)
    h = torch.randn(13, 6, generator=gen)
    w = torch.randn(40, 6, generator=gen)
    t = torch.randint(0, 40, (13,), generator=gen)
    t[3] = -100
    a_h, a_w = h.clone().requires_grad_(), w.clone().requires_grad_()
    loss = ce.linear_cross_entropy(a_h, a_w, t, chunk_tokens=5, backend="triton", label_smoothing=0.1)
    loss.backward()
    b_h, b_w = h.double().requires_grad_(), w.double().requires_grad_()
    want = torch.nn.functional.cross_entropy(b_h @ b_w.t(), t, label_smoothing=0.1)
    want.backward()
    assert abs(float(loss.detach()) - float(want.detach())) < 1e-5
    np.testing.assert_allclose(a_h.grad.double().numpy(), b_h.grad.numpy(), rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(a_w.grad.double().numpy(), b_w.grad.numpy(), rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("regime", ("rows", "split"))
def test_shard_stats_match_the_reference_for_targets_in_other_shards(regime, monkeypatch, poisoned):
    """A shard's stats (vocab-parallel) carry the row sum whatever the options, and a target in a later shard whose
    local column falls in the kernel's padding (V_r .. the block) is no hit: x[target] = 0, not the padding's
    -inf (which made the merged loss +inf). Both kernels (the split kernel's stats mode had no test: writing the
    fused mode's row there passed), into buffers torch.empty fills with NaN."""
    if regime == "split":
        for k, v in SPLIT.items():
            monkeypatch.setattr(R, k, v)
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(4, 20, generator=gen)  # block 32: columns 20..31 are padding
    t = torch.tensor([1, 25, 35, -100])  # 25 and 35 belong to later shards
    got = ce.shard_stats(x, t, "triton")
    want = ce.reference_stats(x, t, 0, None)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_narrow_targets_keep_the_mean():
    """uint8 targets: the target kernel's padding lanes must not count as rows (their `other` is -100 cast to
    uint8, 156, which is no ignore_index)."""
    gen = torch.Generator().manual_seed(4)
    x = torch.randn(6, 200, generator=gen, requires_grad=True)
    t = torch.randint(0, 200, (6,), generator=gen)
    loss = ce.cross_entropy(x, t.to(torch.uint8), backend="triton")
    want = torch.nn.functional.cross_entropy(x.detach().double(), t)
    assert abs(float(loss) - float(want)) < 1e-5
    loss.backward()
    xd = x.detach().double().requires_grad_()
    torch.nn.functional.cross_entropy(xd, t).backward()
    np.testing.assert_allclose(x.grad.double().numpy(), xd.grad.numpy(), rtol=1e-4, atol=1e-7)


def test_scale_rows_of_a_transposed_gradient():
    """A gradient buffer whose columns are not at unit stride (a transposed weight's, strides (1, M)) is scaled
    element by element right, not along the wrong axis."""
    from onlinesoftmax.engines.triton import cross_entropy as engine

    g = torch.arange(12, dtype=torch.float32).reshape(4, 3).t()  # (3, 4), strides (1, 3)
    want = g * torch.tensor([[1.0], [2.0], [3.0]])
    engine.scale_rows(g, torch.tensor([1.0, 2.0, 3.0]))
    assert torch.equal(g, want)
    engine.scale_rows(g, torch.tensor(0.5))
    assert torch.equal(g, want * 0.5)

"""The attention rungs without a GPU (issue 16): they compile for sm_90 with no spills, the float64 reference and
its checker, the bytes and workspace models, the refusals. The GPU runs are test_gpu_attention_ladder.py."""

import numpy as np
import pytest
import torch

from onlinesoftmax import reference
from onlinesoftmax.errors import OnlineSoftmaxError, Unavailable
from onlinesoftmax.harness.check import compare
from onlinesoftmax.runtime import compile_unavailable

ARCH = "sm_90"
BF16, F16 = torch.bfloat16, torch.float16


# ---- the float64 reference and the checker --------------------------------------------------------


def _qkv(shape, seed=0, scale=1.0):
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(shape, generator=g, dtype=torch.float64) for _ in range(3))
    return q * scale, k * scale, v


def test_reference_is_the_textbook_formula():
    q, k, v = _qkv((2, 5, 16))
    s = (q @ k.transpose(-1, -2)) / 4.0
    want = torch.softmax(s, -1) @ v
    np.testing.assert_allclose(reference.attention(q, k, v)[0], want.numpy(), rtol=1e-10, atol=1e-14)
    mask = torch.ones(5, 5, dtype=torch.bool).triu(1)
    want_c = torch.softmax(s.masked_fill(mask, -torch.inf), -1) @ v
    got_c = reference.attention(q, k, v, causal=True)[0]
    np.testing.assert_allclose(got_c, want_c.numpy(), rtol=1e-10, atol=1e-14)
    np.testing.assert_allclose(got_c[:, 0], v[:, 0].numpy(), rtol=1e-10, atol=1e-14)  # the first row sees key 0 only


def test_reference_on_sampled_rows_matches_the_whole():
    q, k, v = _qkv((3, 40, 8))
    rows = [0, 1, 17, 38, 39]
    for causal in (False, True):
        np.testing.assert_allclose(reference.attention(q, k, v, causal, rows=rows)[0],
                                   reference.attention(q, k, v, causal)[0][:, rows], rtol=1e-10, atol=1e-14)


def test_reference_survives_large_logits():
    q, k, v = _qkv((1, 33, 64), scale=300.0)  # logits ~ 1e4: exp would overflow without the max shift
    o = reference.attention(q, k, v, causal=True)[0]
    assert np.isfinite(o).all()


def test_checker_catches_a_wrong_mask_and_a_wrong_scale():
    """Known-wrong twins: the non-causal answer, and softmax without 1/sqrt(D), fail against the reference."""
    q, k, v = _qkv((2, 24, 16))
    want = reference.attention(q, k, v, causal=True)[0]
    scale = reference.attention(q, k, v.abs(), causal=True)[0]
    good = torch.from_numpy(want).to(BF16)
    assert compare(good, want, BF16, scale).ok
    no_mask = torch.from_numpy(reference.attention(q, k, v, causal=False)[0]).to(BF16)
    assert not compare(no_mask, want, BF16, scale).ok
    unscaled = torch.softmax(q @ k.transpose(-1, -2), -1).masked_fill(
        torch.ones(24, 24, dtype=torch.bool).triu(1), 0)
    unscaled = (unscaled / unscaled.sum(-1, keepdim=True)) @ v
    assert not compare(unscaled.to(BF16), want, BF16, scale).ok


# ---- models and refusals (no compile needed) ----------------------------------------------------------


def _attn():
    if compile_unavailable():
        pytest.skip(compile_unavailable())
    from onlinesoftmax.ladder import attention

    return attention


def test_rungs_in_ladder_order_and_models():
    at = _attn()
    assert [r.name for r in at.RUNGS] == ["cuda.attn_a0", "cuda.attn_a1", "cuda.attn_a2"]
    BH, S, D, s = 64, 4096, 128, 2
    qkvo = 4 * BH * S * D * s
    a0, a1, a2 = at.RUNGS
    assert a0.hbm_bytes(BH, S, D, s, False) == 20 * BH * S * S + qkvo
    assert a1.hbm_bytes(BH, S, D, s, False) == a2.hbm_bytes(BH, S, D, s, True) == qkvo
    assert a0.extra_bytes(BH, S) == 8 * BH * S * S and a1.extra_bytes(BH, S) == a2.extra_bytes(BH, S) == 0
    # loads from L2: A1 re-reads K and V once per query row, A2 once per 64-row tile: 64x fewer
    assert a1.l2_bytes(BH, S, D, s, False) == BH * (2 * S * S * D * s + 2 * S * D * s)
    assert a2.l2_bytes(BH, S, D, s, False) == BH * (2 * (S // 64) * S * D * s + 2 * S * D * s)
    assert a2.l2_bytes(BH, S, D, s, True) < 0.52 * a2.l2_bytes(BH, S, D, s, False)
    assert at.flops(BH, S, D, True) == at.flops(BH, S, D, False) / 2 == 2 * BH * S * S * D


def test_supports_refuses_clearly():
    at = _attn()
    assert at.supports(4096, 128, BF16) is None and at.supports(1, 64, F16) is None
    assert "D = 96" in at.supports(100, 96, BF16)
    assert "bfloat16 or float16" in at.supports(100, 64, torch.float32)
    assert "65535" in at.supports(100, 64, BF16, BH=70000)
    with pytest.raises(OnlineSoftmaxError, match="no attention rung"):
        at.rung("cuda.attn_a9")


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error without a GPU")
def test_running_without_a_gpu_says_why():
    at = _attn()
    q = torch.zeros(1, 8, 64, dtype=BF16)
    with pytest.raises(Unavailable, match="cannot run here"):
        at.attention("cuda.attn_a2", q, q, q)


# ---- compiled with NVRTC for sm_90 -------------------------------------------------------------------


@pytest.fixture(scope="module")
def rows(private_nvrtc_cache):
    at = _attn()
    from onlinesoftmax.ladder import cuda as cv

    return cv.inspect_rows(ARCH, files=[at.FILE])


def test_every_attention_kernel_builds_without_spills(rows):
    from onlinesoftmax.ladder import cuda as cv

    assert {r["kernel"] for r in rows} == set(cv.ATTENTION_KERNELS)
    for r in rows:
        assert r["registers"] > 0 and r["stack"] == 0 and r["spill_stores"] == 0 and r["spill_loads"] == 0, r
        assert r["variants"] in ("cuda.attn_a0", "cuda.attn_a1", "cuda.attn_a2"), r


def test_attention_register_budgets(rows):
    # A1: 256 threads, two blocks per SM need <= 128; A2: 128 threads, two CTAs per SM need <= 256 (ptxas's 255)
    for r in rows:
        limit = 255 if r["kernel"].startswith("attn_a2<") else 128
        assert r["registers"] <= limit, r


def test_resources_add_dynamic_shared_memory(rows):
    at = _attn()
    for D in (64, 128):
        r = at.resources("cuda.attn_a2", D, BF16, True, ARCH)
        assert r["smem"] == at.a2_smem(D) == 5 * 64 * D * 2
        assert 2 * r["smem"] <= 227 * 1024  # two CTAs per SM on the H200
    a0 = at.resources("cuda.attn_a0", 128, F16, False, ARCH)
    assert a0["kernel"] == "attn_a0_scores<false> + online_v4<true> + attn_a0_pv<false>"

"""Attention on CPU: the float64 specification (reference.attention), the op's reference path against it, forward
and backward (through O and through LSE), gradcheck, rows with no visible key, validation errors, merge_attention's
algebra (halves == whole, the empty part is the identity, gradients) and torch.compile(fullgraph=True) through the
custom ops. The Triton kernels are tested in test_attention_interpreter.py (TRITON_INTERPRET=1) and
test_gpu_attention.py (GPU)."""

import math

import numpy as np
import pytest
import torch

import onlinesoftmax as osm
from onlinesoftmax import reference, state
from onlinesoftmax.engines.triton import attention_rules as rules
from onlinesoftmax.errors import ArgumentTypeError, OnlineSoftmaxError

F64 = torch.float64
NEG_INF = float("-inf")

# (B, H, Hkv, Sq, Sk, D, causal)
SHAPES = [
    (2, 4, 4, 7, 7, 8, False),
    (2, 4, 2, 7, 7, 8, True),  # GQA
    (1, 6, 2, 5, 11, 4, True),  # Sq < Sk: bottom-right
    (1, 2, 1, 9, 4, 8, True),  # Sq > Sk: the first 5 rows see no key
    (1, 3, 3, 6, 13, 16, False),
]


def _qkv(B, H, Hkv, Sq, Sk, D, seed, dtype=F64, grad=False):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(B, h, s, D, generator=g, dtype=F64).to(dtype).requires_grad_(grad)
            for h, s in ((H, Sq), (Hkv, Sk), (Hkv, Sk))]


def _naive(q, k, v, causal, scale):
    """Textbook float64 attention with torch ops (autograd): expanded heads, masked_fill, softmax."""
    group = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
    s = scale * q @ k.transpose(-1, -2)
    if causal:
        sq, sk = s.shape[-2:]
        s = s.masked_fill(~torch.ones(sq, sk, dtype=torch.bool).tril(sk - sq), NEG_INF)
    return torch.softmax(s, -1) @ v, torch.logsumexp(s, -1)


# ------------------------------------------------------------------ the specification
def test_causal_mask_is_bottom_right():
    m = reference.causal_mask(2, 4)
    assert m.tolist() == [[True, True, True, False], [True, True, True, True]]
    assert not reference.causal_mask(4, 2)[:2].any() and reference.causal_mask(4, 2)[3].all()


@pytest.mark.parametrize("shape", [s for s in SHAPES if not (s[6] and s[3] > s[4])])
def test_reference_is_textbook_attention(shape, seed):
    *dims, causal = shape
    q, k, v = _qkv(*dims, seed, grad=True)
    scale = 0.7
    o, lse = reference.attention(q, k, v, causal, scale)
    no, nl = _naive(q, k, v, causal, scale)
    np.testing.assert_allclose(o, no.detach().numpy(), atol=1e-12)
    np.testing.assert_allclose(lse, nl.detach().numpy(), atol=1e-12)
    do, dl = torch.randn_like(no), torch.randn_like(nl)
    torch.autograd.backward((no, nl), (do, dl))
    for mine, t in zip(reference.attention_backward(q, k, v, do, dl, causal, scale), (q, k, v)):
        np.testing.assert_allclose(mine, t.grad.numpy(), atol=1e-10)


def test_reference_rows_with_no_visible_key():
    q, k, v = _qkv(1, 2, 1, 9, 4, 8, 0)
    o, lse = reference.attention(q, k, v, causal=True)
    assert (o[:, :, :5] == 0).all() and (lse[:, :, :5] == -np.inf).all() and np.isfinite(lse[:, :, 5:]).all()
    dq, dk, dv = reference.attention_backward(q, k, v, torch.ones(1, 2, 9, 8, dtype=F64), causal=True)
    assert (dq[:, :, :5] == 0).all() and np.isfinite(dk).all() and np.isfinite(dv).all()


# ------------------------------------------------------------------ the op's reference path
@pytest.mark.parametrize("shape", SHAPES)
def test_op_matches_the_specification(shape, seed):
    *dims, causal = shape
    q, k, v = _qkv(*dims, seed, grad=True)
    o, lse = osm.attention(q, k, v, causal=causal, return_lse=True)
    ro, rl = reference.attention(q, k, v, causal)
    np.testing.assert_allclose(o.detach().numpy(), ro, atol=1e-12)
    np.testing.assert_array_equal(np.isinf(lse.detach().numpy()), np.isinf(rl))
    np.testing.assert_allclose(np.where(np.isinf(rl), 0, lse.detach().numpy()), np.where(np.isinf(rl), 0, rl),
                               atol=1e-12)
    do = torch.randn_like(o)
    dl = torch.where(lse.isfinite(), torch.randn_like(lse), 0)
    torch.autograd.backward((o, lse), (do, dl))
    for t, r in zip((q, k, v), reference.attention_backward(q, k, v, do, dl, causal)):
        assert t.grad.isfinite().all()
        np.testing.assert_allclose(t.grad.numpy(), r, atol=1e-10)


@pytest.mark.parametrize("shape", [s for s in SHAPES if not (s[6] and s[3] > s[4])])
def test_gradcheck_through_o_and_lse(shape, seed):
    *dims, causal = shape
    q, k, v = _qkv(*dims, seed, grad=True)
    assert torch.autograd.gradcheck(lambda a, b, c: osm.attention(a, b, c, causal=causal, return_lse=True),
                                    (q, k, v))


def test_no_visible_key_gives_zero_and_minus_inf_and_zero_grads():
    q, k, v = _qkv(1, 2, 1, 9, 4, 8, 1, grad=True)
    o, lse = osm.attention(q, k, v, causal=True, return_lse=True)
    assert (o[:, :, :5] == 0).all() and (lse[:, :, :5] == NEG_INF).all()
    o.sum().backward()
    assert (q.grad[:, :, :5] == 0).all() and not any(t.grad.isnan().any() for t in (q, k, v))


def test_no_key_at_all_and_no_query():
    q, k, v = _qkv(2, 2, 1, 3, 0, 8, 2, grad=True)
    o, lse = osm.attention(q, k, v, return_lse=True)
    assert o.shape == (2, 2, 3, 8) and (o == 0).all() and (lse == NEG_INF).all()
    o.sum().backward()
    assert (q.grad == 0).all() and k.grad.shape == (2, 1, 0, 8)
    q, k, v = _qkv(2, 2, 1, 0, 5, 8, 2)
    assert osm.attention(q, k, v).shape == (2, 2, 0, 8)


def test_dtypes_scale_and_layout(seed):
    q, k, v = _qkv(1, 4, 2, 6, 6, 8, seed)
    want, _ = reference.attention(q, k, v, True, 0.25)
    for dtype, tol in ((torch.float32, 1e-5), (torch.bfloat16, 3e-2), (torch.float16, 3e-3)):
        o = osm.attention(*(t.to(dtype) for t in (q, k, v)), causal=True, scale=0.25)
        assert o.dtype == dtype
        np.testing.assert_allclose(o.double().numpy(), want, atol=tol)
    default = osm.attention(q, k, v)
    np.testing.assert_allclose(default.numpy(), reference.attention(q, k, v, False, 1 / math.sqrt(8))[0])
    bshd = [t.transpose(1, 2).contiguous().transpose(1, 2) for t in (q, k, v)]  # (B, S, H, D) memory
    np.testing.assert_allclose(osm.attention(*bshd, causal=True, scale=0.25).numpy(), want, atol=1e-12)


# ------------------------------------------------------------------ validation
def test_bad_input_gives_clear_errors():
    q, k, v = _qkv(1, 4, 2, 5, 6, 8, 0)
    with pytest.raises(OnlineSoftmaxError, match="4-D"):
        osm.attention(q[0], k, v)
    with pytest.raises(OnlineSoftmaxError, match="must divide"):
        osm.attention(q, *_qkv(1, 3, 3, 5, 6, 8, 0)[1:])
    with pytest.raises(OnlineSoftmaxError, match="one shape"):
        osm.attention(q, k, v[:, :, :3])
    with pytest.raises(OnlineSoftmaxError, match="batch and head dim"):
        osm.attention(q, k[..., :4], v[..., :4])
    with pytest.raises(OnlineSoftmaxError, match="share a dtype"):
        osm.attention(q, k.float(), v)
    with pytest.raises(OnlineSoftmaxError, match="not supported"):
        osm.attention(*(t.to(torch.int32) for t in (q, k, v)))
    with pytest.raises(OnlineSoftmaxError, match="needs CUDA tensors"):
        osm.attention(*(t.half() for t in (q, k, v)), backend="triton")
    with pytest.raises(OnlineSoftmaxError, match="unknown backend"):
        osm.attention(q, k, v, backend="cuda")
    for bad in (0.0, -1.0, float("nan"), float("inf")):
        with pytest.raises(OnlineSoftmaxError, match="scale must be positive"):
            osm.attention(q, k, v, scale=bad)
    with pytest.raises(ArgumentTypeError):
        osm.attention(q, k, v, scale="0.1")
    with pytest.raises(ArgumentTypeError):
        osm.attention(q, k, v, causal=1)
    with pytest.raises(ArgumentTypeError):
        osm.attention(q.numpy(), k, v)


def test_kernel_head_dims():
    assert rules.unsupported(64, True) is None and rules.unsupported(128, True) is None
    assert rules.unsupported(256, False) is None
    assert "head dim 256" in rules.unsupported(256, True)
    assert "head dim 96" in rules.unsupported(96, False)
    assert [rules.length_bucket(n) for n in (1, 128, 129, 4096, 5000, 10 ** 6)] == [128, 128, 256, 4096, 8192,
                                                                                   16384]
    for kernel in ("forward", "dkdv", "dq"):
        for d in (16, 64, 128):
            assert rules.candidates(kernel, d)


# ------------------------------------------------------------------ merge_attention
def test_merge_of_two_key_halves_is_the_whole(seed):
    q, k, v = _qkv(2, 4, 2, 5, 12, 8, seed, grad=True)
    o, lse = osm.attention(q, k, v, return_lse=True)
    o1, l1 = osm.attention(q, k[:, :, :7], v[:, :, :7], return_lse=True)
    o2, l2 = osm.attention(q, k[:, :, 7:], v[:, :, 7:], return_lse=True)
    mo, ml = osm.merge_attention(o1, l1, o2, l2)
    torch.testing.assert_close(mo, o, rtol=0, atol=1e-12)
    torch.testing.assert_close(ml, lse, rtol=0, atol=1e-12)
    do, dl = torch.randn_like(o), torch.randn_like(lse)
    whole = torch.autograd.grad((o, lse), (q, k, v), (do, dl))
    parts = torch.autograd.grad((mo, ml), (q, k, v), (do, dl))
    for w, p in zip(whole, parts):
        torch.testing.assert_close(p, w, rtol=0, atol=1e-10)


def test_merge_with_a_causal_suffix(seed):
    """The last Sq queries: the key prefix is seen in full, the suffix causally (ring attention's last step)."""
    q, k, v = _qkv(1, 2, 2, 4, 10, 8, seed)
    o, lse = osm.attention(q, k, v, causal=True, return_lse=True)
    o1, l1 = osm.attention(q, k[:, :, :5], v[:, :, :5], return_lse=True)
    o2, l2 = osm.attention(q, k[:, :, 5:], v[:, :, 5:], causal=True, return_lse=True)
    mo, ml = osm.merge_attention(o1, l1, o2, l2)
    torch.testing.assert_close(mo, o, rtol=0, atol=1e-12)
    torch.testing.assert_close(ml, lse, rtol=0, atol=1e-12)


def test_merge_with_an_empty_part_is_the_identity(seed):
    q, k, v = _qkv(1, 2, 2, 6, 5, 8, seed, grad=True)
    o, lse = osm.attention(q, k, v, return_lse=True)
    empty_o, empty_lse = torch.zeros_like(o), torch.full_like(lse, NEG_INF)
    for mo, ml in (osm.merge_attention(o, lse, empty_o, empty_lse), osm.merge_attention(empty_o, empty_lse, o, lse)):
        assert torch.equal(mo, o) and torch.equal(ml, lse)
    (mo.sum() + ml.sum()).backward()
    assert all(t.grad.isfinite().all() for t in (q, k, v))


def test_merge_of_two_empty_parts_is_empty_without_nan():
    o = torch.zeros(3, 4, dtype=F64, requires_grad=True)
    lse = torch.full((3,), NEG_INF, dtype=F64, requires_grad=True)
    mo, ml = osm.merge_attention(o, lse, o, lse)
    assert (mo == 0).all() and (ml == NEG_INF).all()
    (mo.sum() + ml.sum()).backward()
    assert o.grad.isfinite().all() and lse.grad.isfinite().all()


def test_merge_does_not_overflow_and_gradchecks(seed):
    g = torch.Generator().manual_seed(seed)
    o1, o2 = (torch.randn(2, 3, 4, generator=g, dtype=F64, requires_grad=True) for _ in range(2))
    l1 = torch.tensor([[800.0, -800.0, 0.0], [1e4, 3.0, -2.0]], dtype=F64, requires_grad=True)
    l2 = torch.tensor([[-800.0, 800.0, 0.5], [1e4 - 1, 2.0, NEG_INF]], dtype=F64, requires_grad=True)
    mo, ml = osm.merge_attention(o1, l1, o2, l2)
    assert mo.isfinite().all() and ml.isfinite().all()
    assert ml[0, 0].item() == 800.0 and ml[1, 2].item() == -2.0
    torch.testing.assert_close(ml[1, 0], torch.logaddexp(l1[1, 0], l2[1, 0]))
    finite = [t.detach()[:, :2].clone().requires_grad_() for t in (l1, l2)]
    assert torch.autograd.gradcheck(
        lambda a, la, b, lb: osm.merge_attention(a, la, b, lb), (o1[:, :2], finite[0], o2[:, :2], finite[1]))


def test_merge_lse_numpy_and_torch_agree(seed):
    rng = np.random.default_rng(seed)
    o1, o2 = rng.standard_normal((2, 5, 3))
    l1, l2 = rng.standard_normal((2, 5)) * 50
    l1[0] = l2[1] = -np.inf
    l1[4] = l2[4] = -np.inf
    o1[0] = o2[1] = o1[4] = o2[4] = 0.0  # an empty part's O is 0
    no, nl = state.merge_lse(o1, l1, o2, l2)
    to, tl = state.merge_lse(*(torch.from_numpy(a) for a in (o1, l1, o2, l2)))
    np.testing.assert_allclose(to.numpy(), no, atol=1e-12)
    np.testing.assert_allclose(tl.numpy(), nl, atol=1e-12)
    assert nl[4] == -np.inf and (no[4] == 0).all()


def test_merge_validation():
    o, lse = torch.zeros(2, 3, 4), torch.zeros(2, 3)
    with pytest.raises(OnlineSoftmaxError, match="merge_attention"):
        osm.merge_attention(o, lse, o[:, :2], lse)
    with pytest.raises(ArgumentTypeError):
        osm.merge_attention(o, lse, o, 0.0)


# ------------------------------------------------------------------ torch.compile
def test_torch_compile_fullgraph_runs_the_custom_ops(seed):
    q, k, v = _qkv(1, 4, 2, 6, 6, 8, seed, dtype=torch.float32, grad=True)

    @torch.compile(fullgraph=True, backend="aot_eager")
    def f(a, b, c):
        o, lse = osm.attention(a, b, c, causal=True, return_lse=True)
        return o.sum() + lse.sum()

    f(q, k, v).backward()
    compiled = [t.grad.clone() for t in (q, k, v)]
    for t in (q, k, v):
        t.grad = None
    o, lse = osm.attention(q, k, v, causal=True, return_lse=True)
    (o.sum() + lse.sum()).backward()
    for g, t in zip(compiled, (q, k, v)):
        torch.testing.assert_close(g, t.grad)


def test_custom_op_fake_kernels():
    from onlinesoftmax.ops.attention import attention_backward_op, attention_forward_op

    q, k, v = _qkv(2, 4, 2, 5, 6, 8, 0, dtype=torch.bfloat16)
    torch.library.opcheck(attention_forward_op, (q, k, v, True, 0.3, "reference"))
    o, lse, lse2 = attention_forward_op(q, k, v, True, 0.3, "reference")
    torch.library.opcheck(attention_backward_op, (q, k, v, o, lse2, torch.randn_like(o), torch.randn_like(lse), True,
                                                  0.3, "reference"))


def test_custom_op_fake_kernels_on_a_bshd_layout():
    """The (B, S, H, D) layout seen as (B, H, S, D): the fake kernels give what the real ones give (contiguous
    gradients), so torch.compile's stride assertions hold; a fake that kept q's strides failed here."""
    from onlinesoftmax.ops.attention import attention_backward_op, attention_forward_op

    g = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(2, s, h, 16, generator=g, dtype=F64).transpose(1, 2)  # (B, S, H, D) storage
               for s, h in ((5, 4), (6, 2), (6, 2)))
    torch.library.opcheck(attention_forward_op, (q, k, v, False, 0.25, "reference"))
    o, lse, lse2 = attention_forward_op(q, k, v, False, 0.25, "reference")
    torch.library.opcheck(attention_backward_op, (q, k, v, o, lse2, torch.randn_like(o), None, False, 0.25,
                                                  "reference"))


def test_dkdv_program_order():
    """Longest first (heads on grid axis 0) only for causal grouped heads, and only while the key tiles fit axis 1."""
    from onlinesoftmax.engines.triton import attention as engine

    assert engine.heads_first_dkdv(True, 16, 4, 4096)
    assert not engine.heads_first_dkdv(False, 16, 4, 4096) and not engine.heads_first_dkdv(True, 16, 16, 4096)
    assert engine.heads_first_dkdv(True, 16, 4, 65535 * 64)
    assert not engine.heads_first_dkdv(True, 16, 4, 65535 * 64 + 1)


def test_batch_times_heads_beyond_the_grid_is_refused():
    """B x H rides on the kernels' grid axis 1 (at most 65535 programs): beyond it a clear error, not a failed
    launch (meta tensors: no memory)."""
    from onlinesoftmax.engines.triton import attention as engine

    engine._check((("q", torch.empty(2, 32767, 4, 64, device="meta")),), 64, False)
    with pytest.raises(OnlineSoftmaxError, match="split the batch"):
        engine._check((("q", torch.empty(2, 40000, 4, 64, device="meta")),), 64, False)


def test_the_attention_ladders_check_sees_every_head(seed):
    """harness.attention.check_sample (the attention ladder's GPU tests and table) on CPU tensors: a right output
    passes; a wrong middle head, a wrong middle row of a sequence it checks whole, and an element left NaN (a
    poisoned output's unwritten one, outside the sampled rows of a longer sequence) each fail."""
    from onlinesoftmax.harness.attention import FULL_ROWS, SAMPLE_ROWS, check_sample

    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(2, 3, 2 * SAMPLE_ROWS + 5, 16, generator=g) for _ in range(3))
    out = torch.nn.functional.scaled_dot_product_attention(q.double(), k.double(), v.double()).float()
    wrong = out.clone()
    wrong[0, 1, SAMPLE_ROWS + 2] += 0.5  # a middle row: checked, the sequence being short
    assert check_sample(out, q, k, v, False).ok and not check_sample(wrong, q, k, v, False).ok
    q, k, v = (torch.randn(2, 3, FULL_ROWS + 2 * SAMPLE_ROWS + 5, 16, generator=g) for _ in range(3))
    for causal in (False, True):
        out = torch.nn.functional.scaled_dot_product_attention(q.double(), k.double(), v.double(),
                                                               is_causal=causal).float()
        assert check_sample(out, q, k, v, causal).ok
        wrong = out.clone()
        wrong[0, 2, 3] += 0.5  # batch 0, head 2 of 3: neither the first nor the last (batch, head) pair
        assert not check_sample(wrong, q, k, v, causal).ok
        unwritten = out.clone()
        unwritten[1, 1, SAMPLE_ROWS + 2, 7] = float("nan")  # a middle row of a long sequence: not sampled
        rep = check_sample(unwritten, q, k, v, causal)
        assert not rep.ok and "finite" in rep.message

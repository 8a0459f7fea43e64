"""The Triton attention kernels on CPU tensors under TRITON_INTERPRET=1, forward and backward, against the float64
specification (reference.attention / attention_backward).

Tiny shapes (S <= 64, D in {16, 32}) with the interpreter's 16 x 16 tiles, so every stage of the kernels runs:
whole unmasked key tiles, the causal diagonal, ragged last tiles in Sq and Sk, grouped-query heads (the dK/dV
group sum), Sq < Sk and Sq > Sk (rows with no visible key: O = 0, LSE = -inf, zero gradients), the LSE's own
gradient, and a (B, S, H, D) layout. fp16 only: the interpreter's tl.dot on bf16 reads the raw bits (bf16 is
covered on the GPU, test_gpu_attention.py).
"""

import os

import numpy as np
import pytest
import torch

if os.environ.get("TRITON_INTERPRET") != "1":
    pytest.skip("run with TRITON_INTERPRET=1 in a process of its own", allow_module_level=True)
pytest.importorskip("triton")

pytestmark = [pytest.mark.filterwarnings("ignore::RuntimeWarning"),
              pytest.mark.filterwarnings("ignore::DeprecationWarning")]

import onlinesoftmax as osm  # noqa: E402
from onlinesoftmax import reference  # noqa: E402

F16 = torch.float16

# (B, H, Hkv, Sq, Sk, D, causal)
CASES = [
    (1, 2, 1, 40, 40, 16, True),
    (1, 2, 2, 33, 50, 32, False),
    (1, 4, 2, 50, 20, 16, True),  # Sq > Sk: 30 rows see no key
    (2, 2, 1, 17, 64, 16, True),  # Sq < Sk
    (1, 2, 2, 64, 64, 32, False),  # whole tiles only
    (1, 3, 1, 1, 37, 16, True),  # one query (decoding) sees every key
    (1, 4, 2, 33, 50, 16, False),  # grouped heads, not causal: dK/dV summed over the group in the usual order
]


def _qkv(B, H, Hkv, Sq, Sk, D, seed, bshd=False):
    g = torch.Generator().manual_seed(seed)

    def make(h, s):
        if bshd:
            return torch.randn(B, s, h, D, generator=g).to(F16).transpose(1, 2).requires_grad_()
        return torch.randn(B, h, s, D, generator=g).to(F16).requires_grad_()

    return make(H, Sq), make(Hkv, Sk), make(Hkv, Sk)


def _check(q, k, v, causal, scale=None):
    o, lse = osm.attention(q, k, v, causal=causal, scale=scale, return_lse=True, backend="triton")
    ro, rl = reference.attention(q, k, v, causal, scale)
    assert o.dtype == F16 and lse.dtype == torch.float32
    np.testing.assert_allclose(o.detach().double().numpy(), ro, atol=2e-3)
    empty = np.isinf(rl)
    np.testing.assert_array_equal(np.isinf(lse.detach().numpy()), empty)
    assert (lse.detach().numpy()[empty] == -np.inf).all() and (o.detach().numpy()[empty] == 0).all()
    np.testing.assert_allclose(lse.detach().numpy()[~empty], rl[~empty], rtol=1e-5, atol=1e-5)
    do = torch.randn_like(o)
    dl = torch.where(lse.isfinite(), torch.randn_like(lse), 0)
    torch.autograd.backward((o, lse), (do, dl))
    for name, t, r in zip("qkv", (q, k, v), reference.attention_backward(q, k, v, do, dl, causal, scale)):
        g = t.grad.double().numpy()
        assert np.isfinite(g).all(), name
        np.testing.assert_allclose(g, r, atol=1e-2 * max(1.0, np.abs(r).max()), err_msg=f"d{name}")
    if empty.any():
        assert (q.grad.numpy()[empty] == 0).all()


@pytest.mark.parametrize("case", CASES, ids=[f"B{c[0]}H{c[1]}kv{c[2]}q{c[3]}k{c[4]}d{c[5]}{'c' if c[6] else ''}"
                                             for c in CASES])
def test_kernels_match_float64(case, seed):
    *dims, causal = case
    _check(*_qkv(*dims, seed), causal)


def test_strided_heads_and_custom_scale(seed):
    q, k, v = _qkv(1, 4, 2, 30, 45, 16, seed, bshd=True)
    assert q.stride(-1) == 1 and not q.is_contiguous()
    _check(q, k, v, True, scale=0.5)


"""Every attention rung (issue 16) against the float64 reference on a GPU: both dtypes, D = 64 and 128, causal and
not, S not a multiple of any tile, large logits, the causal edge rows, NaN-poisoned outputs.

Run on the device with `pytest -m gpu tests/test_gpu_attention.py`; skipped cleanly without a GPU.
"""

import pytest
import torch

pytestmark = pytest.mark.gpu

if not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU (torch.cuda.is_available() is False)", allow_module_level=True)

pytest.importorskip("cuda.core", reason="cuda-core not installed (pip install .[cuda])")

from onlinesoftmax.errors import OnlineSoftmaxError  # noqa: E402
from onlinesoftmax.harness.attention import check_sample, inputs  # noqa: E402
from onlinesoftmax.ladder import attention as at  # noqa: E402

RUNGS = [r.name for r in at.RUNGS]
DTYPES = [torch.bfloat16, torch.float16]
# 1 (a single key), below and past a warp (A1's 32 keys), a whole and a partial 64-tile (A2), past A0's 16-tiles
SEQS = [1, 17, 64, 65, 130, 257]


def _run(name, q, k, v, causal):
    out = torch.full_like(q, float("nan"))  # poisoned: any element not written fails
    at.attention(name, q, k, v, causal, out)
    torch.cuda.synchronize()
    return out


@pytest.mark.parametrize("name", RUNGS)
@pytest.mark.parametrize("dtype", DTYPES, ids=["bf16", "fp16"])
@pytest.mark.parametrize("D", [64, 128])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("S", SEQS)
def test_rung_matches_float64(name, dtype, D, causal, S, seed):
    q, k, v = inputs(2, 3, S, D, dtype, seed)
    out = _run(name, q, k, v, causal)
    rep = check_sample(out, q, k, v, causal)
    assert rep.ok, rep.message


@pytest.mark.parametrize("name", RUNGS)
@pytest.mark.parametrize("D", [64, 128])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_large_logits(name, D, causal, seed):
    """q and k times 30: logits in the hundreds to thousands, rows nearly one-hot; no overflow, no NaN."""
    q, k, v = inputs(1, 2, 200, D, torch.bfloat16, seed, kind="large")
    out = _run(name, q, k, v, causal)
    assert torch.isfinite(out).all()
    rep = check_sample(out, q, k, v, causal)
    assert rep.ok, rep.message


@pytest.mark.parametrize("name", RUNGS)
@pytest.mark.parametrize("D", [64, 128])
def test_causal_edge_rows(name, D, seed):
    """Row 0 sees key 0 only: O[0] = V[0]; the last row sees every key; a 4-D [B, H, S, D] input, S = 1000."""
    q, k, v = inputs(2, 2, 1000, D, torch.bfloat16, seed)
    out = _run(name, q, k, v, True)
    torch.testing.assert_close(out[:, :, 0], v[:, :, 0], rtol=1e-2, atol=1e-3)
    rep = check_sample(out, q, k, v, True)
    assert rep.ok, rep.message


@pytest.mark.parametrize("name", RUNGS)
def test_long_sequence_sampled(name, seed):
    """S = 2049 (one past a power of two), causal and not: rows at both ends of the first and last head."""
    q, k, v = inputs(1, 2, 2049, 128, torch.bfloat16, seed)
    for causal in (False, True):
        rep = check_sample(_run(name, q, k, v, causal), q, k, v, causal)
        assert rep.ok, rep.message


@pytest.mark.parametrize("name", RUNGS)
def test_refusals(name):
    q = torch.zeros(1, 2, 64, 96, dtype=torch.bfloat16, device="cuda")
    with pytest.raises(OnlineSoftmaxError, match="D = 96"):
        at.attention(name, q, q, q)
    q = torch.zeros(1, 2, 64, 64, dtype=torch.float32, device="cuda")
    with pytest.raises(OnlineSoftmaxError, match="bfloat16 or float16"):
        at.attention(name, q, q, q)
    q = torch.zeros(1, 2, 64, 128, dtype=torch.bfloat16, device="cuda")[..., ::2]
    with pytest.raises(OnlineSoftmaxError, match="contiguous"):
        at.attention(name, q, q, q)

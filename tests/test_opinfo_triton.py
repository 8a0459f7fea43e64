"""PyTorch's OpInfo samples for softmax / log_softmax through the Triton backend on CPU tensors, under
TRITON_INTERPRET=1 in a process of its own (like test_triton_interpreter.py; see opinfo_samples.py). float64
(and the with_dtype variants' casts to it) takes the backend's float64 path, torch ops."""

import os

import pytest

if os.environ.get("TRITON_INTERPRET") != "1":
    pytest.skip("run with TRITON_INTERPRET=1 in a process of its own", allow_module_level=True)
pytest.importorskip("triton")

from opinfo_samples import cases, check_samples  # noqa: E402

# The interpreter computes in NumPy, which warns on the inf - inf of the masked rows (and on its own scalars)
pytestmark = [pytest.mark.filterwarnings("ignore::RuntimeWarning"),
              pytest.mark.filterwarnings("ignore::DeprecationWarning"),
              pytest.mark.filterwarnings("ignore:Casting complex values to real:UserWarning"),
              pytest.mark.filterwarnings("ignore:ComplexHalf support is experimental:UserWarning")]


@pytest.mark.parametrize("op, dtype", cases("cpu"))
def test_triton_backend_matches_torch(op, dtype, monkeypatch):
    """... and the plain fp32 / fp16 / bf16 samples launch Triton kernels (a spy on the launcher: 27 of the 33 cases
    take the float64 path, so a launcher that never ran would otherwise go unseen there)."""
    import torch

    from onlinesoftmax.engines.triton import softmax as K

    launches = []
    launch = K._launch_on
    monkeypatch.setattr(K, "_launch_on", lambda *a, **kw: (launches.append(1), launch(*a, **kw))[1])
    assert check_samples(op, "cpu", dtype, "triton") >= 7
    if not op.variant_test_name and dtype != torch.float64:
        assert launches, "no Triton kernel ran"

"""PyTorch's OpInfo samples for softmax / log_softmax (and their aliases nn.functional.*) through our ops:
on the CPU for the default ("cpu": bitwise torch's answer) and the reference backend, every input dtype the
OpInfos list; on the GPU (marker gpu) for the CUDA backend, fp32, fp16, bf16 and fp64. See opinfo_samples.py."""

import pytest
import torch

from opinfo_samples import GPU_DTYPES, cases, check_samples

# complex inputs of the with_dtype variants (complex32 among them) are cast to float64, which warns as torch's
# own cast does
pytestmark = [pytest.mark.filterwarnings("ignore:Casting complex values to real:UserWarning"),
              pytest.mark.filterwarnings("ignore:ComplexHalf support is experimental:UserWarning")]


@pytest.mark.parametrize("op, dtype", cases("cpu"))
def test_cpu_backend_gives_torchs_answer(op, dtype):
    assert check_samples(op, "cpu", dtype, "cpu", exact=True) >= 7


@pytest.mark.parametrize("op, dtype", cases("cpu"))
def test_reference_backend_matches_torch(op, dtype):
    assert check_samples(op, "cpu", dtype, "reference") >= 7


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU")
@pytest.mark.parametrize("op, dtype", cases("cuda", GPU_DTYPES))
def test_cuda_backend_matches_torch(op, dtype):
    assert check_samples(op, "cuda", dtype, "cuda") >= 7

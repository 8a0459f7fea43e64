"""Every CUDA ladder variant against the float64 reference on a GPU, adversarial inputs included.

Run on the device with `pytest -m gpu tests/test_gpu_cuda.py`; skipped cleanly without a GPU.
"""

import pytest
import torch

pytestmark = pytest.mark.gpu

if not torch.cuda.is_available():  # skip the module whole: no thousands of skipped items on CPU
    pytest.skip("needs a CUDA GPU (torch.cuda.is_available() is False)", allow_module_level=True)

pytest.importorskip("cuda.core", reason="cuda-core not installed (pip install .[cuda])")

from onlinesoftmax import registry  # noqa: E402
from onlinesoftmax.harness.check import check_variant, run_checked  # noqa: E402
from onlinesoftmax.harness.inputs import kinds_for  # noqa: E402
from onlinesoftmax.ladder import cuda as cv  # noqa: E402  (registers the cuda variants)

F32 = torch.float32

SOFTMAX_SHAPES = [
    (1, 1),  # N = 1, M = 1
    (3, 7),  # odd N
    (2, 4),
    (5, 33),  # odd N, just past a warp
    (4, 100),  # N < block size, N % 4 == 0
    (3, 255),  # N < block size, odd
    (2, 256),
    (2, 257),
    (3, 1000),  # N % 4 == 0, not a multiple of the block
    (2, 1023),
    (2, 1024),  # V3 slot boundaries: 1024 * SLOTS and just past
    (2, 1028),
    (2, 2052),
    (2, 4096),
    (2, 4097),
    (1, 8196),
    (1, 16384),  # the largest V3 row
    (1, 16388),  # refused by V3
    (1200, 12),  # more rows than V4's grid (4 x SMs): grid-stride wraps; many thread-per-row blocks
    (257, 64),  # thread-per-row kernels: a partial second block of rows
    (1, 65539),  # large odd N for the block kernels
    (2, 65540),  # large N % 4 == 0: V2 / V4 float4 path
]

SUM_SHAPES = [(1, 1), (1, 7), (1, 255), (1, 256), (1, 257), (1, 511), (1, 513), (1, 1000),
              (1, 65539), (1, (1 << 22) + 5)]


def _cuda(op=None):
    """The ladder's variants (api.cuda.* and others also use backend "cuda": not tested here)."""
    return [v for v in registry.variants(op=op, backend="cuda") if v.name.startswith("cuda.")]


def _cases(op, shapes):
    for v in _cuda(op):
        for M, N in shapes:
            for kind in kinds_for(op):
                yield pytest.param(v.name, M, N, kind, id=f"{v.name}-{M}x{N}-{kind}")


def _check(name, M, N, kind, seed):
    v = registry.get(name)
    reason = v.supports(M, N, F32)
    if reason:
        pytest.skip(f"{name} refuses ({M}, {N}): {reason}")
    if v.serial_rows and M * N > 1 << 17 and M > 1:  # one thread walks each row: keep their long rows few
        pytest.skip("thread-per-row kernel on a large case: covered by the smaller shapes")
    report = check_variant(v, M, N, F32, kind, seed)
    assert not report.skipped, report.message
    assert report.ok, f"{name} ({M}, {N}) {kind}: {report.message}"


@pytest.mark.parametrize("name,M,N,kind", list(_cases("softmax", SOFTMAX_SHAPES)))
def test_softmax_variant(name, M, N, kind, seed):
    _check(name, M, N, kind, seed)


@pytest.mark.parametrize("name,M,N,kind", list(_cases("sum", SUM_SHAPES)))
def test_sum_variant(name, M, N, kind, seed):
    _check(name, M, N, kind, seed)


@pytest.mark.parametrize("name", [v.name for v in _cuda("sum")])
def test_sum_32m_floats(name, seed):
    """The ladder's size: 32M floats, several levels of partials."""
    _check(name, 1, 32 << 20, "normal", seed)


@pytest.mark.parametrize("name", [v.name for v in _cuda("sum")])
def test_sum_of_2_24_ones_is_exact(name):
    """2^24 ones: every partial sum is an integer of at most 2^24, exact in fp32 in any order and any grid, so the
    answer is exactly 2^24. A dropped or repeated partial shows, where the normal inputs' tolerance (2e-5 of
    sum |x|: about 540 at 32M) lets the loss of a thousand elements through."""
    v = registry.get(name)
    N = 1 << 24
    reason = v.supports(1, N, F32)
    if reason:
        pytest.skip(f"{name} refuses (1, {N}): {reason}")
    out = torch.empty(1, device="cuda")
    run_checked(v, (torch.ones(1, N, device="cuda"),), out)
    assert out.item() == float(N), (name, out.item())


@pytest.mark.parametrize("name", ["cuda.online_v3", "cuda.online_v2", "cuda.safe_3pass"])
def test_seed_shape_8192x4096(name, seed):
    _check(name, 8192, 4096, "outliers", seed)


def test_refusal_is_reported_not_raised(seed):
    v = registry.get("cuda.online_v3")
    reason = v.supports(2, 16388, F32)
    assert reason and "16384" in reason
    report = check_variant(v, 2, 16388, F32, "normal", seed)
    assert report.skipped and report.ok and "16384" in report.message
    report = check_variant(registry.get("cuda.online_v2"), 2, 4097, F32, "normal", seed)
    assert report.skipped and "multiple of 4" in report.message


def test_runs_on_torch_current_stream():
    v = registry.get("cuda.online_v3")
    x = torch.randn(64, 2048, device="cuda")
    want = torch.softmax(x.double(), dim=-1).float()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        torch.cuda._sleep(10**8)  # ~50 ms on s first: a launch on another stream would run before the poison below
        out = torch.empty_like(x)
        out.fill_(float("nan"))
        v.run((x,), out)
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    torch.testing.assert_close(out, want, rtol=2e-5, atol=1e-6)


def test_every_variant_is_available_here():
    for v in _cuda():
        assert v.available() is None, (v.name, v.available())


def test_resources_match_present_gpu():
    r = registry.get("cuda.online_v3").resources(8192, 4096, F32)
    assert r["kernel"] == "online_v3<4>" and r["stack"] == 0 and r["spill_stores"] == 0


def test_kernel_loads_from_disk_cache(tmp_path, monkeypatch):
    """A cache hit loads the cubin with the stored name-expression mapping and launches."""
    import numpy as np

    from onlinesoftmax.runtime import launch, nvrtc

    monkeypatch.setenv(nvrtc.CACHE_ENV, str(tmp_path))
    names = cv.FILES["online_softmax.cu"]
    arch = nvrtc.current_arch()
    nvrtc.clear_memory_cache()
    opts = nvrtc.CompileOptions(defines=(("OSM_DISK_CACHE_TEST", "1"),))
    first = nvrtc.compile_source("online_softmax.cu", names, arch=arch, options=opts, package=cv.SOURCES)
    nvrtc.clear_memory_cache()
    mod = nvrtc.compile_source("online_softmax.cu", names, arch=arch, options=opts, package=cv.SOURCES)
    assert mod.from_cache == "disk" and mod.cubin == first.cubin
    x = torch.randn(3, 1000, device="cuda")
    out = torch.full_like(x, float("nan"))
    k = launch.kernel(mod, "online_v3<1>", x.device.index)
    k.launch(3, cv.ONLINE_BLOCK, (x.data_ptr(), out.data_ptr(), np.int32(3), np.int32(1000)))
    torch.cuda.synchronize()
    torch.testing.assert_close(out, torch.softmax(x, -1), rtol=2e-5, atol=1e-6)


def test_launch_error_names_the_kernel():
    import numpy as np

    from onlinesoftmax.errors import OnlineSoftmaxError
    from onlinesoftmax.runtime import launch

    mod = cv.module("online_softmax.cu")
    k = launch.kernel(mod, "online_v1", torch.cuda.current_device())
    x = torch.randn(2, 8, device="cuda")
    with pytest.raises(OnlineSoftmaxError, match="online_v1"):
        k.launch(2, 4096, (x.data_ptr(), x.data_ptr(), np.int32(2), np.int32(8)))  # block too large

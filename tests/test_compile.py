"""CUDA kernels compile for sm_90 with NVRTC (no GPU needed); ptxas budgets; the disk cache.

Every kernel and template instantiation of the ladder is compiled once per session (a few
seconds) into a temporary cache directory; the checks read the ptxas -v report.
"""

import json
import re

import pytest
import torch

from onlinesoftmax import registry
from onlinesoftmax.errors import OnlineSoftmaxError, Unavailable
from onlinesoftmax.runtime import compile_unavailable, nvrtc

if compile_unavailable():  # pragma: no cover - CI installs cuda-core, cuda-bindings and nvidia-cuda-nvrtc
    pytest.skip(compile_unavailable(), allow_module_level=True)

from onlinesoftmax.ladder import cuda as cv  # noqa: E402  (registers the cuda variants)

ARCH = "sm_90"
pytestmark = pytest.mark.usefixtures("private_nvrtc_cache")  # cubins out of ~/.cache (conftest.py)
LADDER = (
    [f"cuda.reduce_k{k}" for k in range(7)]
    + [f"cuda.safe_k{k}" for k in range(1, 5)]
    + ["cuda.safe_3pass", "cuda.online_v0", "cuda.online_v1", "cuda.online_v2", "cuda.online_v3",
       "cuda.online_v3_rtidx", "cuda.online_v4"]
)


def _ladder():
    """The seeds' rungs (other modules register backend "cuda" variants too: api.cuda.*, and the
    production regimes cuda.softmax_* ...), in registry order."""
    return [v for v in registry.variants(backend="cuda") if v.name in LADDER]


@pytest.fixture(scope="module")
def rows():
    return cv.inspect_rows(ARCH)


def test_every_kernel_compiles(rows):
    got = {(r["file"], r["kernel"]) for r in rows}
    want = {(f, k) for f, names in cv.FILES.items() for k in names}
    assert got == want
    for r in rows:
        assert r["registers"] > 0, r
        assert r["arch"] == ARCH


def test_no_kernel_spills(rows):
    spilling = [r for r in rows if r["spill_stores"] or r["spill_loads"]]
    assert not spilling, spilling


def test_register_budget(rows):
    # 256-thread blocks: more than 255 registers cannot launch; 128+ halves occupancy again. The tensor-core
    # attention rung runs 128-thread blocks (test_attention_ladder.py holds it to its own budget)
    for r in rows:
        if not r["kernel"].startswith("attn_a2<"):
            assert r["registers"] <= 128, r


def test_v3_stays_in_registers_and_rtidx_does_not(rows):
    v3 = [r for r in rows if r["kernel"].startswith("online_v3<")]
    rt = [r for r in rows if r["kernel"].startswith("online_v3_rtidx<")]
    assert len(v3) == len(cv.V3_SLOTS) and len(rt) == len(cv.V3_RTIDX_SLOTS)
    for r in v3:
        assert r["stack"] == 0, r
    for r in rt:
        assert r["stack"] > 0, r  # the runtime-indexed cache lives in local memory
        assert r["spill_stores"] == 0 and r["spill_loads"] == 0, r


def test_other_kernels_have_no_stack(rows):
    for r in rows:
        if not r["kernel"].startswith("online_v3_rtidx<"):
            assert r["stack"] == 0, r


def test_every_row_names_its_variants(rows):
    for r in rows:
        assert r["variants"].startswith("cuda."), r


def test_disk_cache_round_trip(tmp_path, monkeypatch):
    monkeypatch.setenv(nvrtc.CACHE_ENV, str(tmp_path))
    names = cv.FILES["reduction.cu"]
    nvrtc.clear_memory_cache()
    first = nvrtc.compile_source("reduction.cu", names, arch=ARCH, package=cv.SOURCES)
    assert first.from_cache == "compiled"
    files = sorted(p.name for p in tmp_path.iterdir())
    assert files == [f"{first.key}.cubin", f"{first.key}.json"], files
    assert not any(p.name.endswith(".tmp") for p in tmp_path.iterdir())

    assert nvrtc.compile_source("reduction.cu", names, arch=ARCH, package=cv.SOURCES) is first  # in-process hit
    nvrtc.clear_memory_cache()
    second = nvrtc.compile_source("reduction.cu", names, arch=ARCH, package=cv.SOURCES)
    assert second.from_cache == "disk"
    assert second.key == first.key
    assert second.report == first.report
    assert second.symbol_mapping == first.symbol_mapping
    assert second.cubin == first.cubin
    meta = json.loads((tmp_path / f"{first.key}.json").read_text())
    assert set(meta["symbol_mapping"]) == set(names)

    # a different arch or option set is a different entry
    other = nvrtc.compile_source("reduction.cu", names, arch="sm_80", package=cv.SOURCES)
    assert other.key != first.key and other.from_cache == "compiled"


def test_torn_cache_entry_is_recompiled(tmp_path, monkeypatch):
    monkeypatch.setenv(nvrtc.CACHE_ENV, str(tmp_path))
    nvrtc.clear_memory_cache()
    first = nvrtc.compile_source("reduction.cu", ["reduce_k0"], arch=ARCH, package=cv.SOURCES)
    (tmp_path / f"{first.key}.cubin").write_bytes(b"garbage")
    nvrtc.clear_memory_cache()
    again = nvrtc.compile_source("reduction.cu", ["reduce_k0"], arch=ARCH, package=cv.SOURCES)
    assert again.from_cache == "compiled" and again.cubin == first.cubin


def test_compile_is_deterministic(tmp_path, monkeypatch):
    monkeypatch.setenv(nvrtc.CACHE_ENV, str(tmp_path))
    nvrtc.clear_memory_cache()
    a = nvrtc.compile_source("safe_softmax.cu", ["safe_k3"], arch=ARCH, use_disk=False, package=cv.SOURCES)
    nvrtc.clear_memory_cache()
    b = nvrtc.compile_source("safe_softmax.cu", ["safe_k3"], arch=ARCH, use_disk=False, package=cv.SOURCES)
    assert a.cubin == b.cubin and a.report == b.report and a.log == b.log


def test_headers_are_inlined_with_line_markers():
    src = nvrtc.expand_source("online_softmax.cu", cv.SOURCES)
    assert not re.search(r'^\s*#\s*include', src, re.M)
    assert '#line 1 "common.cuh"' in src and "md_merge" in src
    assert '"online_softmax.cu"' in src


def test_compile_error_is_reported(tmp_path, monkeypatch):
    monkeypatch.setenv(nvrtc.CACHE_ENV, str(tmp_path))
    with pytest.raises(OnlineSoftmaxError, match="no_such_kernel"):
        nvrtc.compile_source("reduction.cu", ["no_such_kernel"], arch=ARCH, use_disk=False, package=cv.SOURCES)
    with pytest.raises(OnlineSoftmaxError, match="not found"):
        nvrtc.compile_source("missing.cu", ["k"], arch=ARCH, use_disk=False, package=cv.SOURCES)


def test_parse_ptxas():
    log = """ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function '_Z1kILi4EEvPfi' for 'sm_90'
ptxas info    : Function properties for _Z1kILi4EEvPfi
ptxas         .     128 bytes stack frame, 8 bytes spill stores, 12 bytes spill loads
ptxas info    : Used 40 registers, used 1 barriers, 2048 bytes smem, 380 bytes cmem[0]
ptxas info    : Compiling entry function '_Z5plainPf' for 'sm_90'
ptxas info    : Function properties for _Z5plainPf
ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 8 registers, used 0 barriers
"""
    rep = nvrtc.parse_ptxas(log, {"k<4>": b"_Z1kILi4EEvPfi"})
    assert rep["k<4>"] == {"registers": 40, "smem": 2048, "stack": 128, "spill_stores": 8,
                           "spill_loads": 12, "barriers": 1, "cmem": 380, "mangled": "_Z1kILi4EEvPfi"}
    assert rep["_Z5plainPf"]["registers"] == 8 and rep["_Z5plainPf"]["smem"] == 0


# ---- the variants, without a GPU ---------------------------------------------------------------


def test_ladder_registered_in_order():
    names = [v.name for v in _ladder()]
    assert names == LADDER
    for v in _ladder():
        assert v.device == "cuda" and v.backend == "cuda" and v.rung and v.seed_ref and v.summary
        assert v.op == ("sum" if "reduce" in v.name else "softmax")


def test_bytes_models():
    g = registry.get
    M, N, s = 8192, 4096, 4
    mn = M * N * s
    assert g("cuda.online_v3").algo_bytes(M, N, s) == 2 * mn
    assert g("cuda.online_v3_rtidx").algo_bytes(M, N, s) == 2 * mn
    for name in ("cuda.online_v0", "cuda.online_v1", "cuda.online_v2", "cuda.online_v4"):
        assert g(name).algo_bytes(M, N, s) == 3 * mn
    assert g("cuda.safe_3pass").algo_bytes(M, N, s) == 4 * mn + 5 * M * 4
    assert g("cuda.safe_k1").algo_bytes(M, N, s) == 5 * mn
    for k in (2, 3, 4):
        assert g(f"cuda.safe_k{k}").algo_bytes(M, N, s) == 6 * mn
    n = 32 << 20  # K0: 32M -> 131072 -> 512 -> 2 -> 1 partials, each written once and read once
    partials = 131072 + 512 + 2
    assert g("cuda.reduce_k0").algo_bytes(1, n, 4) == 4 * n + 4 * (2 * partials + 1)
    for k in range(7):
        b = g(f"cuda.reduce_k{k}").algo_bytes(1, n, 4)
        assert 4 * n < b < 4 * n * 1.01


def test_supports_reports_without_raising():
    f32 = torch.float32
    v2, v3, rt, v4 = (registry.get(f"cuda.online_{s}") for s in ("v2", "v3", "v3_rtidx", "v4"))
    assert v2.supports(4, 4096, f32) is None
    assert "multiple of 4" in v2.supports(4, 4097, f32)
    assert v3.supports(1, 16384, f32) is None
    assert "16384" in v3.supports(1, 16388, f32)
    assert "multiple of 4" in rt.supports(1, 6, f32)
    assert v4.supports(3, 4097, f32) is None  # scalar path
    for v in _ladder():
        assert v.supports(1, 1, f32) is None or "multiple of 4" in v.supports(1, 1, f32)
        assert isinstance(v.supports(0, 5, f32), str)
        assert isinstance(v.refuses(4, 8, torch.float16), str)


def test_v3_slot_choice():
    v3 = registry.get("cuda.online_v3")
    assert v3.resources(8192, 4096, torch.float32)["kernel"] == "online_v3<4>"
    assert v3.resources(4, 4, torch.float32)["kernel"] == "online_v3<1>"
    assert v3.resources(4, 1028, torch.float32)["kernel"] == "online_v3<2>"
    assert v3.resources(4, 16384, torch.float32)["kernel"] == "online_v3<16>"
    assert registry.get("cuda.online_v3_rtidx").resources(4, 4, torch.float32)["kernel"] == "online_v3_rtidx<2>"
    v4 = registry.get("cuda.online_v4")
    assert v4.resources(4, 4096, torch.float32)["kernel"] == "online_v4<true>"
    assert v4.resources(4, 4095, torch.float32)["kernel"] == "online_v4<false>"
    with pytest.raises(OnlineSoftmaxError):
        v3.resources(4, 20000, torch.float32)


def test_resources_without_gpu():
    for v in _ladder():
        r = v.resources(2, 1024, torch.float32)
        assert r["spill_stores"] == 0 and r["registers"] > 0, (v.name, r)
    three = registry.get("cuda.safe_3pass").resources(2, 1024, torch.float32)
    assert set(three["per_kernel"]) == {"pass1_row_max", "pass2_row_sum", "pass3_normalize"}


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU path")
def test_no_gpu_is_unavailable_not_a_traceback():
    v = registry.get("cuda.online_v3")
    assert "GPU" in v.available()
    x = torch.zeros(2, 8)
    with pytest.raises(Unavailable):
        v.run((x,), torch.empty_like(x))
    from onlinesoftmax.runtime import launch

    with pytest.raises(Unavailable):
        launch.ensure_device(0)
    with pytest.raises(Unavailable):
        nvrtc.current_arch()

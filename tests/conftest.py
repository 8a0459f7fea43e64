"""Fresh random inputs in every session; the seed is printed so a failure can be replayed
with ONLINESOFTMAX_SEED=<seed>."""

import os
import random

import pytest

# The Triton interpreter is fixed per process when kernels are defined; its tests run in their
# own process (see the Makefile) and are left out of the main session.
collect_ignore = ([] if os.environ.get("TRITON_INTERPRET") == "1"
                  else ["test_triton_interpreter.py", "test_opinfo_triton.py", "test_attention_interpreter.py",
                        "test_cross_entropy_interpreter.py"])

SEED = int(os.environ.get("ONLINESOFTMAX_SEED", random.randrange(1 << 31)))


def pytest_report_header(config):
    return f"onlinesoftmax seed: {SEED} (replay with ONLINESOFTMAX_SEED={SEED})"


@pytest.fixture
def seed(request):
    """A seed per test: the session seed mixed with the test's name."""
    return (SEED + sum(map(ord, request.node.nodeid))) % (1 << 31)


@pytest.fixture
def poisoned(monkeypatch):
    """torch.empty, empty_like and Tensor.new_empty NaN-filled (floating dtypes) for the test: outputs a kernel
    leaves unwritten show as NaN whatever the allocator hands back (zeros among them)."""
    import torch

    def poison(t):
        return t.fill_(float("nan")) if t.is_floating_point() else t

    empty, empty_like, new_empty = torch.empty, torch.empty_like, torch.Tensor.new_empty
    monkeypatch.setattr(torch, "empty", lambda *a, **kw: poison(empty(*a, **kw)))
    monkeypatch.setattr(torch, "empty_like", lambda *a, **kw: poison(empty_like(*a, **kw)))
    monkeypatch.setattr(torch.Tensor, "new_empty", lambda self, *a, **kw: poison(new_empty(self, *a, **kw)))


@pytest.fixture(scope="module")
def private_nvrtc_cache(tmp_path_factory):
    """Keep a test module's cubins out of ~/.cache: a fresh NVRTC disk cache for the module."""
    from onlinesoftmax.runtime import nvrtc

    mp = pytest.MonkeyPatch()
    mp.setenv(nvrtc.CACHE_ENV, str(tmp_path_factory.mktemp("nvrtc-cache")))
    yield
    mp.undo()

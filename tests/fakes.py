"""Stand-ins for the driver-facing objects, so the launch layer can be tested without a GPU; the threads the race
tests run; the disassembler the SASS tests read cubins with."""

import pathlib
import threading

import pytest


def run_threads(fn, args_list) -> None:
    """fn(*args) on a thread of its own for each args in args_list, all started, then all joined."""
    ts = [threading.Thread(target=fn, args=args) for args in args_list]
    for t in ts:
        t.start()
    for t in ts:
        t.join()


def stub_device(monkeypatch, sms: int) -> None:
    """engines.cuda.run's device queries answered without CUDA, for tensors on the CPU: kernels available, device 0,
    `sms` SMs (the kernels themselves are the caller's to stub)."""
    from onlinesoftmax.engines.cuda import run

    monkeypatch.setattr(run, "available", lambda: None)
    monkeypatch.setattr(run, "_device_index", lambda x, op: 0)
    monkeypatch.setattr(run, "sms", lambda device: sms)


class FakeLoadedKernel:
    """Stands in for runtime.launch.LoadedKernel: no driver is touched; records the shared memory asked for."""

    name, device = "fwd_row<0,0,4,512,8,0,1>", 0

    class module:
        filename = "softmax.cu"

    class kernel:
        handle = "handle"

    def __init__(self):
        self.smem = []

    def allow_smem(self, smem):
        self.smem.append(smem)


def cuobjdump() -> pathlib.Path:
    """The cuobjdump Triton ships (the SASS tests' disassembler; CI installs Triton), or the test skipped."""
    import triton

    cu = pathlib.Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
    if not cu.exists():
        pytest.skip("triton's bundled cuobjdump is not here")
    return cu


def stub_triton_driver(launches: list | None = None, stream: list | None = None) -> None:
    """Triton's driver replaced for this process (call it in a process of its own, before any launch): kernels compile
    for sm_90 as on the H200 (no GPU needed), on device -1 (where CPU tensors are, so the launchers' device checks
    pass), and each launch appends what the compiled kernel's launcher was handed (grid, stream, function, metadata,
    hooks, arguments; its int32 tensors as copies) to `launches` (None: nothing, for timing the host's part) instead of
    reaching a GPU, then fills the int32 tensors it was handed with 1, as the split kernel's counters are left: a
    buffer handed twice shows it. The current stream is stream[0] (default 7), which a caller may change between
    calls."""
    import torch
    from triton.backends.compiler import GPUTarget
    from triton.compiler.compiler import CompiledKernel
    from triton.runtime.driver import driver

    stream = stream if stream is not None else [7]

    class StubDriver:
        def get_current_device(self):
            return -1

        def get_current_stream(self, device):
            return stream[0]

        def get_current_target(self):
            return GPUTarget("cuda", 90, 32)

    def launched(*handed):
        counters = [a for a in handed if isinstance(a, torch.Tensor) and a.dtype == torch.int32]
        launches.append(tuple(a.clone() if any(a is c for c in counters) else a for a in handed))
        for c in counters:
            c.fill_(1)

    def init_handles(self):
        if self.module is None:
            self.module, self.function = "module", f"{self.name} {self.hash}"  # one compiled kernel
            self.n_regs, self.n_spills, self.n_max_threads = 32, 0, 1024
            self._run = (lambda *handed: None) if launches is None else launched

    driver.set_active(StubDriver())
    CompiledKernel._init_handles = init_handles

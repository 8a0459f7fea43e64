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

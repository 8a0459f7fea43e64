"""Would a launch made from C++ bring an eager call to torch's host time? (issue 12: the eager overhead line.)

    PYTHONPATH=src python benchmarks/native_launch_probe.py [--n 1024]    # on the GPU machine (g++ and ninja needed)

The measured floor of today's path (docs/tuning.md, the host's time of an eager call): an allocation from Python
(torch.empty_like) plus the bare cuLaunchKernel already cost as much as torch's whole softmax call. This probe builds
a small torch C++ extension (torch.utils.cpp_extension.load_inline, cached by torch under its extensions folder)
whose one function allocates the output with at::empty_like and launches a prepared launch's kernel through libcuda's
cuLaunchKernel with a parameter block on its own stack (the three pointers and the row count per call, the other
scalars read from the prepared block: no lock), and times, in one process: torch.softmax, osm.softmax, the
extension's call alone and the extension behind the Python hot path's checks. Each output is checked against torch.
Nothing here is used by the package."""

from __future__ import annotations

import argparse
import ctypes
import sys
import time

import torch

CONTIGUOUS = torch.contiguous_format
SOURCE = r"""
#include <torch/extension.h>
typedef int (*launch_t)(void*, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, void*, void**,
                        void**);
// out = a fresh contiguous tensor like x; one launch of (x, b, out, M, <the prepared block's other scalars>)
torch::Tensor alloc_launch(const torch::Tensor& x, int64_t b, int64_t fn, int64_t handle, int64_t grid, int64_t bx,
                           int64_t by, int64_t smem, int64_t stream, int64_t block_addr, int64_t nscalars, int64_t M) {
  auto out = at::empty_like(x, at::MemoryFormat::Contiguous);
  void* pa = x.data_ptr();
  void* pb = reinterpret_cast<void*>(b);
  void* po = out.data_ptr();
  long long rows = M;
  void** shared = reinterpret_cast<void**>(block_addr);
  void* params[16] = {&pa, &pb, &po, &rows};
  TORCH_CHECK(nscalars >= 1 && nscalars <= 13, "scalars: ", nscalars);
  for (int64_t i = 1; i < nscalars; i++) params[3 + i] = shared[3 + i];
  int err = reinterpret_cast<launch_t>(fn)(reinterpret_cast<void*>(handle), grid, 1, 1, bx, by, 1, smem,
                                           reinterpret_cast<void*>(stream), params, nullptr);
  TORCH_CHECK(err == 0, "cuLaunchKernel failed: ", err);
  return out;
}
"""


def build():
    from torch.utils.cpp_extension import is_ninja_available, load_inline

    if not is_ninja_available():  # the device image has g++ (nvcc's host compiler) but may lack ninja
        raise SystemExit("torch's extension builder needs ninja: pip install --target DIR a ninja wheel (pip download "
                         "ninja) and put DIR/bin on PATH and DIR on PYTHONPATH")

    t0 = time.perf_counter()
    ext = load_inline("osm_native_launch_probe", cpp_sources=SOURCE, functions=["alloc_launch"],
                      extra_cflags=["-O2"], verbose=False)
    return ext, time.perf_counter() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=1024)
    args = ap.parse_args()
    import onlinesoftmax as osm
    from onlinesoftmax.engines.cuda import run as E
    from onlinesoftmax.harness.extras import wall_us
    from onlinesoftmax.runtime import launch

    ext, built = build()
    print(f"# extension built (or loaded from torch's cache) in {built:.1f} s", flush=True)
    x = torch.randn(1, args.n, device="cuda")
    out = torch.empty_like(x)
    E.forward(x, out, 1, False)
    pa, po, dev = x.data_ptr(), out.data_ptr(), x.device.index
    shaped = E._fwd_shapes.get((False, x.shape, x.dtype, dev, pa & 15, po & 15))
    p, grid = shaped.launch, shaped.grid
    if p is None or p._args is None:
        raise SystemExit("no prepared launch through libcuda's ctypes entry for this shape")
    fn = ctypes.cast(launch._libcuda().cuLaunchKernel, ctypes.c_void_p).value
    handle, (bx, by), smem = int(p.lk.kernel.handle), p.dims[4:6], p.dims[7]
    nscalars = len(p._vals)
    cuda_runs = osm.ops.engines.cuda_runs

    def native(t):
        return ext.alloc_launch(t, 0, fn, handle, grid, bx, by, smem, launch.stream_handle(dev), p._addr, nscalars, 1)

    def hot_path(t, dim=-1, dtype=None, backend="auto"):  # the checks of ops/softmax.py _apply's hot path, then C++
        if (not torch.compiler.is_compiling() and type(t) is torch.Tensor and dtype is None and type(dim) is int
                and t.is_cuda and (backend == "cuda" or backend == "auto" and cuda_runs())
                and not (t.requires_grad and torch.is_grad_enabled())):
            return native(t)
        raise SystemExit("not the hot path")

    for f in (native, hot_path):
        torch.testing.assert_close(f(x), torch.softmax(x, -1))
    print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}, fp32 1 x {args.n}; µs per call (wall, "
          "2000 calls back to back, median of 5)", flush=True)
    for label, f in (("torch.softmax(x, -1)", lambda t: torch.softmax(t, -1)), ("osm.softmax(x)", osm.softmax),
                     ("C++: empty_like + cuLaunchKernel", native), ("the hot path's checks + C++", hot_path),
                     ("torch.empty_like(x, contiguous)", lambda t: torch.empty_like(t, memory_format=CONTIGUOUS)),
                     ("cuLaunchKernel alone (ctypes, C values)", lambda t: p._launch(*p._args))):
        print(f"{wall_us(f, x):8.2f}  {label}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

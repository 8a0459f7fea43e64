// native.cpp -- one prepared launch into a fresh output, from C++: the allocation (at::empty_like, contiguous) and
// cuLaunchKernel in one call, with the parameter block on this call's stack. What the eager hot path costs from
// Python (an allocation through torch's Python binding, then a ctypes call with its lock around a shared block)
// adds up to more than torch's whole softmax call; here it is one pybind11 call (runtime/native.py builds it).
//
// alloc_launch(fn, handle, grid, bx, by, smem, block, nscalars, rows, stream, x, b) -> out
//   fn       libcuda's cuLaunchKernel (its address)
//   handle   the kernel (CUkernel, as the ctypes path passes it); grid, (bx, by), smem as that launch's
//   block    a PreparedLaunch's parameter block (void**): pointers at 0..2, then nscalars scalars; the first
//            scalar (the row count) is replaced by `rows`, the others read from the block (never written after
//            the launch is built)
//   stream   the raw CUstream; x the first input (out is empty_like(x)), b the second pointer (dy, or 0)
#include <torch/extension.h>

typedef int (*launch_t)(void*, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, void*, void**,
                        void**);

torch::Tensor alloc_launch(int64_t fn, int64_t handle, int64_t grid, int64_t bx, int64_t by, int64_t smem,
                           int64_t block, int64_t nscalars, int64_t rows, int64_t stream, const torch::Tensor& x,
                           int64_t b) {
  TORCH_CHECK(nscalars >= 1 && nscalars <= 12, "alloc_launch: 1 to 12 scalars, got ", nscalars);
  torch::Tensor out = at::empty_like(x, at::MemoryFormat::Contiguous);
  void* pa = x.data_ptr();
  void* pb = reinterpret_cast<void*>(b);
  void* po = out.data_ptr();
  TORCH_CHECK(reinterpret_cast<uintptr_t>(po) % 16 == 0, "alloc_launch: the allocator gave an output off a 16-byte "
              "boundary; the plan was made for an aligned one");
  long long m = rows;
  void** shared = reinterpret_cast<void**>(block);
  void* params[16] = {&pa, &pb, &po, &m};
  for (int64_t i = 1; i < nscalars; i++) params[3 + i] = shared[3 + i];
  int err;
  {
    pybind11::gil_scoped_release no_gil;  // the driver's call takes microseconds: other Python threads run
    err = reinterpret_cast<launch_t>(fn)(reinterpret_cast<void*>(handle), (unsigned)grid, 1, 1, (unsigned)bx,
                                         (unsigned)by, 1, (unsigned)smem, reinterpret_cast<void*>(stream), params,
                                         nullptr);
  }
  TORCH_CHECK(err == 0, "cuLaunchKernel failed: CUresult ", err);
  return out;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("alloc_launch", &alloc_launch); }

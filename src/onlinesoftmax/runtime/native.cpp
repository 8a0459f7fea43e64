// native.cpp -- the eager hot path of softmax / log_softmax (forward and backward) in one C++ call: the shape's
// lookup, the allocation of the output (at::empty_like) and cuLaunchKernel. From Python the same call costs more than
// torch's whole softmax (an allocation through torch's binding, a ctypes call, the Python around them; issue 12).
//
// A table maps what decides the launch -- the backend, the op, dtype, device, the inputs' offsets from a 16-byte
// boundary and the exact sizes of contiguous rows over the last dim -- to one prepared launch (engines/cuda/run.py
// puts the shapes it has planned, engines/triton/softmax.py the shapes it launches ready; each removes them when its
// own cache drops them). A call whose shape is not in the table, or
// that the table cannot take as is, returns None and the caller takes the Python path, which plans, launches and puts.
// Every table access holds the GIL (pybind11 calls do), so the table needs no lock of its own; the GIL is released
// only around the driver's call, with everything that call reads copied to this call's stack first (the entry too:
// the allocation may run Python that removes it).
//
//   put(op, backend, a, b, b_param, fn, ctx, handle, grid, bx, by, smem, scalars, owner) -> key (bytes) or None
//        op 0..3 (softmax, log_softmax, their backward); backend 0 (cuda) or 1 (triton); a, b: a call's tensors (b
//        None forward); b_param: whether the kernel takes b's pointer as its second parameter (the CUDA kernels
//        take a null one forward, Triton's forward kernels none); fn: libcuda's cuLaunchKernel; ctx: the device's
//        primary context (a call launches only where it is current); handle the CUkernel or CUfunction, grid / block
//        / smem the launch's; scalars the raw bytes (4 or 8) of each parameter after the pointers; owner: what keeps
//        the kernel loaded (held until the entry is removed; its `name` names the kernel in a failed launch's error)
//   forward(x, dim, log, backend=0) / backward(y, dy, dim, log, backend=0) -> a fresh output, launched; or None
//   remove(key, owner)  the entry, if owner put it;  clear();  size()
//   bind(ctx_fn, error)  libcuda's cuCtxGetCurrent and the exception type of a failed launch (once, at load)
//   test_stream(s)       (tests only) the stream for tensors that are not CUDA tensors: the CPU tests' fake driver
#include <torch/extension.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include <cstring>
#include <stdexcept>
#include <string>
#include <unordered_map>

namespace py = pybind11;

typedef int (*launch_t)(void*, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, void*, void**,
                        void**);
typedef int (*ctx_t)(void**);

namespace {

constexpr int MAX_SCALARS = 12;  // after the pointers
constexpr int64_t MAX_DIMS = 8;

struct Entry {
  launch_t fn;
  void* ctx;
  void* handle;
  unsigned grid, bx, by, smem;
  bool b_param;  // b's pointer is the second parameter (null forward)
  int nscalars;
  uint64_t scalars[MAX_SCALARS];
  py::object owner;
};

// Never destroyed: the entries hold Python objects, which must not be released after the interpreter has gone.
auto& table = *new std::unordered_map<std::string, Entry>();
ctx_t ctx_get = nullptr;
PyObject* error_type = nullptr;  // a new reference, kept
void* stream_for_tests = nullptr;

// The table's key of a call, or false where the table does not take it: contiguous strided rows over the last dim
// (dim in range), no element missing, b (backward's dy) alike in sizes, dtype, device and layout.
bool key_of(int op, int backend, const at::Tensor& a, const at::Tensor* b, int64_t dim, std::string& key) {
  const int64_t n = a.dim();
  if (n == 0 || n > MAX_DIMS || dim < -n || dim >= n || (dim < 0 ? dim + n : dim) != n - 1) return false;
  if (a.layout() != at::kStrided || !a.is_contiguous() || a.numel() == 0) return false;
  if (b && (b->layout() != at::kStrided || !b->is_contiguous() || b->scalar_type() != a.scalar_type() ||
            b->device() != a.device() || !b->sizes().equals(a.sizes())))
    return false;
  int64_t k[3 + MAX_DIMS];
  k[0] = op | backend << 2 | static_cast<int64_t>(a.scalar_type()) << 8 |
         static_cast<int64_t>(a.get_device() + 1) << 16 |
         static_cast<int64_t>(a.device().type()) << 32;
  k[1] = (reinterpret_cast<uintptr_t>(a.data_ptr()) & 15) | (b ? reinterpret_cast<uintptr_t>(b->data_ptr()) & 15 : 0)
                                                                << 4;
  k[2] = n;
  for (int64_t i = 0; i < n; i++) k[3 + i] = a.size(i);
  key.assign(reinterpret_cast<const char*>(k), sizeof(int64_t) * (3 + n));
  return true;
}

py::object launch(int op, int backend, const at::Tensor& a, const at::Tensor* b, py::handle dim_arg) {
  if (op < 2 && a.requires_grad() && at::GradMode::is_enabled()) return py::none();  // autograd's path
  int overflow = 0;
  const long long dim = PyLong_AsLongLongAndOverflow(dim_arg.ptr(), &overflow);
  if (overflow || (dim == -1 && PyErr_Occurred())) {  // not an int, or beyond 64 bits: Python says what is wrong
    PyErr_Clear();
    return py::none();
  }
  std::string key;
  if ((backend != 0 && backend != 1) || !key_of(op, backend, a, b, dim, key)) return py::none();
  const auto it = table.find(key);
  if (it == table.end()) return py::none();
  // A copy (the owner's reference with it): empty_like below may run Python (a dispatch mode, another thread),
  // which may remove or replace this entry.
  Entry e = it->second;
  void* current = nullptr;
  if (ctx_get == nullptr || ctx_get(&current) != 0 || current != e.ctx) return py::none();  // Python binds it
  void* stream = stream_for_tests;
  if (a.is_cuda()) {
    const auto* impl = c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA);
    stream = impl->getStreamNativeHandle(impl->getStream(a.device()));
  } else if (stream == nullptr) {
    return py::none();
  }
  at::Tensor out = at::empty_like(a, at::MemoryFormat::Contiguous);
  if (reinterpret_cast<uintptr_t>(out.data_ptr()) & 15) return py::none();  // planned for an aligned output
  void* pa = a.data_ptr();
  void* pb = b ? b->data_ptr() : nullptr;
  void* po = out.data_ptr();
  void* params[3 + MAX_SCALARS] = {&pa, &pb, &po};
  int np = 3;
  if (!e.b_param) {  // (a, out, scalars...)
    params[1] = &po;
    np = 2;
  }
  for (int i = 0; i < e.nscalars; i++) params[np + i] = &e.scalars[i];
  int err;
  {
    py::gil_scoped_release no_gil;  // the driver's call takes microseconds: other Python threads run
    err = e.fn(e.handle, e.grid, 1, 1, e.bx, e.by, 1, e.smem, stream, params, nullptr);
  }
  if (err != 0) {
    const std::string name = py::str(e.owner.attr("name"));
    PyErr_SetString(error_type ? error_type : PyExc_RuntimeError,
                    ("launch of " + name + " (native) failed: CUresult " + std::to_string(err)).c_str());
    throw py::error_already_set();
  }
  return py::cast(std::move(out));
}

py::object put(int64_t op, int64_t backend, const at::Tensor& a, const c10::optional<at::Tensor>& b, bool b_param,
               int64_t fn, int64_t ctx, int64_t handle, int64_t grid, int64_t bx, int64_t by, int64_t smem,
               const std::vector<std::string>& scalars, py::object owner) {
  if (op < 0 || op > 3 || backend < 0 || backend > 1 || static_cast<int>(scalars.size()) > MAX_SCALARS ||
      (!b_param && b))
    return py::none();
  std::string key;
  if (!key_of(static_cast<int>(op), static_cast<int>(backend), a, b ? &*b : nullptr, -1, key)) return py::none();
  Entry e{reinterpret_cast<launch_t>(fn), reinterpret_cast<void*>(ctx), reinterpret_cast<void*>(handle),
          static_cast<unsigned>(grid), static_cast<unsigned>(bx), static_cast<unsigned>(by),
          static_cast<unsigned>(smem), b_param, static_cast<int>(scalars.size()), {}, std::move(owner)};
  for (size_t i = 0; i < scalars.size(); i++) {
    if (scalars[i].size() != 4 && scalars[i].size() != 8) return py::none();
    std::memcpy(&e.scalars[i], scalars[i].data(), scalars[i].size());  // 4 or 8 bytes, the rest 0
  }
  py::bytes out(key);
  py::object old;  // released after the map's operation (its release may run Python)
  const auto it = table.find(key);
  if (it != table.end()) {
    old = std::move(it->second.owner);
    it->second = std::move(e);
  } else {
    table.emplace(std::move(key), std::move(e));
  }
  return out;
}

void drop(const std::string& key, const py::object& owner) {
  const auto it = table.find(key);
  if (it != table.end() && it->second.owner.is(owner)) {
    py::object old = std::move(it->second.owner);
    table.erase(it);
  }
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("forward", [](const at::Tensor& x, py::handle dim, bool log, int backend) {
    return launch(log ? 1 : 0, backend, x, nullptr, dim);
  }, py::arg("x"), py::arg("dim"), py::arg("log"), py::arg("backend") = 0);
  m.def("backward", [](const at::Tensor& y, const at::Tensor& dy, py::handle dim, bool log, int backend) {
    return launch(log ? 3 : 2, backend, y, &dy, dim);
  }, py::arg("y"), py::arg("dy"), py::arg("dim"), py::arg("log"), py::arg("backend") = 0);
  m.def("put", &put);
  m.def("remove", &drop);
  m.def("clear", [] {
    std::unordered_map<std::string, Entry> old;  // emptied first, the owners released after
    old.swap(table);
  });
  m.def("size", [] { return table.size(); });
  m.def("bind", [](int64_t ctx_fn, py::object error) {
    ctx_get = reinterpret_cast<ctx_t>(ctx_fn);
    Py_XDECREF(error_type);
    error_type = error.release().ptr();
  });
  m.def("test_stream", [](int64_t s) { stream_for_tests = reinterpret_cast<void*>(s); });
}

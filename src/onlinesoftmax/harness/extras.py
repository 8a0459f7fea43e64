"""What the sweep's rows of N do not cover, on the GPU:

- layouts (issue 12): softmax, log_softmax and their backward over a non-last dim (the columns and strided
  kernels) and on sliced views of the last dim (x[:, 1:], rows at every offset from a 16-byte boundary; a padded
  vocabulary's x[:, :V]: aligned rows of odd length; both into fresh outputs whose rows start elsewhere: the
  window path's realigned stores), in fp32, bf16 and fp16, ours (CUDA), the Triton backend (which moves the dim
  last with a copy each way) and torch; % of copy bandwidth on the ideal bytes (one read + one write forward, two
  reads + one write backward); each output checked against float64 on a sample of its rows along the dim;
- host overhead per eager call on a 1 x 1024 input: mean wall time per call (many calls back to back, one
  synchronize at the end; median of 5 runs) minus the kernel time. The kernel time is the GPU time of the same
  calls queued behind a sleeping kernel (bench.queued_ms: the GPU runs them back to back whatever the host does).
  Ours eager, ours through the custom-op dispatcher (what torch.compile sees; shown to explain why eager calls
  bypass it), the Triton backend, torch.softmax.
"""

from __future__ import annotations

import statistics
import time

import torch

from ..ops import softmax as ops
from ..reference import reference
from .bench import gbps, median_ms, queued_ms
from .check import compare_to_reference

# (label, shape, dim, view): the tensor is randn(shape), or with view = (width, first) the columns
# [first, first + shape[1]) of a randn(shape[0], width)
LAYOUTS = (
    ("dim 0 of 8192 x 8192", (8192, 8192), 0, None),
    ("dim 0 of an odd-width matrix", (4097, 1001), 0, None),
    ("channels, C = 19", (16, 19, 512, 1024), 1, None),  # a segmentation map's classes
    ("channels, C = 21", (16, 21, 256, 512), 1, None),
    ("channels, C = 150", (8, 150, 256, 256), 1, None),
    ("channels, C = 1000", (8, 1000, 64, 64), 1, None),
    ("sliced x[:, 1:] of 32768 x 4097", (32768, 4096), 1, (4097, 1)),
    ("sliced x[:, 1:] of 131072 x 1001", (131072, 1000), 1, (1001, 1)),
    ("padded vocabulary x[:, :50257] of 2560 x 50304", (2560, 50257), 1, (50304, 0)),
)
LAYOUT_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
LAYOUT_OPS = ("softmax", "log_softmax", "softmax_backward", "log_softmax_backward")
CHECK_ROWS = 64  # rows along the dim checked against float64
HOST_SHAPE = (1, 1024)
HOST_CALLS = 2000
HOST_TRIALS = 5


def _layout_impls(op: str, dim: int) -> dict:
    """variant -> (backend, fn(*inputs)); inputs are (x,) forward and (y, dy) backward."""
    log = op.startswith("log")
    if op in ("softmax", "log_softmax"):
        fn = torch.log_softmax if log else torch.softmax
        return {f"api.{b}.{op}": (b, lambda x, b=b: ops.forward(x, dim, log, b)) for b in ("cuda", "triton")} | {
            f"torch.{op}": ("baseline", lambda x: fn(x, dim))}
    data = torch._log_softmax_backward_data if log else torch._softmax_backward_data
    return {f"api.{b}.{op}": (b, lambda y, dy, b=b: ops.backward(y, dy, dim, log, b)) for b in ("cuda", "triton")} | {
        f"torch.{op}": ("baseline", lambda y, dy: data(dy, y, dim, y.dtype))}


def _rows_along(t: torch.Tensor, dim: int) -> torch.Tensor:
    """The first CHECK_ROWS rows along dim, as a (rows, N) CPU tensor."""
    return t.movedim(dim, -1).reshape(-1, t.shape[dim])[:CHECK_ROWS].cpu()


def layout_tensor(shape, view, make) -> torch.Tensor:
    """One of a layout's tensors: make(shape), or for a view (width, first) the columns first .. first + N of a
    make((M, width)) (a sliced row every `width` elements). make: a size -> a tensor (random data on the GPU here;
    benchmarks/precompile.py's meta stand-ins)."""
    if not view:
        return make(shape)
    width, first = view
    return make((shape[0], width))[:, first:first + shape[1]]


def _layout_inputs(op: str, shape, dim: int, view, dtype, gen) -> tuple:
    def randn():
        return layout_tensor(shape, view, lambda size: torch.randn(size, generator=gen, device=gen.device).to(dtype))

    x = randn()
    if op in ("softmax", "log_softmax"):
        return (x,)
    y = (torch.log_softmax if op.startswith("log") else torch.softmax)(x.float(), dim).to(dtype)
    return y, randn()


def layout_rows(copy: float, seed: int = 0, layouts=LAYOUTS, dtypes=LAYOUT_DTYPES, op_names=LAYOUT_OPS,
                step=None, device: str = "cuda") -> list[dict]:
    """One row per (layout, dtype, op, implementation) (results.FIELDS keys); step(label, done, total) reports
    progress. (device="cpu" runs the same loop on small layouts in the tests: torch's rows, ours refused.)"""
    rows = []
    todo = [(lay, d, o) for lay in layouts for d in dtypes for o in op_names]
    for n, ((label, shape, dim, view), dtype, op) in enumerate(todo):
        if step:
            step(f"{op} {label} {dtype}", n, len(todo))
        gen = torch.Generator(device=device).manual_seed(seed)
        ins = _layout_inputs(op, shape, dim, view, dtype, gen)
        strips = tuple(_rows_along(t, dim) for t in ins)
        ref = reference(op, strips)
        numel = ins[0].numel()
        nbytes = (1 + len(ins)) * numel * ins[0].element_size()
        name = str(dtype).replace("torch.", "")
        for variant, (backend, fn) in _layout_impls(op, dim).items():
            row = dict(op=f"{op}_layout", variant=variant, backend=backend, rung=f"{op}, {label}",
                       M=numel // shape[dim], N=shape[dim], dtype=name, copy_gbps=copy,
                       group=f"{op} {label} {'x'.join(map(str, shape))} dim {dim} {name}",
                       ideal_bytes=nbytes, algo_bytes=nbytes)
            try:
                out = fn(*ins)
                rep = compare_to_reference(op, strips, _rows_along(out, dim), dtype, ref=ref)
                ms = median_ms(lambda: fn(*ins), device)
            except Exception as exc:  # a backend missing here is a row with a note, not a crash
                row.update(note=f"error: {type(exc).__name__}: {exc}", ok=False)
                rows.append(row)
                continue
            row.update(time_ms=ms, gbps_ideal=gbps(nbytes, ms), gbps_algo=gbps(nbytes, ms),
                       pct_copy=100 * gbps(nbytes, ms) / copy, rel_err=rep.rel_err, max_abs_err=rep.max_abs_err,
                       ok=rep.ok)
            rows.append(row)
        if device == "cuda":
            torch.cuda.empty_cache()
    return rows


def _host_impls() -> dict:
    fwd = torch.ops.onlinesoftmax.softmax_forward
    return {
        "api.softmax": ("cuda", "eager, the default backend (auto)", lambda x: ops.softmax(x)),
        "api.cuda.softmax": ("cuda", "eager", lambda x: ops.softmax(x, backend="cuda")),
        "op.cuda.softmax_forward": ("cuda", "through torch.ops (custom-op dispatch)",
                                    lambda x: fwd(x, 1, False, "cuda")),
        "api.triton.softmax": ("triton", "eager", lambda x: ops.softmax(x, backend="triton")),
        "torch.softmax": ("baseline", "eager", lambda x: torch.softmax(x, -1)),
    }


def wall_us(fn, x, calls: int = HOST_CALLS, trials: int = HOST_TRIALS) -> float:
    """Mean wall time per call, calls back to back, one synchronize at the end (after a warm-up; none for a CPU x);
    the median of `trials` such runs (the host is shared: one run can catch a hiccup)."""
    sync = torch.cuda.synchronize if x.is_cuda else (lambda: None)
    for _ in range(50):
        fn(x)
    runs = []
    for _ in range(trials):
        sync()
        t0 = time.perf_counter()
        for _ in range(calls):
            fn(x)
        sync()
        runs.append((time.perf_counter() - t0) / calls * 1e6)
    return statistics.median(runs)


def host_rows(seed: int = 0) -> list[dict]:
    """Host overhead per call on HOST_SHAPE fp32, one row per way in (results.FIELDS keys; times in µs)."""
    gen = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(HOST_SHAPE, generator=gen, device="cuda")
    ref = reference("softmax", (x.cpu(),))
    rows = []
    for name, (backend, how, fn) in _host_impls().items():
        row = dict(op="softmax_host", variant=name, backend=backend, rung=f"host overhead, {how}",
                   M=HOST_SHAPE[0], N=HOST_SHAPE[1], dtype="float32",
                   group=f"host overhead per call, {HOST_SHAPE[0]} x {HOST_SHAPE[1]} float32")
        try:
            rep = compare_to_reference("softmax", (x.cpu(),), fn(x).cpu(), torch.float32, ref=ref)
            wall, kern = wall_us(fn, x), 1e3 * queued_ms([lambda: fn(x)])
        except Exception as exc:
            row.update(note=f"error: {type(exc).__name__}: {exc}", ok=False)
            rows.append(row)
            continue
        row.update(time_ms=kern * 1e-3, wall_us=wall, kernel_us=kern, host_us=wall - kern, ok=rep.ok,
                   rel_err=rep.rel_err, max_abs_err=rep.max_abs_err)
        rows.append(row)
    return rows

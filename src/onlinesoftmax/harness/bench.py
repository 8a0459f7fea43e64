"""Timing: medians after warm-up, the copy ceiling of the same device in the same run, GB/s.

GPU: `triton.testing.do_bench` (CUDA events, L2 flushed before every call, median), or CUDA
events with a 256 MB L2 flush before every call when Triton is missing. CPU: `time.perf_counter`
medians.

Effective bandwidth = bytes / time. Two byte counts per measurement:
- ideal: what any softmax must move (one read + one write forward, two reads + one write
  backward); GB/s on this count is comparable across variants;
- algorithmic: what the variant's algorithm really moves (3-pass: 3 reads + 1 write).
The copy ceiling is a large device-to-device copy, bytes read + bytes written.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import Optional

import numpy as np
import torch

from ..opdefs import OPS
from ..registry import Variant
from .check import compare_to_reference, variant_rtol
from .inputs import out_shape

CPU_COPY_BYTES = 1 << 27  # 128 MiB per array on the CPU
GPU_COPY_BYTES = 1 << 30  # 1 GiB per array on the GPU: many times the H200's 60 MB L2
CHECK_ELEMENTS = 1 << 22  # rows compared with float64 in a timed run (all rows up to 4M elements)
L2_FLUSH_BYTES = 256 << 20  # written before a timed call (the fallback timer, profile_once --timeline)


def gbps(nbytes: float, ms: float) -> float:
    return nbytes / (ms * 1e-3) / 1e9


def median_ms(fn, device: str, warmup: int = 1, reps: int = 5, budget_s: float = 3.0) -> float:
    """Median wall time of fn() in milliseconds, after warm-up (CPU: up to `reps` runs within
    `budget_s`, at least one)."""
    if device == "cuda":
        return _cuda_median_ms(fn)
    for _ in range(warmup):
        fn()
    times = []
    deadline = time.perf_counter() + budget_s
    while len(times) < reps and (not times or time.perf_counter() < deadline):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def _cuda_median_ms(fn) -> float:
    try:
        from triton.testing import do_bench
    except ImportError:
        do_bench = None
    if do_bench is not None:
        return float(do_bench(fn, warmup=25, rep=100, return_mode="median"))
    flush = torch.empty(L2_FLUSH_BYTES, dtype=torch.int8, device="cuda")  # evict L2 between calls
    for _ in range(3):
        fn()
    times = []
    for _ in range(20):
        flush.zero_()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


SLEEP_CYCLES = 200_000_000  # ~0.1 s at the H200's clock: longer than queuing QUEUED_CALLS launches from Python
QUEUED_CALLS = 400
ROTATE_BYTES = 256 << 20  # queued timing: input copies together this large (several times the 60 MB L2)


def queued_ms(calls) -> float:
    """GPU time per call, with the calls queued back to back behind a sleeping kernel: the GPU runs them with no
    host gaps, and no L2 flush between them (do_bench's flush leaves the L2 full of dirty lines, which a kernel of
    a few microseconds pays to write back). `calls`: callables run in turn (e.g. one per input copy)."""
    calls = list(calls)
    for c in calls[:2]:
        c()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    torch.cuda._sleep(SLEEP_CYCLES)
    start.record()
    for i in range(QUEUED_CALLS):
        calls[i % len(calls)]()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / QUEUED_CALLS


def gpu_activities(prof) -> list[tuple[float, float, str]]:
    """The GPU's kernels, copies and memsets in a finished torch.profiler profile, as (start us, end us, name) in
    start order: the events of its Chrome trace in those categories."""
    import json
    import tempfile

    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        prof.export_chrome_trace(f.name)
        with open(f.name) as trace:
            events = json.load(trace)["traceEvents"]
    return sorted((e["ts"], e["ts"] + e["dur"], e["name"]) for e in events
                  if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset") and "dur" in e)


def copy_gbps(device: str) -> float:
    """Bandwidth of a large copy on `device`, counting bytes read + bytes written."""
    return copy_samples(device, 1)[0]


def copy_samples(device: str, rounds: int) -> list[float]:
    """`rounds` independent measurements of `copy_gbps` (each a median itself), on one pair of buffers."""
    if device == "cuda":
        src = torch.empty(GPU_COPY_BYTES // 4, dtype=torch.float32, device="cuda").uniform_()
        dst = torch.empty_like(src)
        out = [gbps(2 * GPU_COPY_BYTES, median_ms(lambda: dst.copy_(src), "cuda")) for _ in range(rounds)]
        del src, dst
        return out
    src = np.random.default_rng(0).random(CPU_COPY_BYTES // 8)
    dst = np.empty_like(src)
    return [gbps(2 * CPU_COPY_BYTES, median_ms(lambda: np.copyto(dst, src), "cpu", reps=7)) for _ in range(rounds)]


@dataclass
class Measurement:
    time_ms: float
    ideal_bytes: int
    algo_bytes: int
    rel_err: float
    max_abs_err: float
    ok: bool
    queued_ms: Optional[float] = None  # small problems: back-to-back on rotated input copies (queued_ms)

    def gbps_ideal(self) -> float:
        return gbps(self.ideal_bytes, self.time_ms)

    def gbps_algo(self) -> float:
        return gbps(self.algo_bytes, self.time_ms)


def timing_inputs(op: str, M: int, N: int, dtype: torch.dtype, device: str, seed: int) -> tuple:
    """Random N(0, 1) inputs made directly on the device (fast at any size)."""
    gen = torch.Generator(device=device).manual_seed(seed)
    shape = (1, N) if op == "sum" else (M, N)

    def randn():
        return torch.randn(shape, generator=gen, device=device, dtype=torch.float32).to(dtype)

    if op in ("softmax", "log_softmax", "sum"):
        return (randn(),)
    x = randn()
    y = torch.log_softmax(x.float(), -1) if op == "log_softmax_backward" else torch.softmax(x.float(), -1)
    return (y.to(dtype), randn())


def measure(variant: Variant, M: int, N: int, dtype: torch.dtype, seed: int = 0) -> Measurement:
    """Time `variant` at (M, N) and check that same output against float64 (first rows)."""
    inputs = timing_inputs(variant.op, M, N, dtype, variant.device, seed)
    out = torch.empty(out_shape(variant.op, M, N), dtype=dtype, device=variant.device)
    out.fill_(float("nan"))
    variant.run(inputs, out)
    if variant.device == "cuda":
        torch.cuda.synchronize()
    rows = M if variant.op == "sum" else max(1, min(M, CHECK_ELEMENTS // N))
    host = tuple(t[:rows].cpu() for t in inputs)
    report = compare_to_reference(variant.op, host, out[:rows].cpu() if variant.op != "sum" else out.cpu(), dtype,
                                  rtol=variant_rtol(variant, N, dtype))
    def call(ins):
        if variant.call is not None:  # the user-facing call, allocation included, as users see it
            return lambda: variant.call(ins)
        return lambda: variant.run(ins, out)

    ms = median_ms(call(inputs), variant.device)
    itemsize = torch.empty((), dtype=dtype).element_size()
    footprint = sum(t.numel() * t.element_size() for t in inputs)
    queued = None
    if variant.device == "cuda" and footprint < ROTATE_BYTES // 4:  # few-row shapes: also back to back
        copies = [inputs] + [tuple(t.clone() for t in inputs) for _ in range(ROTATE_BYTES // footprint)]
        queued = queued_ms(call(c) for c in copies)
        del copies
    return Measurement(
        time_ms=ms,
        ideal_bytes=OPS[variant.op].ideal_bytes(M, N, itemsize),
        algo_bytes=variant.algo_bytes(M, N, itemsize),
        rel_err=report.rel_err,
        max_abs_err=report.max_abs_err,
        ok=report.ok,
        queued_ms=queued,
    )

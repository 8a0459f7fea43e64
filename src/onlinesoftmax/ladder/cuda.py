"""The seeds' CUDA ladder: CUDA C++ kernels compiled at run time with NVRTC (runtime/), one
registry Variant per rung, in ladder order. Teaching code: each rung is its own kernel on purpose
(the differences are the lesson); the production engine is engines/cuda/.

    sum        cuda.reduce_k0 .. cuda.reduce_k6          Harris' seven (seed 001 §1.2, experiment 1)
    softmax    cuda.safe_k1 .. cuda.safe_k4              seed 003 kernel1..4
               cuda.safe_3pass                           seed 001 experiment 2: three kernels
               cuda.online_v0 .. v2, v3, v3_rtidx, v4    seeds 000 / 002, seed 001 experiment 3
    attention  cuda.attn_a0 .. cuda.attn_a2              seed 001 §5 (Stage 7): not registry variants (the
                                                         registry's ops are row ops); attention.py runs them

Design choices (the kernel files' headers say the same):
- Reductions write one partial per block; the host re-launches the same kernel on the partials
  until one value is left, written straight into `out` (no atomics: deterministic). The partials'
  reads and writes are counted in `algo_bytes`. Block 256 everywhere; K3..K5 cover 512 elements
  per block; K6 runs a grid-stride loop on min(ceil(n / 1024), 8 x SMs) blocks.
- Safe softmax kernel2/kernel4 use 512 threads (seed 003's benchmark), kernel1 256 threads per
  block (one row per thread), kernel3 32; the 3-pass kernels 256 (seed 001), with two
  M-length fp32 buffers for the row max and row sum, allocated per call.
- Online V0..V4 use 256 threads. V2 and V3 need N % 4 == 0 (float4 rows must start 16-byte
  aligned) and refuse other N; V4 takes a float4 path for N % 4 == 0 and a scalar path otherwise.
- V3 caches the row in registers: SLOTS float4 per thread, SLOTS the smallest of {1, 2, 4, 8, 16}
  with 1024 * SLOTS >= N, so N <= 16384; larger N is refused. The rtidx twin uses {2, 4, 8, 16}.

Nothing here needs a GPU to import, list, compile or inspect (`inspect_rows`); `run` needs one.
"""

from __future__ import annotations

from typing import Callable, Optional

import numpy as np
import torch

from ..errors import OnlineSoftmaxError, Unavailable
from ..intmath import cdiv
from ..registry import Variant, register
from ..runtime import DEFAULT_ARCH, DEFAULT_SMS, available
from ..runtime import launch as rt_launch
from ..runtime import nvrtc

REDUCE_BLOCK = 256
REDUCE_K6_ELEMS = 4  # elements per thread per grid-stride step (K6 loads 4 in flight)
REDUCE_K6_BLOCKS_PER_SM = 8
SAFE_BLOCK = 512  # seed 003's benchmark block size (kernel2, kernel4)
ROW_BLOCK = 256  # thread-per-row kernels (safe kernel1, V0): rows per block
PASS3_BLOCK = 256  # seed 001 experiment 2
ONLINE_BLOCK = 256  # must match OS_BLOCK in online_softmax.cu
V3_SLOTS = (1, 2, 4, 8, 16)
V3_RTIDX_SLOTS = (2, 4, 8, 16)
V3_MAX_N = 4 * ONLINE_BLOCK * V3_SLOTS[-1]  # 16384
V4_BLOCKS_PER_SM = 4
INT_MAX = 2**31 - 1

REDUCE_KERNELS = ("reduce_k0", "reduce_k1", "reduce_k2", "reduce_k3", "reduce_k4",
                  f"reduce_k5<{REDUCE_BLOCK}>", "reduce_k6")
SAFE_KERNELS = ("safe_k1", "safe_k2", "safe_k3", "safe_k4", "pass1_row_max", "pass2_row_sum",
                "pass3_normalize")
ONLINE_KERNELS = (("online_v0", "online_v1", "online_v2")
                  + tuple(f"online_v3<{s}>" for s in V3_SLOTS)
                  + tuple(f"online_v3_rtidx<{s}>" for s in V3_RTIDX_SLOTS)
                  + ("online_v4<true>", "online_v4<false>"))
# attention.cu (the seeds' Stage 7, driven by attention.py): bf16 ("true") and fp16 ("false"), D in ATTN_D
ATTN_D = (64, 128)
_ATTN_TYPES = ("true", "false")
ATTENTION_KERNELS = (tuple(f"attn_a0_scores<{b}>" for b in _ATTN_TYPES)
                     + tuple(f"attn_a0_pv<{b}>" for b in _ATTN_TYPES)
                     + tuple(f"attn_a1<{d}, {b}>" for d in ATTN_D for b in _ATTN_TYPES)
                     + tuple(f"attn_a2<{d}, {b}, {c}>" for d in ATTN_D for b in _ATTN_TYPES
                             for c in ("false", "true")))
SOURCES = "onlinesoftmax/ladder/kernels"  # the rungs' .cu files (one per seed, attention.cu) and common.cuh
FILES = {
    "reduction.cu": REDUCE_KERNELS,
    "safe_softmax.cu": SAFE_KERNELS,
    "online_softmax.cu": ONLINE_KERNELS,
    "attention.cu": ATTENTION_KERNELS,
}


# ---- availability, modules, launches -------------------------------------------------------------

_archs: dict = {}
_modules: dict = {}
_kernels: dict = {}


def _arch_for(device: Optional[int]) -> str:
    a = _archs.get(device)
    if a is None:
        a = _archs[device] = nvrtc.current_arch(device)
    return a


def module(filename: str, arch: Optional[str] = None) -> nvrtc.CompiledModule:
    """The compiled module of one of FILES for `arch` (default: the present GPU, else DEFAULT_ARCH)."""
    if arch is None:
        arch = _arch_for(torch.cuda.current_device()) if torch.cuda.is_available() else DEFAULT_ARCH
    key = (filename, arch)
    mod = _modules.get(key)
    if mod is None:
        mod = _modules[key] = nvrtc.compile_source(filename, FILES[filename], arch=arch, package=SOURCES)
    return mod


def launch_kernel(filename: str, name: str, device: int, grid, block, args, smem: int = 0) -> None:
    k = _kernels.get((filename, name, device))
    if k is None:
        reason = available()
        if reason:
            raise Unavailable(f"cuda variants cannot run here: {reason}")
        k = rt_launch.kernel(module(filename, _arch_for(device)), name, device)
        _kernels[(filename, name, device)] = k
    k.launch(grid, block, args, smem)


def _sms(device: Optional[int] = None) -> int:
    if torch.cuda.is_available():
        return rt_launch.sm_count(device)
    return DEFAULT_SMS


def _scratch(n: int, device: torch.device) -> torch.Tensor:
    """An fp32 scratch buffer of this call, from torch's caching allocator on the current stream (never shared
    with another call, so the rungs are safe from several threads too)."""
    return torch.empty(n, dtype=torch.float32, device=device)


def _check(x: torch.Tensor, out: torch.Tensor, name: str, vec: bool = False) -> int:
    reason = available()  # cached after the first call
    if reason:
        raise Unavailable(f"{name} cannot run here: {reason}")
    if not (x.is_cuda and out.is_cuda):
        raise OnlineSoftmaxError(f"{name}: tensors must be on a CUDA device (got {x.device}, {out.device})")
    if x.dtype != torch.float32 or out.dtype != torch.float32:
        raise OnlineSoftmaxError(f"{name}: float32 only (got {x.dtype}, {out.dtype})")
    if not (x.is_contiguous() and out.is_contiguous()):
        raise OnlineSoftmaxError(f"{name}: tensors must be contiguous")
    if vec and (x.data_ptr() % 16 or out.data_ptr() % 16):
        raise OnlineSoftmaxError(f"{name}: float4 kernel needs 16-byte aligned input and output")
    return x.device.index


# ---- supports ------------------------------------------------------------------------------------


def _shape_ok(M: int, N: int, dtype=None) -> Optional[str]:
    if M < 1 or N < 1:
        return f"empty shape ({M}, {N})"
    if M > INT_MAX or N > INT_MAX:
        return f"M and N must be below 2^31 (kernels take int32 M, N), got ({M}, {N})"
    return None


def _needs_vec4(M: int, N: int, dtype=None) -> Optional[str]:
    return _shape_ok(M, N) or (
        None if N % 4 == 0 else f"N = {N} is not a multiple of 4: float4 rows need N % 4 == 0 (16-byte aligned rows)"
    )


def _pick_slots(N: int, choices) -> Optional[int]:
    for s in choices:
        if 4 * ONLINE_BLOCK * s >= N:
            return s
    return None


def _v3_supports(M: int, N: int, dtype=None) -> Optional[str]:
    r = _needs_vec4(M, N)
    if r:
        return r
    if N > V3_MAX_N:
        return (f"N = {N} > {V3_MAX_N}: the 1-pass register cache holds at most {V3_SLOTS[-1]} float4 "
                f"per thread x {ONLINE_BLOCK} threads; use online_v2 / online_v4")
    return None


def _reduce_supports(M: int, N: int, dtype=None) -> Optional[str]:
    n = M * N
    if n < 1:
        return f"empty input ({M}, {N})"
    if n >= 2**62:
        return f"{n} elements is too many"
    return None


# ---- reductions ----------------------------------------------------------------------------------


def _reduce_levels(kind: int, n: int, sms: int) -> list[tuple[int, int]]:
    """[(n_in, grid), ...] for kernel K<kind> until one value remains."""
    levels = []
    while True:
        if kind <= 2:
            grid = cdiv(n, REDUCE_BLOCK)
        elif kind <= 5:
            grid = cdiv(n, 2 * REDUCE_BLOCK)
        else:
            grid = min(cdiv(n, REDUCE_BLOCK * REDUCE_K6_ELEMS), REDUCE_K6_BLOCKS_PER_SM * sms)
        levels.append((n, grid))
        if grid == 1:
            return levels
        n = grid


def _reduce_bytes(kind: int) -> Callable[[int, int, int], int]:
    def algo_bytes(M: int, N: int, s: int) -> int:
        # level 0 reads x (itemsize s); each level writes `grid` fp32 partials, read by the next level
        levels = _reduce_levels(kind, M * N, _sms())
        total = M * N * s
        for i, (n_in, grid) in enumerate(levels):
            if i > 0:
                total += n_in * 4
            total += grid * 4
        return total

    return algo_bytes


def _reduce_run(kind: int) -> Callable:
    name = REDUCE_KERNELS[kind]
    dyn = kind <= 4  # K0..K4: blockDim floats of dynamic shared memory

    def run(inputs, out):
        x = inputs[0]
        dev = _check(x, out, f"cuda.reduce_k{kind}")
        n = x.numel()
        levels = _reduce_levels(kind, n, rt_launch.sm_count(dev))
        need = levels[0][1]
        scratch = _scratch(2 * need, x.device) if len(levels) > 1 else None
        src = x.data_ptr()
        for i, (n_in, grid) in enumerate(levels):
            if i == len(levels) - 1:
                dst = out.data_ptr()
            else:
                dst = scratch.data_ptr() + 4 * need * (i % 2)  # ping-pong halves
            launch_kernel("reduction.cu", name, dev, grid, REDUCE_BLOCK, (src, dst, np.int64(n_in)),
                    4 * REDUCE_BLOCK if dyn else 0)
            src = dst

    return run


# ---- launch plans for softmax --------------------------------------------------------------------
# Each plan: (M, N, device) -> [(file, kernel name expression, grid, block, dynamic smem)]


def _plan_safe(name: str, block: int, per_row: bool, smem_per_thread: int = 0):
    def plan(M, N, dev=None):
        grid = cdiv(M, block) if per_row else M
        return [("safe_softmax.cu", name, grid, block, smem_per_thread * block)]

    return plan


def _plan_3pass(M, N, dev=None):
    return [("safe_softmax.cu", k, M, PASS3_BLOCK, 0)
            for k in ("pass1_row_max", "pass2_row_sum", "pass3_normalize")]


def _plan_online(name: str, per_row: bool = False):
    def plan(M, N, dev=None):
        grid = cdiv(M, ONLINE_BLOCK) if per_row else M
        return [("online_softmax.cu", name, grid, ONLINE_BLOCK, 0)]

    return plan


def _plan_v3(M, N, dev=None):
    return [("online_softmax.cu", f"online_v3<{_pick_slots(N, V3_SLOTS)}>", M, ONLINE_BLOCK, 0)]


def _plan_v3_rtidx(M, N, dev=None):
    return [("online_softmax.cu", f"online_v3_rtidx<{_pick_slots(N, V3_RTIDX_SLOTS)}>", M, ONLINE_BLOCK, 0)]


def _plan_v4(M, N, dev=None):
    grid = min(M, V4_BLOCKS_PER_SM * _sms(dev))
    name = "online_v4<true>" if N % 4 == 0 else "online_v4<false>"
    return [("online_softmax.cu", name, grid, ONLINE_BLOCK, 0)]


def _softmax_run(vname: str, plan, vec: bool = False):
    def run(inputs, out):
        x = inputs[0]
        dev = _check(x, out, vname, vec)
        M, N = x.shape
        args = (x.data_ptr(), out.data_ptr(), np.int32(M), np.int32(N))
        for filename, kname, grid, block, smem in plan(M, N, dev):
            launch_kernel(filename, kname, dev, grid, block, args, smem)

    return run


def _run_3pass(inputs, out):
    x = inputs[0]
    dev = _check(x, out, "cuda.safe_3pass")
    M, N = x.shape
    stats = _scratch(2 * M, x.device)
    xp, yp, mp = x.data_ptr(), out.data_ptr(), stats.data_ptr()
    sp = mp + 4 * M
    m32, n32 = np.int32(M), np.int32(N)
    launch_kernel("safe_softmax.cu", "pass1_row_max", dev, M, PASS3_BLOCK, (xp, mp, m32, n32))
    launch_kernel("safe_softmax.cu", "pass2_row_sum", dev, M, PASS3_BLOCK, (xp, mp, sp, m32, n32))
    launch_kernel("safe_softmax.cu", "pass3_normalize", dev, M, PASS3_BLOCK, (xp, mp, sp, yp, m32, n32))


# ---- resources -----------------------------------------------------------------------------------


def combined_report(rows: list[dict], joiner: str = "+") -> dict:
    """The ptxas reports of several kernels launched together as one: the kernels' names joined, the largest
    registers, shared memory and stack, the spills summed."""
    return {
        "kernel": joiner.join(r["kernel"] for r in rows),
        "registers": max(r["registers"] for r in rows),
        "smem": max(r["smem"] for r in rows),
        "stack": max(r["stack"] for r in rows),
        "spill_stores": sum(r["spill_stores"] for r in rows),
        "spill_loads": sum(r["spill_loads"] for r in rows),
    }


def _resources_of(launches, arch: Optional[str] = None) -> dict:
    """ptxas report of the kernels a plan launches; several kernels: max registers/smem/stack,
    summed spills, and each kernel's own report under "per_kernel"."""
    rows = []
    for filename, kname, grid, block, smem in launches:
        r = module(filename, arch).resources(kname)
        r.update(kernel=kname, block=block, grid=grid, dynamic_smem=smem)
        rows.append(r)
    seen = {}
    for r in rows:  # a reduction relaunches one kernel per level: report it once (first level)
        seen.setdefault(r["kernel"], r)
    rows = list(seen.values())
    if len(rows) == 1:
        return rows[0]
    return {
        **combined_report(rows),
        "block": max(r["block"] for r in rows),
        "dynamic_smem": max(r["dynamic_smem"] for r in rows),
        "per_kernel": {r["kernel"]: r for r in rows},
    }


def _resources(supports, plan_of):
    def resources(M: int, N: int, dtype=torch.float32) -> dict:
        reason = supports(M, N, dtype)
        if reason:
            raise OnlineSoftmaxError(f"unsupported shape ({M}, {N}): {reason}")
        dev = torch.cuda.current_device() if torch.cuda.is_available() else None
        return _resources_of(plan_of(M, N, dev))

    return resources


def _reduce_plan(kind: int):
    def plan(M, N, dev=None):
        levels = _reduce_levels(kind, M * N, _sms(dev))
        return [("reduction.cu", REDUCE_KERNELS[kind], grid, REDUCE_BLOCK, 4 * REDUCE_BLOCK if kind <= 4 else 0)
                for _, grid in levels]

    return plan


# ---- registration --------------------------------------------------------------------------------

# kernel name expression -> variant names, for inspect_rows; the attention rungs (attention.py) by their prefix
_USES: dict[str, list[str]] = {k: [f"cuda.attn_{k[5:7]}"] for k in ATTENTION_KERNELS}


def _register(name, op, rung, seed_ref, summary, run, algo_bytes, supports, plan, kernels, serial_rows=False):
    for k in kernels:
        _USES.setdefault(k, []).append(name)
    register(Variant(
        name=name, op=op, backend="cuda", rung=rung, seed_ref=seed_ref, summary=summary, run=run,
        algo_bytes=algo_bytes, device="cuda", dtypes=(torch.float32,), supports=supports,
        available=available, resources=_resources(supports, plan), serial_rows=serial_rows,
    ))


_REDUCE_INFO = (
    ("K0 interleaved, modulo", "interleaved addressing, `tid % (2s)` selects active threads: divergent warps"),
    ("K1 interleaved, strided index", "index = 2*s*tid: no divergence, shared-memory bank conflicts"),
    ("K2 sequential addressing", "stride halves from blockDim/2: contiguous active threads, no conflicts"),
    ("K3 first add during load", "K2 with each thread adding two elements while loading (512 per block)"),
    ("K4 last warp unrolled", "K3 with the final warp unrolled on volatile shared memory"),
    ("K5 fully unrolled", "K4 fully unrolled, block size a template parameter (256)"),
    ("K6 warp shuffle", "grid-stride sums in registers, __shfl_down_sync within warps, capped grid"),
)
for _k, (_rung, _summary) in enumerate(_REDUCE_INFO):
    _register(f"cuda.reduce_k{_k}", "sum", _rung, "seed 001 §1.2" + (", exp 1" if _k in (0, 2, 6) else ""),
              _summary + "; partials re-reduced by the same kernel until one value",
              _reduce_run(_k), _reduce_bytes(_k), _reduce_supports, _reduce_plan(_k), (REDUCE_KERNELS[_k],))

_register("cuda.safe_k1", "softmax", "safe kernel1 (thread per row)", "seed 003 kernel1",
          "one thread per row: max, exp+sum into y, scale y (256 rows per block)",
          _softmax_run("cuda.safe_k1", _plan_safe("safe_k1", ROW_BLOCK, True)),
          lambda M, N, s: 5 * M * N * s,  # x read twice, y written twice, y read once
          _shape_ok, _plan_safe("safe_k1", ROW_BLOCK, True), ("safe_k1",), serial_rows=True)
_register("cuda.safe_k2", "softmax", "safe kernel2 (smem tree)", "seed 003 kernel2",
          "block of 512 per row, max and sum by shared-memory tree reductions",
          _softmax_run("cuda.safe_k2", _plan_safe("safe_k2", SAFE_BLOCK, False, 4)),
          lambda M, N, s: 6 * M * N * s,  # x read twice; y written, read, read, written
          _shape_ok, _plan_safe("safe_k2", SAFE_BLOCK, False, 4), ("safe_k2",))
_register("cuda.safe_k3", "softmax", "safe kernel3 (one warp per row)", "seed 003 kernel3",
          "32 threads per row, max and sum by warp shuffles",
          _softmax_run("cuda.safe_k3", _plan_safe("safe_k3", 32, False)),
          lambda M, N, s: 6 * M * N * s,
          _shape_ok, _plan_safe("safe_k3", 32, False), ("safe_k3",))
_register("cuda.safe_k4", "softmax", "safe kernel4 (shuffle + inter-warp)", "seed 003 kernel4",
          "block of 512 per row, warp shuffles then one smem slot per warp",
          _softmax_run("cuda.safe_k4", _plan_safe("safe_k4", SAFE_BLOCK, False)),
          lambda M, N, s: 6 * M * N * s,
          _shape_ok, _plan_safe("safe_k4", SAFE_BLOCK, False), ("safe_k4",))
_register("cuda.safe_3pass", "softmax", "safe softmax, 3 kernels", "seed 001 exp 2",
          "pass1_row_max, pass2_row_sum, pass3_normalize: three launches, M-length max/sum buffers",
          _run_3pass,
          lambda M, N, s: 4 * M * N * s + 5 * M * 4,  # 3 reads + 1 write; stats: 2 writes, 3 reads
          _shape_ok, _plan_3pass, ("pass1_row_max", "pass2_row_sum", "pass3_normalize"))

_register("cuda.online_v0", "softmax", "online V0 (thread per row)", "seed 000 §2, seed 002 §3",
          "one thread per row: per-element (m, d) recurrence, then normalise (256 rows per block)",
          _softmax_run("cuda.online_v0", _plan_online("online_v0", per_row=True)),
          lambda M, N, s: 3 * M * N * s, _shape_ok, _plan_online("online_v0", per_row=True), ("online_v0",),
          serial_rows=True)
_register("cuda.online_v1", "softmax", "online V1 (block + warp merge)", "seed 000 §3, seed 002 §4",
          "256 threads per row fold (m, d), warp-shuffle merge, smem merge across warps, 2 passes",
          _softmax_run("cuda.online_v1", _plan_online("online_v1")),
          lambda M, N, s: 3 * M * N * s, _shape_ok, _plan_online("online_v1"), ("online_v1",))
_register("cuda.online_v2", "softmax", "online V2 (float4)", "seed 000 §4, seed 002 §5",
          "V1 with float4 loads and stores; N % 4 == 0 only",
          _softmax_run("cuda.online_v2", _plan_online("online_v2"), vec=True),
          lambda M, N, s: 3 * M * N * s, _needs_vec4, _plan_online("online_v2"), ("online_v2",))
_register("cuda.online_v3", "softmax", "online V3 (1-pass, registers)", "seed 000 §5, seed 002 §6",
          "row cached in registers (SLOTS float4 per thread, compile-time indices): 1 read + 1 write; N <= 16384",
          _softmax_run("cuda.online_v3", _plan_v3, vec=True),
          lambda M, N, s: 2 * M * N * s, _v3_supports, _plan_v3, tuple(f"online_v3<{s}>" for s in V3_SLOTS))
_register("cuda.online_v3_rtidx", "softmax", "online V3, runtime index (local memory)", "seed 000 §5",
          "V3 with cache[count++]: the cache lands in local memory (stack frame), still correct",
          _softmax_run("cuda.online_v3_rtidx", _plan_v3_rtidx, vec=True),
          lambda M, N, s: 2 * M * N * s,  # global traffic; the local-memory cache is not counted
          _v3_supports, _plan_v3_rtidx, tuple(f"online_v3_rtidx<{s}>" for s in V3_RTIDX_SLOTS))
_register("cuda.online_v4", "softmax", "online V4 (grid stride)", "seed 000 §6, seed 002 §7",
          "V2 (float4, or scalar when N % 4 != 0) over a grid-stride loop on rows, grid = min(M, 4 x SMs)",
          _softmax_run("cuda.online_v4", _plan_v4),
          lambda M, N, s: 3 * M * N * s, _shape_ok, _plan_v4, ("online_v4<true>", "online_v4<false>"))


# ---- inspection ----------------------------------------------------------------------------------


def inspect_rows(arch: str = DEFAULT_ARCH, files=None) -> list[dict]:
    """Compile every kernel and template instantiation of the ladder (or of `files`, names in FILES) for `arch`
    (no GPU needed) and return one row per kernel: variants, file, kernel, registers, smem, stack, spills."""
    rows = []
    for filename in files or FILES:
        names = FILES[filename]
        mod = module(filename, arch)
        for kname in names:
            r = mod.resources(kname)
            rows.append({
                "variants": ", ".join(_USES.get(kname, [])),
                "file": filename,
                "kernel": kname,
                "arch": arch,
                "registers": r["registers"],
                "smem": r["smem"],
                "stack": r["stack"],
                "spill_stores": r["spill_stores"],
                "spill_loads": r["spill_loads"],
            })
    return rows

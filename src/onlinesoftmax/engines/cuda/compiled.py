"""The production CUDA engine's kernels: compiled per instantiation (NVRTC, cached in process and on disk), loaded
per device and launch shape, and their ptxas reports. Nothing here needs a GPU to compile or report.

    module(name, arch)                       the compiled module of one instantiation (a name expression of FILE)
    kernel(name, device, block, smem, cluster).bind(grid, tail, pointers[, pdl])   a launch with its scalars bound
    compile_all(names, arch)                 ptxas reports of many instantiations, in parallel
    plan_resources(plan) / resource_table()  registers, shared memory, stack and spills of what plans pick

Threads: the caches here are read without a lock and filled under one; what they hold is immutable once built.
"""

from __future__ import annotations

import math

from typing import Optional

import torch

from ...runtime import DEFAULT_ARCH, DEFAULT_SMS
from ...runtime import launch as rt_launch
from ...runtime import nvrtc
from ...runtime.bounded import BoundedCache
from .plan import FILE, SOURCES, Plan, instantiations

_modules = BoundedCache(4096)  # (kernel, arch) -> CompiledModule (one instantiation per module: compile what is used)
_kernels = BoundedCache(4096)  # (kernel, device, block, smem, cluster) -> ShapedKernel: bounded by the instantiations
_archs: dict = {}


def module(kernel: str, arch: str = DEFAULT_ARCH) -> nvrtc.CompiledModule:
    """The compiled module holding one instantiation (cached in process and on disk)."""
    return _modules.get_or_make((kernel, arch), lambda: nvrtc.compile_source(FILE, [kernel], arch=arch,
                                                                                       package=SOURCES))


def compile_all(names, arch: str = DEFAULT_ARCH, batch: int = 64, workers: int = 1) -> dict[str, dict]:
    """ptxas reports of many instantiations (those that come with one): `batch` per NVRTC call (one front-end pass
    for many kernels; batch=1 produces exactly the cache entries the run-time path looks up), spread over `workers`
    processes."""
    names = sorted(names)
    groups = [names[i:i + batch] for i in range(0, len(names), batch)]
    if workers > 1 and len(groups) > 1:
        import concurrent.futures as cf
        import multiprocessing as mp

        with cf.ProcessPoolExecutor(min(workers, len(groups)), mp_context=mp.get_context("spawn")) as ex:
            parts = list(ex.map(_compile_group, groups, [arch] * len(groups)))
    else:
        parts = [_compile_group(g, arch) for g in groups]
    report: dict[str, dict] = {}
    for part in parts:
        report.update(part)
    return report


def _compile_group(group, arch: str) -> dict:
    # a kernel NVRTC compiled without a ptxas report (runtime/nvrtc.py: seen on the H200 image, where the log of a
    # later compile in a process can come back empty) is left out of the reports, not an error: its cubin is good
    mod = nvrtc.compile_source(FILE, list(group), arch=arch, package=SOURCES)
    return {n: mod.resources(n) for n in group if n in mod.report}


def _arch_of(device: int) -> str:
    a = _archs.get(device)
    if a is None:
        a = _archs[device] = nvrtc.current_arch(device)
    return a


def sms(device: Optional[int]) -> int:
    """The SM count plans are made for: the device's, or the H200's without a GPU."""
    if device is not None and torch.cuda.is_available():
        return rt_launch.sm_count(device)
    return DEFAULT_SMS


class ShapedKernel:
    """One instantiation loaded on one device for one launch shape (block, dynamic smem, cluster); shared by every
    call of that shape. `resident`: how many of its clusters can be resident at once (None: unknown; 1 without a
    cluster), `fits`: whether one can; `resident_ctas`: how many of its CTAs (without a cluster: blocks an SM from
    the occupancy query times the SMs; None: unknown). bind() gives a launch with a fixed grid and scalar tail: a
    PreparedLaunch (cuLaunchKernel; cuLaunchKernelEx with a cluster, PDL or a cooperative launch)."""

    __slots__ = ("lk", "block", "smem", "cluster", "resident", "_ctas")

    def __init__(self, name: str, device: int, block: tuple, smem: int, cluster: int):
        self.lk = rt_launch.kernel(module(name, _arch_of(device)), name, device)
        self.block, self.smem, self.cluster, self._ctas = block, smem, cluster, False
        self.lk.allow_smem(smem)
        if cluster > 1 and not rt_launch.cluster_launches():  # no launch for it here: the plans fall back
            self.resident = 0
            return
        self.lk.allow_cluster(cluster)
        self.resident = self.lk.max_active_clusters(block, cluster, smem) if cluster > 1 else 1

    @property
    def fits(self) -> Optional[bool]:
        return None if self.resident is None else self.resident > 0

    @property
    def resident_ctas(self) -> Optional[int]:
        if self._ctas is False:  # asked once, on first use (two threads asking at once get the same count)
            per_sm = None
            if self.cluster == 1:
                per_sm = rt_launch.on_device(self.lk.device, self.lk.max_active_blocks, math.prod(self.block),
                                             self.smem)
            self._ctas = None if per_sm is None else per_sm * rt_launch.sm_count(self.lk.device)
        return self._ctas

    def bind(self, grid: int, tail: tuple, pointers: int, pdl: bool = False, coop: bool = False):
        return rt_launch.PreparedLaunch(self.lk, grid, self.block, tail, self.smem, pointers, pdl, self.cluster, coop)


def kernel(name: str, device: int, block: tuple, smem: int, cluster: int) -> ShapedKernel:
    key = (name, device, block, smem, cluster)
    return _kernels.get(key) or _kernels.get_or_make(
        key, lambda: rt_launch.on_device(device, ShapedKernel, name, device, block, smem, cluster))


def plan_resources(p: Plan, arch: str = DEFAULT_ARCH) -> dict:
    """ptxas report of the plan's kernels; for two kernels: max registers/smem/stack, summed spills, and each
    kernel's own report under "per_kernel"."""
    rows = []
    for l in p.launches:
        r = module(l.kernel, arch).resources(l.kernel)
        r.update(kernel=l.kernel, block=l.block, grid=l.grid, cluster=l.cluster, dynamic_smem=l.smem,
                 regime=p.regime)
        rows.append(r)
    if len(rows) == 1:
        return rows[0]
    return {
        "kernel": "+".join(r["kernel"] for r in rows),
        "regime": p.regime,
        "registers": max(r["registers"] for r in rows),
        "smem": max(r["smem"] for r in rows),
        "stack": max(r["stack"] for r in rows),
        "spill_stores": sum(r["spill_stores"] for r in rows),
        "spill_loads": sum(r["spill_loads"] for r in rows),
        "block": rows[0]["block"],
        "dynamic_smem": max(r["dynamic_smem"] for r in rows),
        "per_kernel": {r["kernel"]: r for r in rows},
    }


def resource_table(arch: str = DEFAULT_ARCH, workers: int = 1) -> list[dict]:
    """One row per instantiation the plans can pick: regimes, kernel, registers, smem, stack, spills."""
    inst = instantiations()
    rep = compile_all(inst, arch, workers=workers)
    return [{"kernel": k, "regimes": ",".join(sorted(inst[k])), **{f: rep[k][f] for f in
             ("registers", "smem", "stack", "spill_stores", "spill_loads")}} for k in sorted(inst)]


if __name__ == "__main__":  # python -m onlinesoftmax.engines.cuda.compiled: ptxas table of every instantiation
    import os

    print(f"{'kernel':40s} {'regimes':8s} {'regs':>4s} {'smem':>6s} {'stack':>5s} {'spills st/ld':>12s}")
    for r in resource_table(workers=os.cpu_count() or 1):
        print(f"{r['kernel']:40s} {r['regimes']:8s} {r['registers']:4d} {r['smem']:6d} {r['stack']:5d} "
              f"{r['spill_stores']:6d}/{r['spill_loads']:<5d}")

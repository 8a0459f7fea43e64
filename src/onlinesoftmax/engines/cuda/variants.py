"""The production CUDA engine's regimes as registry variants, cuda.<op>_<regime>: each forces one regime on
(M, N) rows, so the CLI, the tests and the benchmarks can check and time every regime on any shape."""

from __future__ import annotations

from typing import Optional

import torch

from ...opdefs import GPU_DTYPES, OPS
from ...registry import Variant, register
from ...runtime import available
from .compiled import plan_resources, sms
from .plan import ENGINE_OPS, REGIMES, Plan, Unsupported, plan
from .run import run_regime


def _variant_plan(op: str, regime: str, M: int, N: int, dtype) -> Plan:
    dev = torch.cuda.current_device() if torch.cuda.is_available() else None
    return plan(M, N, dtype, op, vec=True, sms=sms(dev), regime=regime, flat=True)


def _supports(op: str, regime: str):
    def supports(M: int, N: int, dtype) -> Optional[str]:
        if dtype not in GPU_DTYPES:
            return f"dtype {dtype} not supported"
        try:
            _variant_plan(op, regime, M, N, dtype)
        except Unsupported as e:
            return str(e)
        return None

    return supports


def _algo_bytes(op: str, regime: str):
    def algo_bytes(M: int, N: int, s: int) -> int:
        ideal = OPS[op].ideal_bytes(M, N, s)
        if regime in ("warp", "block", "cluster", "group", "bands", "columns", "chan", "flat"):
            return ideal
        reads = len(OPS[op].inputs)
        total = ideal + reads * M * N * s  # the second pass re-reads the inputs (from L2 when the plan works)
        if regime == "split":
            dtype = {4: torch.float32, 2: torch.bfloat16}.get(s, torch.float32)
            try:
                p = _variant_plan(op, regime, M, N, dtype)
                total += 8 * M * p.parts * (1 + p.parts)  # partials written once, each read by every chunk
            except Unsupported:
                pass
        return total

    return algo_bytes


def _resources(op: str, regime: str):
    def resources(M: int, N: int, dtype=torch.float32) -> dict:
        return plan_resources(_variant_plan(op, regime, M, N, dtype))

    return resources


def _variant_run(op: str, regime: str):
    def run(inputs, out) -> None:
        run_regime(op, tuple(inputs), out, inputs[0].dim() - 1, regime)

    return run


_RUNG = {
    "warp": ("warp per row", "2^lg lanes (<= 32) per row, RPT rows per lane group, row in registers as 16-byte "
             "vectors, (m, d) by shuffles"),
    "block": ("CTA per row", "one CTA (128..512 threads) per row, row in registers (+ dynamic smem), one block "
              "merge, 16-byte stores"),
    "cluster": ("cluster per row", "a cluster of C CTAs per row (Hopper DSMEM): each holds N/C in registers + "
                "smem, partial states exchanged through distributed shared memory; 1 read + 1 write"),
    "group": ("group of CTAs per row", "G CTAs anywhere on the chip per row, each taking its row from a ticket in "
              "the order CTAs start: each holds N/G in registers + smem as a cluster's CTA does, partial states met "
              "through global memory (a counter per row); 1 read + 1 write"),
    "split": ("split rows", "each row cut into P chunks: partial states to an fp32 workspace, then merge + "
              "re-read (L2) + write: two launches"),
    "columns": ("columns on chip (non-last dim)", "(outer, N, inner) forward: a cluster of C CTAs per strip of "
                "columns, each a band of rows in registers (+ smem), per-column (m, d) by a tree and DSMEM; here on "
                "(M, N) as inner = 1"),
    "strided": ("strided (non-last dim)", "(outer, N, inner) with threads along inner: states down N, tree "
                "merge, second pass over the strip (L2); here on (M, N) as inner = 1"),
    "bands": ("bands of columns (non-last dim)", "(outer, N, inner) with threads along inner: a group of G CTAs "
              "per strip of columns, each a band of its rows in registers, per-column states by a tree and through "
              "global memory (a counter per strip); 1 read + 1 write; here on (M, N) as inner = 1"),
    "flat": ("rows staged in shared memory", "contiguous aligned rows of any N: a CTA copies R rows (whole 16-byte "
             "accesses) to shared memory, 4-32 lanes a row compute there, 16-byte stores; 1 read + 1 write"),
    "chan": ("columns in registers (short non-last dim)", "(outer, N <= 256, inner): per 4-byte access of inner, "
             "1 to 8 threads hold its column in registers, bands of up to 32 rows merged through shared memory; here "
             "on (M, N) as inner = 1 (threads per row)"),
}

_SUMMARY_OP = {
    "softmax": "softmax forward",
    "log_softmax": "log_softmax forward",
    "softmax_backward": "softmax backward dx = y * (dy - sum(dy * y))",
    "log_softmax_backward": "log_softmax backward dx = dy - exp(y) * sum(dy)",
}

VARIANT_NAMES: list[str] = []

for _op in ENGINE_OPS:
    for _regime in REGIMES:
        if _regime == "columns" and OPS[_op].backward:  # forward only: backward uses the strided kernel
            continue
        if _regime == "period":  # a non-last dim only: rows have inner = 1 (the layout tests force it there)
            continue
        _name = f"cuda.{_op}_{_regime}"
        VARIANT_NAMES.append(_name)
        register(Variant(
            name=_name, op=_op, backend="cuda", rung=f"production: {_RUNG[_regime][0]}",
            seed_ref="issue #4", summary=f"{_SUMMARY_OP[_op]}: {_RUNG[_regime][1]}",
            run=_variant_run(_op, _regime), algo_bytes=_algo_bytes(_op, _regime), device="cuda", dtypes=GPU_DTYPES,
            supports=_supports(_op, _regime), available=available, resources=_resources(_op, _regime),
        ))

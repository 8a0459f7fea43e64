"""The Triton cross-entropy engine's rules: which kernel, its block sizes, warps, grid. Pure Python (no triton
import).

1. "rows"   the whole row of logits in registers (V <= ROWS_MAX_V): read once, one exp per element, the
            gradient written once: exactly 1 read + 1 write. A persistent grid, the next row prefetched.
2. "split"  longer rows: segments of SEG_CHUNKS x CHUNK logits handed out in order by a ticket; the
            segment is folded (1 read), and LAG segments later re-read and its gradient written. The
            re-read falls inside a window of LAG segments (LAG = C + programs: ~10 MB at the defaults),
            which stays in L2 (50 MB on the H200): 1 read from HBM + 1 from L2 + 1 write.

The tuning knobs are module constants (benchmarks/cross_entropy.py --sweep sets them); FORCE_* let the
interpreter tests drive the split kernel with tiny shapes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch

from ...intmath import cdiv, pow2ceil
from ...opdefs import GPU_DTYPES

REGIMES = ("rows", "split")
MODES = {"stats": 0, "fused": 1, "grad": 2}

ROWS_MAX_V = 32768  # rows in registers up to this many logits (fp32 in registers: 32 per thread at 32 warps;
# measured at V = 32000 against the split kernel: bf16 0.93 vs 1.03 ms, fp32 1.13 vs 1.07 ms, commit 8db66d9)
ROWS_PIPELINE_BYTES = 64 * 1024  # prefetch the next row through shared memory up to this many bytes
# The split knobs: the winner of benchmarks/cross_entropy.py --sweep on the H200 at commit 8db66d9
# (benchmarks/results/h200-cross-entropy-8db66d9.txt: 8192 x 128256 bf16 2.90 ms, 8192 x 256000 fp32 6.96 ms).
# The kernel changed after that run (the next chunk's load issued first; not re-measured): re-run the sweep.
SPLIT_CHUNK = 4096  # logits per chunk of a split segment (registers: CHUNK / (32 * warps) per thread)
SPLIT_SEG_BYTES = 16 * 1024  # bytes of logits per segment (one ticket)
SPLIT_WARPS = 8
SPLIT_PROGRAMS_PER_SM = 4
SPLIT_LANES = True  # fold a segment lane by lane (True) or chunk by chunk (False)

FORCE_CHUNK: Optional[int] = None  # tests: chunk of the split kernel (a power of two)
FORCE_SEG_CHUNKS: Optional[int] = None  # tests: chunks per segment
FORCE_PROGRAMS: Optional[int] = None  # tests: programs of both grids


def unsupported(regime: str, V: int, dtype: torch.dtype) -> Optional[str]:
    if regime not in REGIMES:
        return f"unknown regime {regime!r}; known: {', '.join(REGIMES)}"
    if dtype not in GPU_DTYPES:
        names = ", ".join(str(d).replace("torch.", "") for d in GPU_DTYPES)
        return f"dtype {str(dtype).replace('torch.', '')} not supported by the Triton kernels; supported: {names}"
    if regime == "rows" and V > ROWS_MAX_V:
        return f"V = {V} > {ROWS_MAX_V}: the 'rows' kernel holds a whole row in registers; use 'split'"
    return None


def pick_regime(V: int) -> str:
    return "rows" if V <= ROWS_MAX_V and not FORCE_CHUNK else "split"


def warps_for(elems: int) -> int:
    """Warps for a block of `elems` fp32 values in registers: 32 values per thread at most."""
    return max(4, min(32, pow2ceil(cdiv(elems, 32 * 32))))


@dataclass(frozen=True)
class RowsConfig:
    BLOCK: int
    num_warps: int
    num_stages: int


def rows_config(V: int, dtype: torch.dtype) -> RowsConfig:
    block = pow2ceil(V)
    return RowsConfig(block, warps_for(block), 2 if block * dtype.itemsize <= ROWS_PIPELINE_BYTES else 1)


def programs(sms: int, per_sm: int, tasks: int) -> int:
    if FORCE_PROGRAMS:
        return max(1, min(FORCE_PROGRAMS, tasks))
    return max(1, min(tasks, sms * per_sm))


def rows_programs(cfg: RowsConfig, sms: int, M: int) -> int:
    """One program per SM holds a 32K-logit row in a quarter of the register file; smaller rows get more."""
    return programs(sms, max(1, 32 // cfg.num_warps), M)


@dataclass(frozen=True)
class SplitConfig:
    CHUNK: int
    SEG_CHUNKS: int
    C: int  # segments per row
    PBLOCK: int  # pow2 >= C: the partials merged at once
    num_warps: int
    LANES: bool


def split_config(V: int, dtype: torch.dtype) -> SplitConfig:
    chunk = FORCE_CHUNK or min(SPLIT_CHUNK, pow2ceil(V))
    seg_chunks = FORCE_SEG_CHUNKS or max(1, SPLIT_SEG_BYTES // (chunk * dtype.itemsize))
    seg_chunks = min(seg_chunks, cdiv(V, chunk))
    c = cdiv(V, chunk * seg_chunks)
    return SplitConfig(chunk, seg_chunks, c, pow2ceil(c), SPLIT_WARPS if not FORCE_CHUNK else 4, SPLIT_LANES)


def split_programs(sms: int, tasks: int) -> int:
    return programs(sms, SPLIT_PROGRAMS_PER_SM, tasks)


def split_lag(C: int, M: int, progs: int) -> int:
    """Segments between the fold and the write of a segment: at least C (a row's partials all come from
    earlier tickets), plus one round of the grid so they are normally done; at most all of them."""
    return min(C + progs, M * C)

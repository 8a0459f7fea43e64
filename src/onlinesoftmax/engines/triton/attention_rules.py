"""Rules of the Triton attention engine: which head dims and dtypes it takes, the autotuning
candidates of each kernel and the key that buckets sequence lengths. Pure Python (no triton
import): the op layer and the tests ask it on machines without Triton.

The candidate lists are short on purpose: every candidate is compiled (~2 s) and timed once per
(head dim, causal, length bucket) the first time that key is seen, so a long list costs a long
first call. They are FA2's shapes on Hopper: a 64- or 128-row query tile per program in the forward
and in dQ, a 64- or 128-key tile per program in dK/dV, 4 or 8 warps, 2 to 4 pipeline stages.
"""

from __future__ import annotations

from typing import NamedTuple

FORWARD_HEAD_DIMS = (16, 32, 64, 128, 256)  # 16 and 32: the interpreter tests' tiny shapes
BACKWARD_HEAD_DIMS = (16, 32, 64, 128)  # 256 backward does not fit the dK/dV tile in shared memory
INTERPRETER_BLOCK = 16  # the tile of every kernel under TRITON_INTERPRET=1 (shapes there are tiny)


class Candidate(NamedTuple):
    BLOCK_M: int
    BLOCK_N: int
    num_warps: int
    num_stages: int


# Picked from sm_90 compiles here (ptxas resource usage, no GPU needed) and from H200 timings of each candidate
# through the public backward (benchmarks/attention_tiles.py; benchmarks/results/h200-attention-tiles-*.txt) and the
# sweep (h200-attention*: what the autotuner chose). D <= 64 and D = 128 have their own lists; 256 is forward only.
_C = Candidate
CANDIDATES = {
    ("forward", 64): (_C(128, 64, 8, 3), _C(128, 128, 8, 2)),
    ("forward", 128): (_C(128, 64, 8, 3), _C(128, 64, 8, 4)),
    ("forward", 256): (_C(64, 64, 4, 2), _C(128, 64, 8, 2)),  # a 256-wide fp32 accumulator
    # dK/dV: BLOCK_N keys held per program (K, V and the fp32 dK, dV), BLOCK_M query rows streamed. At D = 64,
    # four warps on 64 x 64 win at every measured shape (5-11% over the next). At D = 128 the 128 x 128 fp32 dK
    # and dV leave registers for 32-row query tiles; 64 rows spill ~100-250 bytes yet win when causal (+5-6%)
    ("dkdv", 64): (_C(64, 64, 4, 3), _C(32, 128, 8, 3), _C(64, 128, 8, 3)),
    ("dkdv", 128): (_C(32, 128, 8, 3), _C(64, 128, 8, 2)),
    # dQ: BLOCK_M query rows held per program (Q, dO and the fp32 dQ), BLOCK_N keys streamed
    ("dq", 64): (_C(64, 64, 4, 3), _C(128, 64, 8, 3)),
    ("dq", 128): (_C(128, 64, 8, 3), _C(128, 64, 8, 2)),
}
KERNELS = {k: tuple(dict.fromkeys(c for (kernel, _), cs in CANDIDATES.items() if kernel == k for c in cs))
           for k in ("forward", "dkdv", "dq")}


def length_bucket(n: int) -> int:
    """The autotuning key of a sequence length: its power-of-two ceiling, clamped to [128, 16384]."""
    b = 128
    while b < n and b < 16384:
        b *= 2
    return b


def candidates(kernel: str, head_dim: int) -> tuple:
    """The candidates of `kernel` ("forward", "dkdv", "dq") worth timing at this head dim."""
    return CANDIDATES[kernel, 64 if head_dim <= 64 else 128 if head_dim <= 128 else 256]


def unsupported(head_dim: int, backward: bool):
    """Why the kernels cannot run this head dim (a message), or None."""
    dims = BACKWARD_HEAD_DIMS if backward else FORWARD_HEAD_DIMS
    if head_dim in dims:
        return None
    what = "backward" if backward else "forward"
    return (f"head dim {head_dim} not supported by the Triton attention {what} "
            f"(supported: {', '.join(map(str, dims))})")

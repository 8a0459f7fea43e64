"""Rules of the Triton attention engine: which head dims and dtypes it takes, the autotuning
candidates of each kernel and the key that buckets sequence lengths. Pure Python (no triton
import): the op layer and the tests ask it on machines without Triton.

The candidate lists are short on purpose: every candidate is compiled and timed once per
(head dim, causal, length bucket) the first time that key is seen, so a long list costs minutes of
device time. They are FA2's shapes on Hopper: a 128-row query tile per program in the forward and
in dQ, a 64- or 128-key tile per program in dK/dV, 4 or 8 warps, 2 to 4 pipeline stages.
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


# Picked from sm_90 compiles here (ptxas resource usage, no GPU needed): the candidates that spill no or few
# registers. 4 warps on a 128 x 128 fp32 accumulator spill (D = 128), so D = 128 takes 8 warps only.
FORWARD = (
    Candidate(128, 64, 4, 3), Candidate(128, 64, 8, 3), Candidate(128, 128, 8, 2), Candidate(128, 128, 8, 3),
)
FORWARD_D128 = (
    Candidate(128, 64, 8, 2), Candidate(128, 64, 8, 3), Candidate(128, 64, 8, 4), Candidate(128, 128, 8, 2),
)
FORWARD_D256 = (  # a 256-wide fp32 accumulator: at most 128 of its registers per thread
    Candidate(64, 64, 4, 2), Candidate(128, 64, 8, 2),
)
BACKWARD_DKDV = (  # BLOCK_N keys held per program (K, V, dK, dV), BLOCK_M query rows streamed
    Candidate(32, 128, 8, 2), Candidate(32, 128, 8, 3), Candidate(16, 128, 8, 3), Candidate(32, 64, 8, 3),
)
BACKWARD_DQ = (  # BLOCK_M query rows held per program (Q, dO, dQ), BLOCK_N keys streamed
    Candidate(128, 64, 8, 2), Candidate(128, 32, 8, 3), Candidate(64, 64, 4, 3),
)
KERNELS = {"forward": FORWARD + FORWARD_D128 + FORWARD_D256, "dkdv": BACKWARD_DKDV, "dq": BACKWARD_DQ}


def length_bucket(n: int) -> int:
    """The autotuning key of a sequence length: its power-of-two ceiling, clamped to [128, 16384]."""
    b = 128
    while b < n and b < 16384:
        b *= 2
    return b


def candidates(kernel: str, head_dim: int) -> tuple:
    """The candidates of `kernel` ("forward", "dkdv", "dq") worth timing at this head dim."""
    if kernel == "forward":
        return FORWARD_D256 if head_dim > 128 else FORWARD_D128 if head_dim > 64 else FORWARD
    return KERNELS[kernel]


def unsupported(head_dim: int, backward: bool):
    """Why the kernels cannot run this head dim (a message), or None."""
    dims = BACKWARD_HEAD_DIMS if backward else FORWARD_HEAD_DIMS
    if head_dim in dims:
        return None
    what = "backward" if backward else "forward"
    return (f"head dim {head_dim} not supported by the Triton attention {what} "
            f"(supported: {', '.join(map(str, dims))})")

"""Every op of the package, once: what it reads and writes, whether it is a backward, whether it is the log form,
and its code in the production CUDA kernels. The public ops, the engines, the registry, the references and the
harness all read this record; nothing re-derives it from strings.

    op = OPS["log_softmax_backward"]
    op.inputs        ("y", "dy")        the tensors a variant's run() gets, in order
    op.backward      True
    op.log           True
    op.code          3                  OP of the CUDA kernels (softmax.cu); -1 where there is none
    op.ideal_bytes(M, N, 2)             bytes any implementation must move: inputs read once, output written once

The dtypes the GPU engines take are defined here too.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

GPU_DTYPES = (torch.float32, torch.float16, torch.bfloat16)  # what the CUDA and Triton engines take


@dataclass(frozen=True)
class Op:
    name: str
    inputs: tuple  # names of the input tensors, in calling order
    writes: int  # tensors written per element: 1, or 0 for a reduction to one value
    backward: bool
    log: bool
    code: int  # OP of the production CUDA kernels; -1: no production kernel

    def ideal_bytes(self, M: int, N: int, itemsize: int) -> int:
        """The physical floor: every input element read once, every output element written once."""
        return (len(self.inputs) + self.writes) * M * N * itemsize

    @property
    def forward(self) -> str:
        """The name of the forward op this op belongs to (itself for a forward)."""
        return self.name.removesuffix("_backward")


SOFTMAX = Op("softmax", ("x",), 1, backward=False, log=False, code=0)
LOG_SOFTMAX = Op("log_softmax", ("x",), 1, backward=False, log=True, code=1)
SOFTMAX_BACKWARD = Op("softmax_backward", ("y", "dy"), 1, backward=True, log=False, code=2)
LOG_SOFTMAX_BACKWARD = Op("log_softmax_backward", ("y", "dy"), 1, backward=True, log=True, code=3)
SUM = Op("sum", ("x",), 0, backward=False, log=False, code=-1)  # the seeds' flat reduction (ladder only)

OPS: dict[str, Op] = {op.name: op for op in (SOFTMAX, LOG_SOFTMAX, SOFTMAX_BACKWARD, LOG_SOFTMAX_BACKWARD, SUM)}
SOFTMAX_OPS = tuple(op for op in OPS.values() if op.code >= 0)  # the four softmax ops, forward then backward


def softmax_op(log: bool, backward: bool) -> Op:
    """The softmax op with these two flags."""
    return {(False, False): SOFTMAX, (True, False): LOG_SOFTMAX, (False, True): SOFTMAX_BACKWARD,
            (True, True): LOG_SOFTMAX_BACKWARD}[(bool(log), bool(backward))]


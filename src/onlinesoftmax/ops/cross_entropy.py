"""Cross-entropy on the online (m, d) fold: the loss and its gradient from one read of the logits.

    loss = onlinesoftmax.cross_entropy(logits, target)                       # F.cross_entropy's meaning
    loss, lse = onlinesoftmax.cross_entropy(logits, target, z_loss=1e-4, softcap=30.0, return_lse=True)
    loss = onlinesoftmax.cross_entropy(logits, target, inplace_grad=True)    # the gradient overwrites logits
    loss = onlinesoftmax.linear_cross_entropy(hidden, weight, target)        # never builds the BT x V logits

Semantics (reference.cross_entropy is the float64 specification): F.cross_entropy(logits, target,
ignore_index=, label_smoothing=, reduction=) for logits (N, V) or (V,) and integer targets (N,) or (); "mean"
divides by the non-ignored rows and is NaN when every row is ignored (as torch), with a zero gradient. Added:
z_loss (z * lse^2 per non-ignored row) and softcap (the logits pass through cap * tanh(x / cap) first; the
gradient flows through it). The loss comes in the logits' dtype (as torch), computed in fp32 (fp64 for fp64);
return_lse also gives each row's log-sum-exp (fp32, no gradient).

How it runs: the forward computes per row the state (m, d), the target logit and the row sum (for label
smoothing), and, when a gradient is wanted, writes the gradient of the reduced loss in the same pass (scaled by
1 / non-ignored rows for "mean", from a device scalar: no sync). The backward only multiplies by grad_output,
in place, and skips that on the device where grad_output is 1. Backends:
- "cuda" (CUDA tensors; "auto"): the gradient pass by the production CUDA row kernel (engines/cuda, ce_row: the
  row held in registers and shared memory of one CTA or a cluster, as softmax's forward), where its plan holds the
  rows on chip and there is no softcap; the Triton kernels for the rest (the loss-only pass, softcap, rows too long
  or unaligned for a cluster);
- "triton": the Triton kernels only;
- "reference": torch ops in fp32 / fp64 (CPU tensors, float64, and the specification).

Three ways in, one implementation, as softmax: eager without grad (loss only: one read, no gradient written),
eager with grad (an autograd.Function), torch.compile (custom ops with fake kernels and registered autograd;
inplace_grad is eager-only).

Errors (OnlineSoftmaxError, the builtin type where torch raises one): a target out of [0, V) other than
ignore_index (TargetError, an IndexError; on the GPU a small kernel flags it into pinned host memory, and the loss
kernel queued behind it is not waited for: the forward waits for the flag without a gradient, and where the
Triton kernels made the gradient; where the CUDA row kernel made it, the forward returns a NaN loss with NaN
gradient rows for the bad targets, and the backward raises if the GPU has written the flag by then, else the
same thread's next call on the device does (TargetCheck.settle)), wrong dtypes or shapes, a bad reduction /
label_smoothing / softcap.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Optional

import torch

from .. import state
from . import engines
from ..errors import ArgumentTypeError, OnlineSoftmaxError
from ..opdefs import GPU_DTYPES

BACKENDS = ("auto", "cuda", "triton", "reference")
GPU_BACKENDS = ("cuda", "triton")
REDUCTIONS = ("mean", "sum", "none")
DTYPES = GPU_DTYPES + (torch.float64,)
INDEX_DTYPES = (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8)


class TargetError(OnlineSoftmaxError, IndexError):
    """A target out of [0, V) that is not ignore_index (torch raises an IndexError)."""


# ------------------------------------------------------------------------------- validation
def check_options(ignore_index, label_smoothing, z_loss, softcap, reduction) -> None:
    if isinstance(ignore_index, bool) or not isinstance(ignore_index, int):
        raise ArgumentTypeError(f"ignore_index must be an int, got {type(ignore_index).__name__}")
    if reduction not in REDUCTIONS:
        raise OnlineSoftmaxError(f"reduction must be one of {', '.join(REDUCTIONS)}, got {reduction!r}")
    if not 0.0 <= float(label_smoothing) <= 1.0:
        raise OnlineSoftmaxError(f"label_smoothing must be in [0, 1], got {label_smoothing}")
    if not float(z_loss) >= 0.0:
        raise OnlineSoftmaxError(f"z_loss must be >= 0, got {z_loss}")
    if softcap is not None and not float(softcap) > 0.0:
        raise OnlineSoftmaxError(f"softcap must be None or > 0, got {softcap}")


def check_logits_target(logits, target, what: str = "logits"):
    """(logits as (N, V), target as (N,)) or a clear error."""
    if not isinstance(logits, torch.Tensor) or not isinstance(target, torch.Tensor):
        raise ArgumentTypeError(f"{what} and target must be torch.Tensors, got {type(logits).__name__} and "
                                f"{type(target).__name__}")
    if logits.dtype not in DTYPES:
        names = ", ".join(str(d).replace("torch.", "") for d in DTYPES)
        raise OnlineSoftmaxError(f"{what} dtype {logits.dtype} not supported (supported: {names})")
    if target.dtype not in INDEX_DTYPES:
        raise OnlineSoftmaxError(f"target must hold class indices (an integer dtype), got {target.dtype}")
    if logits.dim() not in (1, 2):
        raise OnlineSoftmaxError(f"{what} must be (N, V) or (V,), got shape {tuple(logits.shape)} "
                                 "(reshape to (N, V): the class dim last)")
    if target.dim() != logits.dim() - 1 or (logits.dim() == 2 and target.shape[0] != logits.shape[0]):
        raise OnlineSoftmaxError(f"target shape {tuple(target.shape)} does not match {what} shape "
                                 f"{tuple(logits.shape)} (expected ({logits.shape[0]},))" if logits.dim() == 2 else
                                 f"target must be 0-d for 1-d {what}, got shape {tuple(target.shape)}")
    if logits.device != target.device:
        raise OnlineSoftmaxError(f"{what} on {logits.device} and target on {target.device}")
    x = logits.unsqueeze(0) if logits.dim() == 1 else logits
    if x.shape[1] > 1 and x.stride(1) != 1:
        x = x.contiguous()
    return x, target.reshape(-1)


def check_targets(target: torch.Tensor, lo: int, hi: int, ignore_index: int) -> None:
    """Every target in [lo, hi) or ignore_index, or a TargetError naming the first that is not (one sync)."""
    if target.numel() == 0:
        return
    bad = ((target < lo) | (target >= hi)) & (target != ignore_index)
    if bad.any():
        first = int(target[bad][0])
        raise TargetError(f"target {first} out of range for {hi - lo} classes [{lo}, {hi}) "
                          f"(and not ignore_index = {ignore_index})")


def pick_backend(x: torch.Tensor, backend: str, cuda: bool = True) -> str:
    """The backend for x: "auto" is "cuda" for CUDA tensors (where the CUDA kernels can run, and `cuda`: the
    vocab-parallel op has Triton kernels only), else "reference"."""
    if backend not in BACKENDS:
        raise OnlineSoftmaxError(f"unknown backend {backend!r}; choose one of {', '.join(BACKENDS)}")
    if backend == "auto":
        backend = ("cuda" if cuda and engines.cuda_runs() else "triton") if x.is_cuda else "reference"
    if backend == "cuda" and not cuda:
        backend = "triton"
    if backend in GPU_BACKENDS:
        if not x.is_cuda and (backend == "cuda" or os.environ.get("TRITON_INTERPRET") != "1"):
            raise OnlineSoftmaxError(f"backend {backend!r} needs a CUDA tensor; got one on {x.device}")
        if x.dtype == torch.float64:
            return "reference"  # the kernels take 16 and 32 bits
    return backend


# --------------------------------------------------------------- the pieces: stats, loss, gradient
def accumulator(dtype: torch.dtype) -> torch.dtype:
    return torch.float64 if dtype == torch.float64 else torch.float32


def capped(x: torch.Tensor, softcap) -> torch.Tensor:
    """x in the accumulator dtype, through cap * tanh(x / cap) when softcap is set."""
    xf = x.to(accumulator(x.dtype))
    return xf if softcap is None else softcap * torch.tanh(xf / softcap)


def reference_stats(x, target, offset: int, softcap) -> torch.Tensor:
    """Per row (m, d, x[target] or 0 when the target is not in this shard, sum x): (M, 4) by torch ops."""
    xf = capped(x, softcap)
    m, d = state.of_values(xf, axis=-1)
    local = target - offset
    hit = (local >= 0) & (local < x.shape[1])
    xt = xf.gather(1, torch.where(hit, local, 0).unsqueeze(1).long()) * hit.unsqueeze(1)
    return torch.cat([m, d, xt, xf.sum(-1, keepdim=True)], dim=1)


def lse_of(stats: torch.Tensor) -> torch.Tensor:
    """log-sum-exp of each row from its (m, d): -inf for an empty row."""
    m, d = stats[:, 0], stats[:, 1]
    return state.safe_shift(m) + torch.log(d)


def loss_rows(stats, target, ignore_index, label_smoothing, z_loss, v_total: int) -> torch.Tensor:
    """The loss of each row from its stats (the one formula of every path, sharded or not); 0 when ignored."""
    lse = lse_of(stats)
    rows = lse - (1.0 - label_smoothing) * stats[:, 2]
    if label_smoothing:  # only then: 0 * sum(x) is NaN for a row with a -inf logit, where torch's loss is finite
        rows = rows - (label_smoothing / v_total) * stats[:, 3]
    if z_loss:
        rows = rows + z_loss * lse * lse
    return torch.where(target != ignore_index, rows, torch.zeros_like(rows))


def grad_scale(target, ignore_index, reduction, dtype) -> torch.Tensor:
    """The reduction's factor on every row's gradient, a device scalar: 1 / non-ignored rows for "mean"."""
    if reduction == "mean":
        return 1.0 / (target != ignore_index).sum().to(dtype)
    return torch.ones((), dtype=dtype, device=target.device)


def reduce(rows, target, ignore_index, reduction):
    if reduction == "none":
        return rows
    total = rows.sum()
    return total if reduction == "sum" else total / (target != ignore_index).sum()


def reference_grad(x, target, lse, scale, ignore_index, label_smoothing, z_loss, softcap, offset: int,
                   v_total: int, out=None) -> torch.Tensor:
    """The gradient of the reduced loss for one shard of columns, by torch ops, into `out` (or a new tensor)."""
    xf = capped(x, softcap)
    p = torch.exp(xf - lse.unsqueeze(1))
    valid = (target != ignore_index).unsqueeze(1)
    g = (1.0 + 2.0 * z_loss * lse.unsqueeze(1)) * p - label_smoothing / v_total
    local = (target - offset).long()
    hit = valid[:, 0] & (local >= 0) & (local < x.shape[1])
    rows = hit.nonzero(as_tuple=True)[0]
    g[rows, local[rows]] -= 1.0 - label_smoothing
    if softcap is not None:
        g = g * (1.0 - (xf / softcap) ** 2)
    g = torch.where(valid, g * scale, torch.zeros_like(g))
    if out is None:
        return g.to(x.dtype)
    out.copy_(g)
    return out


def shard_stats(x, target, backend, *, offset=0, softcap=None) -> torch.Tensor:
    """The stats (M, 4) of a shard of columns (vocab-parallel): one read."""
    M, V = x.shape
    if V == 0 or M == 0:
        st = torch.zeros(M, 4, dtype=accumulator(x.dtype), device=x.device)
        st[:, 0] = float("-inf")
        return st
    if backend == "triton":
        st = torch.empty(M, 4, dtype=torch.float32, device=x.device)
        engines.triton("cross_entropy").cross_entropy(x, target, stats=st, offset=offset, softcap=softcap)
        return st
    return reference_stats(x, target, offset, softcap)


def shard_grad(x, target, lse, scale, backend, grad, *, offset, v_total, ignore_index, label_smoothing, z_loss,
               softcap) -> torch.Tensor:
    """The gradient of one shard of columns from the rows' global lse (vocab-parallel, after the collective)."""
    if x.numel() == 0:
        return grad
    if backend == "triton":
        engines.triton("cross_entropy").cross_entropy(x, target, grad=grad, lse_in=lse.float(), scale=scale,
                                      ignore_index=ignore_index, offset=offset, v_total=v_total,
                                      label_smoothing=label_smoothing, z_loss=z_loss, softcap=softcap)
        return grad
    return reference_grad(x, target, lse, scale, ignore_index, label_smoothing, z_loss, softcap, offset, v_total,
                          out=grad)


def cuda_targets(target: torch.Tensor) -> torch.Tensor:
    """The targets as the CUDA kernels read them: int64, contiguous."""
    return target if target.dtype == torch.int64 and target.is_contiguous() else target.to(torch.int64).contiguous()


class Slot:
    """A TargetCheck's pinned buffer of 3 floats (info as the host reads it) and how the host learns it is written:
    armed (arm(), before a kernel that writes it directly: `mapped`, the device addresses it; the flag last), the
    flag holds SENTINEL until then and the host polls it, nothing recorded on the stream (so ce_row may follow
    ce_targets at once); else behind a copy into it (copied(): an event recorded after the copy)."""

    SENTINEL = -1.0  # the flag's value until the kernel writes 0 or 1
    PROBE_S = 0.1  # while polling, how often the stream is asked whether it failed (or is being captured)
    __slots__ = ("host", "view", "event", "mapped", "polled", "device")

    def __init__(self, device: int):
        self.device = device
        self.host = torch.empty(3, dtype=torch.float32, pin_memory=True)
        self.view = self.host.numpy()
        self.mapped = bool(engines.cuda_runs() and engines.cuda().host_mapped(device, self.host.data_ptr()))
        self.event, self.polled = torch.cuda.Event(), False

    def arm(self) -> None:
        self.view[2] = self.SENTINEL
        self.polled = True

    def copied(self, info: torch.Tensor) -> None:
        self.host.copy_(info[:3], non_blocking=True)
        self.event.record(torch.cuda.current_stream(info.device))
        self.polled = False

    def passed(self) -> bool:
        """Whether the buffer has been written (its writer no longer touches it)."""
        return self.view[2] != self.SENTINEL if self.polled else self.event.query()

    def wait(self) -> float:
        """The flag, once written: 1.0 if a counted target is out of range. Polling, the stream is probed every
        PROBE_S: a failed context (an earlier kernel's device-side assert) or a stream being captured raises
        there, and an idle stream with the flag still unwritten raises too, instead of waiting forever."""
        if self.polled:
            view, probe = self.view, time.perf_counter() + self.PROBE_S
            while view[2] == self.SENTINEL:
                time.sleep(0)  # gives the GIL and the core to others between reads
                if time.perf_counter() > probe:
                    if torch.cuda.current_stream(self.device).query() and view[2] == self.SENTINEL:
                        raise OnlineSoftmaxError("the target check's kernel finished without writing its flag "
                                                 "(was it queued on another stream?)")
                    probe = time.perf_counter() + self.PROBE_S
        else:
            self.event.synchronize()
        return float(self.view[2])


_slots: dict = {}  # device index -> free Slots of TargetCheck
_slots_lock = threading.Lock()  # taken in the forward's thread, given back in done(): often autograd's device thread
_orphans: list = []  # (device, slot) of checks dropped before done(): the pool takes them back once they passed
SLOTS_KEPT = 64  # per device; more checks in flight at once allocate their own and drop them after


def _take_slot(device: int) -> Slot:
    if _orphans:  # the lock only to reclaim; the pop needs none (a list's pop is atomic, and _keep only appends)
        with _slots_lock:
            _reclaim()
    try:
        return _slots[device].pop()
    except (KeyError, IndexError):
        return Slot(device)


def _give_slot(device: int, slot: Slot) -> None:
    with _slots_lock:
        _keep(device, slot)


def _keep(device: int, slot: Slot) -> None:  # under _slots_lock
    free = _slots.setdefault(device, [])
    if len(free) < SLOTS_KEPT:
        free.append(slot)


def _reclaim() -> None:
    """Under _slots_lock: the orphans that have passed back to the pool (their kernel no longer writes the pinned
    buffer), the others kept for later. pop / append only: TargetCheck.__del__ appends without the lock (the
    garbage collector may run it in a thread that holds it)."""
    pending = []
    while _orphans:
        device, slot = _orphans.pop()
        if slot.passed():
            _keep(device, slot)
        else:
            pending.append((device, slot))
    _orphans.extend(pending)


_deferred: dict = {}  # (device index, the calling thread) -> TargetChecks of its earlier calls not read yet
_deferred_lock = threading.Lock()


def settle_deferred(device: int) -> None:
    """Raises TargetError for a deferred check of this thread's earlier calls on `device` that the GPU has finished
    and that found a bad target (the call returned a NaN loss and NaN gradient rows); checks not finished yet stay
    deferred. Per thread: another thread's bad target is raised in that thread, not here."""
    if not _deferred:  # the usual case, read without the lock
        return
    key = (device, threading.get_ident())
    with _deferred_lock:
        waiting = _deferred.get(key)
        if not waiting:
            return
        finished = [c for c in waiting if c.slot is not None and c.slot.passed()]
        waiting[:] = [c for c in waiting if c.slot is not None and c not in finished]
        if not waiting:
            del _deferred[key]
    for check in finished:
        try:
            check.done()
        except TargetError as e:
            raise TargetError(f"{e}: found by the target check of an earlier cross_entropy call on cuda:{device}, "
                              "whose loss and gradient rows for those targets were NaN") from None


class TargetCheck:
    """The targets' check and the reduction's scale on the GPU without stalling it: one small kernel writes
    info = (scale, non-ignored rows, any bad target) (the CUDA engine's for backend "cuda", with targets from
    cuda_targets; else Triton's) and, on the host, a pinned copy of it (its Slot: the CUDA kernel writes it itself
    where the device addresses the pinned buffer directly; else a copy is queued behind the kernel); `done()` waits
    for that copy only (the big kernel queued after it keeps running), then raises a clear TargetError; `settle()`
    does so only if the GPU has got there, else defers the check to the next call of the same thread on the device
    (settle_deferred: for the backward, when ce_row made the gradient, NaN on a bad target's row). `direct`: the
    CUDA kernel wrote the slot and nothing else was queued behind it (the next launch may overlap it). Slots come
    from a pool per device (allocating the pinned buffer costs more host time than the rest of the check) and go
    back to it in done(); a check dropped before done() leaves its slot to the pool once it has passed (until then
    its kernel may still write the buffer)."""

    def __init__(self, target, V: int, ignore_index: int, reduction: str, backend: str, start: bool = True):
        self.target, self.V, self.ignore_index, self.mean, self.backend = (target, V, ignore_index,
                                                                           reduction == "mean", backend)
        self.slot = self.info = None
        if target.is_cuda:
            self.device, self.thread = target.get_device(), threading.get_ident()
            settle_deferred(self.device)
            self.slot = _take_slot(self.device)
        self.direct = backend == "cuda" and self.slot is not None and self.slot.mapped
        if start:
            self.start()

    def arm(self) -> int:
        """Just before the launch of the kernel that writes the slot itself (direct): the slot armed (its flag the
        sentinel: a slot armed with no kernel behind it would never pass), and its address; 0 where not direct."""
        if not self.direct:
            return 0
        self.slot.arm()
        return self.slot.host.data_ptr()

    def start(self) -> None:
        """The check's kernel, into self.info (a CrossEntropyStep launches it itself instead, into its buffer, with
        arm(): start=False, and only where direct)."""
        if self.backend == "cuda":
            self.info = engines.cuda().cross_entropy_targets(self.target, self.V, self.ignore_index, self.mean,
                                                             self.arm())
        else:
            self.info = torch.empty(3, dtype=torch.float32, device=self.target.device)
            engines.triton("cross_entropy").target_info(self.target, self.V, self.ignore_index, self.mean, self.info)
        if self.slot is not None and not self.direct:
            self.slot.copied(self.info)

    def __del__(self):
        # _orphans is None while the interpreter shuts down (a deferred check never settled): nothing to keep then
        if getattr(self, "slot", None) is not None and _orphans is not None:
            _orphans.append((self.device, self.slot))

    def done(self) -> None:
        if self.slot is None:
            bad = float(self.info[2])
        else:
            bad = self.slot.wait()
            _give_slot(self.device, self.slot)
            self.slot = None
        if bad != 0.0:
            check_targets(self.target, 0, self.V, self.ignore_index)
            raise TargetError(f"a target out of range for {self.V} classes [0, {self.V}) (and not ignore_index = "
                              f"{self.ignore_index}) was flagged by the GPU; the target tensor has changed since, "
                              "so which one is not known")

    def settle(self) -> None:
        """done() if the GPU has written the flag (or there is no slot), else deferred to the next call of the
        forward's thread on the device (settle_deferred)."""
        if self.slot is None or self.slot.passed():
            self.done()
            return
        with _deferred_lock:  # settle() runs on autograd's worker thread: keyed by the forward's thread
            _deferred.setdefault((self.device, self.thread), []).append(self)


def fused_forward(x, target, check: TargetCheck, rows, lse, *, backend, grad=None, ignore_index, label_smoothing,
                  z_loss, softcap, after_check: bool = False) -> bool:
    """The fused kernel on (a chunk of) the rows: loss and lse per row, and the gradient when `grad` is given; the
    CUDA row kernel where backend "cuda" has one (a gradient, no softcap, rows on chip), else the Triton one.
    Backend "cuda" takes its targets from cuda_targets (the callers convert them once, before TargetCheck).
    after_check: the check's kernel was the launch just before (the op's forward), so the CUDA kernel may start
    while it runs. Returns whether the CUDA kernel ran (a bad target's row then has a NaN gradient)."""
    if backend == "cuda" and grad is not None and softcap is None:
        if engines.cuda().cross_entropy(x, target, grad, rows, lse, check.info, ignore_index, label_smoothing,
                                        z_loss, after_targets=after_check and check.direct):
            return True
    engines.triton("cross_entropy").cross_entropy(x, target, loss=rows, lse=lse, grad=grad, scale=check.info,
                                  ignore_index=ignore_index, label_smoothing=label_smoothing, z_loss=z_loss,
                                  softcap=softcap)
    return False


def handed_grad(ctx, dloss: torch.Tensor, whose: str) -> torch.Tensor:
    """The gradient an autograd Function's forward made (ctx.grad, on ctx.backend), scaled by grad_output (by
    ctx.scaler where the forward prepared one): handed over once, so a second backward through the same loss
    (retain_graph) raises instead of reusing it."""
    grad, ctx.grad = ctx.grad, None
    if grad is None:
        raise OnlineSoftmaxError(f"{whose} gradient is made in the forward and handed over once: a second backward "
                                 "through the same loss (retain_graph) is not supported")
    scaler = getattr(ctx, "scaler", None)
    if scaler is None:
        return scale_grad(grad, dloss, ctx.backend)
    scaler(dloss)
    return grad


def scale_grad(grad: torch.Tensor, go: torch.Tensor, backend: str) -> torch.Tensor:
    """grad *= grad_output in place (a scalar, or one per row); on the GPU skipped where it is 1."""
    if grad.numel() == 0:
        return grad
    g2 = grad.view(-1, grad.shape[-1]) if grad.dim() else grad.view(1, 1)
    if backend == "cuda" and grad.is_cuda:
        engines.cuda().cross_entropy_scale(g2, go.detach())
    elif backend in GPU_BACKENDS and grad.is_cuda:
        engines.triton("cross_entropy").scale_rows(g2, go.detach().to(torch.float32).contiguous())
    else:
        g2.mul_(go.reshape(-1, 1).to(grad.dtype) if go.numel() > 1 else go.to(grad.dtype))
    return grad


# ------------------------------------------------------------------------------ the fused forward
def forward(x, target, ignore_index, label_smoothing, z_loss, softcap, reduction, backend, want_grad: bool,
            grad_out=None, pending: Optional[list] = None, want_lse: bool = True):
    """(loss in x's dtype, lse fp32/fp64 per row (None where not want_lse, on the CUDA row kernel's path), grad or
    None) for validated (N, V) logits. With want_grad the gradient of the loss (the reduced loss's; the sum's for
    "none") is written in the same pass, into grad_out when given (it may be x: in place). Raises TargetError for a
    target out of range; with `pending` (a list), where ce_row made the gradient, the check is appended to it
    instead (the caller settles it later: the backward; a bad target's loss and gradient rows are NaN meanwhile);
    the Triton kernels' is waited for here (their loss for a bad target is not NaN)."""
    M, V = x.shape
    grad = None
    if want_grad:
        grad = grad_out if grad_out is not None else torch.empty_like(x, memory_format=torch.contiguous_format)
    if backend in GPU_BACKENDS and M and V:
        if backend == "cuda":
            target = cuda_targets(target)
        step = (engines.cuda().cross_entropy_step(x, grad, ignore_index, label_smoothing, z_loss, reduction)
                if backend == "cuda" and grad is not None and softcap is None else None)
        check = TargetCheck(target, V, ignore_index, reduction, backend, start=False)
        if step is not None and check.direct:  # the hot path: four prepared launches, the per-row outputs in one buffer
            # (for "none" the rows are the loss: a tensor of their own, no view of the buffer, which torch.compile's
            # custom op and in-place masking of the loss refuse)
            buf = torch.empty(step.buffer_size(), dtype=torch.float32, device=x.device)
            rows = torch.empty(M, dtype=torch.float32, device=x.device) if reduction == "none" else None
            loss = torch.empty((), dtype=x.dtype, device=x.device) if rows is None else None
            step(x.data_ptr(), target.data_ptr(), grad.data_ptr(), buf.data_ptr(), check.arm(),
                 loss.data_ptr() if rows is None else 0, 0 if rows is None else rows.data_ptr())
            if rows is not None:
                loss = rows.to(x.dtype)
            lse, row_kernel = (buf[:M] if want_lse else None), True
        else:  # no plan holds the rows, the slot is not mapped (its copy goes between the kernels), or Triton's work
            loss, lse, row_kernel = _fused_loss(x, target, check, grad, ignore_index, label_smoothing, z_loss,
                                                softcap, reduction, backend)
        if pending is not None and row_kernel:  # the bad target's loss and gradient rows are NaN meanwhile
            pending.append(check)
        else:
            check.done()
        return loss, lse, grad
    check_targets(target, 0, V, ignore_index)
    st = reference_stats(x, target, 0, softcap)
    lse = lse_of(st)
    if want_grad:
        reference_grad(x, target, lse, grad_scale(target, ignore_index, reduction, accumulator(x.dtype)),
                       ignore_index, label_smoothing, z_loss, softcap, 0, V, out=grad)
    rows = loss_rows(st, target, ignore_index, label_smoothing, z_loss, V)
    return reduce(rows, target, ignore_index, reduction).to(x.dtype), lse, grad


def _fused_loss(x, target, check: TargetCheck, grad, ignore_index, label_smoothing, z_loss, softcap, reduction,
                backend):
    """(loss, lse, whether ce_row ran) by the Triton kernels, or by a ce_row launched alone (after the copy of an
    unmapped slot): forward's path where no CrossEntropyStep runs; the check's kernel is launched here, just before
    the fused kernel's."""
    M = x.shape[0]
    rows = torch.empty(M, dtype=torch.float32, device=x.device)
    lse = torch.empty(M, dtype=torch.float32, device=x.device)
    check.start()
    row_kernel = fused_forward(x, target, check, rows, lse, backend=backend, grad=grad, after_check=True,
                               ignore_index=ignore_index, label_smoothing=label_smoothing, z_loss=z_loss,
                               softcap=softcap)
    if reduction == "none":
        loss = rows.to(x.dtype)
    elif row_kernel:  # one launch: the sum, the scale, the cast (queued to overlap ce_row's last CTAs)
        loss = torch.empty((), dtype=x.dtype, device=x.device)
        engines.cuda().cross_entropy_loss(rows, check.info, loss, reduction == "mean", after_rows=True)
    else:
        loss = (rows.sum() * check.info[0] if reduction == "mean" else rows.sum()).to(x.dtype)
    return loss, lse, row_kernel


# ---------------------------------------------------------------------- torch.compile: custom ops
@torch.library.custom_op("onlinesoftmax::cross_entropy", mutates_args=())
def cross_entropy_op(x: torch.Tensor, target: torch.Tensor, ignore_index: int, label_smoothing: float,
                     z_loss: float, softcap: float, reduction: str, backend: str,
                     want_grad: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    loss, lse, grad = forward(x, target, ignore_index, label_smoothing, z_loss, softcap or None, reduction,
                              backend, want_grad)
    return loss, lse, grad if grad is not None else x.new_empty(0)


@cross_entropy_op.register_fake
def _(x, target, ignore_index, label_smoothing, z_loss, softcap, reduction, backend, want_grad):
    M = x.shape[0]
    loss = x.new_empty((M,) if reduction == "none" else ())
    grad = torch.empty_like(x, memory_format=torch.contiguous_format) if want_grad else x.new_empty(0)
    return loss, x.new_empty(M, dtype=accumulator(x.dtype)), grad


def _setup_context(ctx, inputs, output):
    ctx.save_for_backward(output[2])


def _gradient(ctx, dloss, *_):
    """The custom op's backward, which only torch.compile takes (eager goes through _CrossEntropy): functional, as
    the compiler traces it with fake tensors; Inductor fuses the multiply (one more pass over the gradient)."""
    (grad,) = ctx.saved_tensors
    return grad * (dloss.unsqueeze(-1) if dloss.dim() else dloss), None, None, None, None, None, None, None, None


cross_entropy_op.register_autograd(_gradient, setup_context=_setup_context)


class _CrossEntropy(torch.autograd.Function):
    """Eager autograd (skips the custom-op dispatcher). The gradient is kept on ctx, not saved as a tensor: with
    inplace_grad it is the logits' own storage."""

    @staticmethod
    def forward(ctx, x, target, ignore_index, label_smoothing, z_loss, softcap, reduction, backend, inplace,
                want_lse):
        # the targets' check is settled in the backward: the host does not stall here on the GPU's queue
        ctx.pending = []
        loss, lse, ctx.grad = forward(x, target, ignore_index, label_smoothing, z_loss, softcap, reduction,
                                      backend, True, grad_out=x if inplace else None, pending=ctx.pending,
                                      want_lse=want_lse)
        ctx.backend = backend
        # the backward's launch prepared here, on the forward's thread (the backward runs on autograd's worker)
        ctx.scaler = (engines.cuda().cross_entropy_scaler(ctx.grad)
                      if backend == "cuda" and ctx.grad.is_cuda and ctx.grad.numel() else None)
        if not want_lse:
            return loss
        ctx.set_materialize_grads(False)  # no zeros for lse's gradient (it has none)
        ctx.mark_non_differentiable(lse)
        return loss, lse

    @staticmethod
    def backward(ctx, dloss, *_dlse):
        # the scaling is queued first, then the check (pending only where ce_row made the gradient, NaN on a bad
        # target's row) settled without waiting for the GPU: raised now if the flag is written, else by the
        # thread's next call
        grad = None if dloss is None else handed_grad(ctx, dloss, "cross_entropy's")
        pending, ctx.pending = ctx.pending, []  # settled once, even when a backward runs twice (retain_graph)
        for check in pending:
            check.settle()
        if grad is None:  # not materialised (set_materialize_grads): no gradient reached the loss
            return (None,) * 10
        # detach(): a tensor object of its own (with inplace_grad, the logits' storage), which autograd then
        # takes as .grad without a copy
        return (grad.detach(),) + (None,) * 9


def cross_entropy(logits: torch.Tensor, target: torch.Tensor, *, ignore_index: int = -100,
                  label_smoothing: float = 0.0, z_loss: float = 0.0, reduction: str = "mean", softcap=None,
                  return_lse: bool = False, inplace_grad: bool = False, backend: str = "auto"):
    """F.cross_entropy(logits, target, ignore_index=, label_smoothing=, reduction=) plus z_loss and softcap, the
    gradient written in the forward's pass. logits (N, V) or (V,), fp32/fp16/bf16/fp64; target (N,) or ().
    return_lse: (loss, lse) with lse per row (fp32; fp64 for fp64 logits), without gradient. inplace_grad: the
    gradient is written over the logits (eager only; the logits are garbage afterwards, as with Liger)."""
    check_options(ignore_index, label_smoothing, z_loss, softcap, reduction)
    x, t = check_logits_target(logits, target)
    backend = pick_backend(x, backend)
    softcap = None if softcap is None else float(softcap)
    args = (ignore_index, float(label_smoothing), float(z_loss))
    want_grad = logits.requires_grad and torch.is_grad_enabled()
    if torch.compiler.is_compiling():
        if inplace_grad:
            raise OnlineSoftmaxError("inplace_grad=True is eager-only (torch.compile needs functional ops)")
        loss, lse, _ = cross_entropy_op(x, t, *args, softcap or 0.0, reduction, backend, want_grad)
    elif want_grad:
        if inplace_grad and x.data_ptr() != logits.data_ptr():
            raise OnlineSoftmaxError("inplace_grad=True needs logits with column stride 1")
        out = _CrossEntropy.apply(x, t, *args, softcap, reduction, backend, inplace_grad, return_lse)
        loss, lse = out if return_lse else (out, None)
    else:
        loss, lse, _ = forward(x, t, *args, softcap, reduction, backend, False)
    if logits.dim() == 1 and reduction == "none":
        loss = loss.reshape(())
    if return_lse:
        lse = lse.detach()
        return loss, (lse.reshape(()) if logits.dim() == 1 else lse)
    return loss


# ------------------------------------------------------------------------- linear + cross-entropy
LINEAR_CHUNK_BYTES = 256 * 1024 * 1024  # logits alive at once: one chunk of tokens x V


def linear_chunk(V: int, itemsize: int, rows: int) -> int:
    """Tokens per chunk: LINEAR_CHUNK_BYTES of logits, a multiple of 128 rows (the GEMM tiles), at least 128."""
    return max(128, min(rows, LINEAR_CHUNK_BYTES // max(1, V * itemsize)) // 128 * 128)


def linear_forward(h, w, t, ignore_index, label_smoothing, z_loss, softcap, reduction, backend, chunk,
                   need_h: bool, need_w: bool):
    """(loss, lse, grad_hidden or None, grad_weight or None): per chunk of tokens, logits = h_c @ w.T, then the
    fused kernel writes their gradient in place, then grad_hidden_c = g @ w and grad_weight += g.T @ h_c."""
    BT, V = h.shape[0], w.shape[0]
    acc = accumulator(h.dtype)
    want = need_h or need_w
    opts = dict(ignore_index=ignore_index, label_smoothing=label_smoothing, z_loss=z_loss, softcap=softcap)
    gpu = backend in GPU_BACKENDS and BT > 0
    if gpu:
        if backend == "cuda":
            t = cuda_targets(t)
        check = TargetCheck(t, V, ignore_index, reduction, backend)
        scale = check.info
    else:
        check_targets(t, 0, V, ignore_index)
        scale = grad_scale(t, ignore_index, reduction, acc)
    rows = torch.empty(BT, dtype=acc, device=h.device)
    lse = torch.empty(BT, dtype=acc, device=h.device)
    gh = torch.empty_like(h) if need_h else None
    gw = torch.zeros_like(w, memory_format=torch.contiguous_format) if need_w else None  # scale_rows: unit columns
    for s in range(0, BT, chunk):
        e = min(BT, s + chunk)
        hc, tc = h[s:e], t[s:e]
        logits = hc @ w.t()
        if gpu:
            fused_forward(logits, tc, check, rows[s:e], lse[s:e], backend=backend, grad=logits if want else None,
                          **opts)
        else:
            st = reference_stats(logits, tc, 0, softcap)
            lse[s:e] = lse_of(st)
            rows[s:e] = loss_rows(st, tc, ignore_index, label_smoothing, z_loss, V)
            if want:
                reference_grad(logits, tc, lse[s:e], scale, ignore_index, label_smoothing, z_loss, softcap, 0, V,
                               out=logits)
        if need_h:
            torch.matmul(logits, w, out=gh[s:e])
        if need_w:
            gw.addmm_(logits.t(), hc)
        del logits
    if gpu:
        check.done()
        loss = rows.sum() * scale[0] if reduction == "mean" else rows.sum()
    else:
        loss = reduce(rows, t, ignore_index, reduction)
    return loss.to(h.dtype), lse, gh, gw


class _LinearCrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, h, w, t, ignore_index, label_smoothing, z_loss, softcap, reduction, backend, chunk,
                need_h, need_w):
        loss, lse, ctx.gh, ctx.gw = linear_forward(h, w, t, ignore_index, label_smoothing, z_loss, softcap,
                                                   reduction, backend, chunk, need_h, need_w)
        ctx.backend = backend
        ctx.mark_non_differentiable(lse)
        return loss, lse

    @staticmethod
    def backward(ctx, dloss, _dlse):
        gh, gw, ctx.gh, ctx.gw = ctx.gh, ctx.gw, None, None
        gh = scale_grad(gh, dloss, ctx.backend) if gh is not None else None
        gw = scale_grad(gw, dloss, ctx.backend) if gw is not None else None
        return (gh, gw) + (None,) * 10


@torch.compiler.disable
def linear_cross_entropy(hidden: torch.Tensor, weight: torch.Tensor, target: torch.Tensor, *,
                         ignore_index: int = -100, label_smoothing: float = 0.0, z_loss: float = 0.0,
                         reduction: str = "mean", softcap=None, return_lse: bool = False,
                         chunk_tokens: int | None = None, backend: str = "auto"):
    """cross_entropy(hidden @ weight.T, target, ...) without the (N, V) logits: chunks of tokens whose logits
    (LINEAR_CHUNK_BYTES at most, or chunk_tokens rows) live one at a time, their gradient written in place and
    folded into grad_hidden and grad_weight by two matmuls (grad_weight accumulated in weight's dtype, as Liger).
    hidden (N, H), weight (V, H), the same dtype; reduction "mean" or "sum" (the gradients are made in the
    forward, so "none", whose grad_output is per row, is refused). Eager only (a graph break under
    torch.compile)."""
    check_options(ignore_index, label_smoothing, z_loss, softcap, reduction)
    if reduction == "none":
        raise OnlineSoftmaxError("linear_cross_entropy takes reduction 'mean' or 'sum' (the weight's gradient is "
                                 "summed over tokens in the forward)")
    if not isinstance(weight, torch.Tensor) or weight.dim() != 2:
        raise OnlineSoftmaxError(f"weight must be a 2-D (V, H) tensor, got {getattr(weight, 'shape', weight)!r}")
    h, t = check_logits_target(hidden, target, what="hidden")
    if hidden.dim() != 2:
        raise OnlineSoftmaxError(f"hidden must be (N, H), got shape {tuple(hidden.shape)}")
    if weight.shape[1] != h.shape[1] or weight.dtype != h.dtype or weight.device != h.device:
        raise OnlineSoftmaxError(f"weight {tuple(weight.shape)} {weight.dtype} on {weight.device} does not match "
                                 f"hidden {tuple(h.shape)} {h.dtype} on {h.device} (expected (V, {h.shape[1]}))")
    V = weight.shape[0]
    backend = pick_backend(h, backend)
    chunk = linear_chunk(V, h.element_size(), h.shape[0]) if chunk_tokens is None else chunk_tokens
    if isinstance(chunk, bool) or not isinstance(chunk, int) or chunk < 1:
        raise OnlineSoftmaxError(f"chunk_tokens must be a positive int, got {chunk_tokens!r}")
    softcap = None if softcap is None else float(softcap)
    args = (ignore_index, float(label_smoothing), float(z_loss), softcap, reduction, backend, chunk)
    need_h = hidden.requires_grad and torch.is_grad_enabled()
    need_w = weight.requires_grad and torch.is_grad_enabled()
    if need_h or need_w:
        loss, lse = _LinearCrossEntropy.apply(h, weight, t, *args, need_h, need_w)
    else:
        loss, lse, _, _ = linear_forward(h, weight, t, *args, False, False)
    return (loss, lse.detach()) if return_lse else loss

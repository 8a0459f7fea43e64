"""The checker: a variant's output against the float64 reference, NaN/inf aware.

Rules, elementwise:
- where the reference is NaN the output must be NaN, and nowhere else;
- where the reference is +-inf the output must be the same infinity;
- elsewhere |out - ref| <= atol + rtol * (|ref| + scale), scale and atol from `error_bounds` (scale 0 forward;
  atol a flush-to-zero floor for softmax's probabilities, TOLERANCE's atol for the rest).
The report gives the relative L2 error over finite entries, the max abs error, and the first few
bad indices with got/want. Outputs are poisoned with NaN before every run (see `run_checked`), so
an element the variant never writes is reported as a mismatch.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from ..reference import as_float64, reference
from ..registry import Variant
from .inputs import make_inputs, out_shape

# (rtol, atol) per output dtype: a few ulps of the 16-bit formats (fp32: ~170 ulps, what fp32 arithmetic over long
# rows and approximate exponentials leave), fp32 arithmetic inside.
TOLERANCE = {
    torch.float64: (1e-10, 1e-12),
    torch.float32: (2e-5, 1e-6),
    torch.float16: (2e-3, 1e-5),
    torch.bfloat16: (1.6e-2, 1e-5),
}
# Below these an output may be flushed to zero (the kernels' ex2.approx.ftz and rcp.approx.ftz; bf16 shares fp32's
# exponent) or rounded among the format's subnormals (fp16: 2 of its 2^-24 steps): the absolute floor of the
# probabilities' checks. TOLERANCE's atol (1e-6 / 1e-5) lies above most probabilities of a long row (they average
# 1/N), so an output written as zero there passed.
FLUSH = {
    torch.float64: 2.0**-1000,
    torch.float32: 2.0**-125,
    torch.bfloat16: 2.0**-125,
    torch.float16: 2.0**-23,
}
SHOW_BAD = 5


def serial_rtol(N: int, dtype: torch.dtype) -> float:
    """rtol for a row summed by one thread, term after term (Variant.serial_rows): N - 1 fp32 additions in a chain
    round the sum by up to (N - 1) * 2^-24 of itself (Higham's gamma_{N-1}), where TOLERANCE's rtol holds a tree's
    log2 N levels. At N = 65539, U[-10, 40] rows: a float32 cumsum of the exponentials misses the sum by 340-420
    ulps (20 seeds), past TOLERANCE's 2e-5 (335); the chain's bound is 65538. The additions only: the online V0
    chain also rounds a rescale each time the running max grows (about ln N times in a random row)."""
    return max(TOLERANCE[dtype][0], (N - 1) * 2.0**-24)


def variant_rtol(variant: Variant, N: int, dtype: torch.dtype):
    """The rtol `variant`'s outputs are held to at row length N: serial_rtol for Variant.serial_rows, else None
    (TOLERANCE's)."""
    return serial_rtol(N, dtype) if variant.serial_rows else None


@dataclass
class Report:
    ok: bool
    rel_err: float  # ||out - ref|| / ||ref|| over entries where ref is finite
    max_abs_err: float
    n_bad: int
    n_total: int
    bad: list = field(default_factory=list)  # [(index, got, want)]
    note: str = ""  # set when the case was not compared (refused, or shapes differ)
    skipped: bool = False  # the variant refused the case: nothing ran

    @property
    def message(self) -> str:
        if self.note:
            return self.note
        head = (
            f"{self.n_bad}/{self.n_total} mismatches, rel err {self.rel_err:.2e}, "
            f"max abs err {self.max_abs_err:.2e}"
        )
        shown = "; ".join(f"{idx}: got {g!r} want {w!r}" for idx, g, w in self.bad)
        return f"{head}; first: {shown}" if self.bad else head


def error_bounds(op: str, inputs: tuple, ref: np.ndarray, dtype: torch.dtype, dim: int = -1) -> tuple:
    """(scale, atol) of the checker's rule for `op` along `dim` (its rows: the last), |out - ref| <= atol + rtol *
    (|ref| + scale).

    scale, what absolute errors are measured against beyond |ref| itself. Backward ops cancel: their rounding scales
    with the terms, not with the (possibly tiny) result. Softmax's dx = y * (dy - c), c = sum y * dy, rounds at
    |y| * (max |dy| + |c|) per element (a row-wide max |dy| let an all-zero dx pass for rows of more than a few
    thousand, where y ~ 1/N); log_softmax's dy - exp(y) * sum dy at the row's largest term. A sum's rounding scales
    with sum |x|, not with the sum.

    atol, the absolute error every element is allowed. Softmax's outputs are probabilities, a row of N of them near
    1/N or far below: FLUSH, not TOLERANCE's atol, which let an output written as 0 pass wherever the answer was
    below 1e-6 (fp32) or 1e-5 (16-bit). Its backward: FLUSH times the row's terms (at least 1), as a y flushed on
    the way in leaves y * (dy - c) out. The log ops' outputs are O(1) logarithms, a sum's a number: TOLERANCE's.
    """
    atol = TOLERANCE[dtype][1]
    if op == "sum":
        return np.array([np.abs(as_float64(inputs[0])).sum()]), atol
    if op == "softmax":
        return np.zeros_like(ref), FLUSH[dtype]
    if op == "softmax_backward":
        y, dy = (np.nan_to_num(as_float64(t), nan=0.0, posinf=0.0, neginf=0.0) for t in inputs[:2])
        terms = np.abs(dy).max(axis=dim, keepdims=True) + np.abs((y * dy).sum(axis=dim, keepdims=True))
        return np.abs(y) * terms, FLUSH[dtype] * np.maximum(terms, 1.0)
    if op.endswith("_backward"):
        dy = np.nan_to_num(as_float64(inputs[1]), nan=0.0, posinf=0.0, neginf=0.0)
        finite = np.where(np.isfinite(ref), np.abs(ref), 0.0)
        return np.maximum(finite, np.abs(dy)).max(axis=dim, keepdims=True), atol
    return np.zeros_like(ref), atol


def compare_to_reference(op: str, inputs: tuple, out, dtype: torch.dtype, dim: int = -1, ref=None,
                         rtol=None) -> Report:
    """`out` against the float64 reference of `op` on `inputs` along `dim`, each element's error measured against
    error_bounds' (the checker's rule for every op). `ref`: that reference, where a caller checks several outputs of
    the same inputs and computes it once. rtol: compare's."""
    ref = reference(op, inputs, dim) if ref is None else ref
    return compare(out, ref, dtype, *error_bounds(op, inputs, ref, dtype, dim), rtol=rtol)


def compare(out, ref: np.ndarray, dtype: torch.dtype, scale=None, atol=None, rtol=None) -> Report:
    """`ref` is first rounded to the output dtype: the best answer that dtype can hold (a
    log-softmax of -5e38 is -inf in fp32). atol: the absolute floor (an array broadcast over ref, or a number);
    None: TOLERANCE's. rtol: None, TOLERANCE's (serial_rtol for a serial row)."""
    got = as_float64(out)
    ref = as_float64(torch.from_numpy(np.asarray(ref, dtype=np.float64)).to(dtype))
    default_rtol, default_atol = TOLERANCE[dtype]
    rtol = default_rtol if rtol is None else rtol
    atol = default_atol if atol is None else atol
    if got.shape != ref.shape:
        return Report(False, float("inf"), float("inf"), ref.size, ref.size,
                      note=f"shape {got.shape} != reference shape {ref.shape}")
    scale = np.zeros_like(ref) if scale is None else scale
    ref_nan, got_nan = np.isnan(ref), np.isnan(got)
    ref_inf = np.isinf(ref)
    finite = ~ref_nan & ~ref_inf
    with np.errstate(invalid="ignore", over="ignore"):
        err = np.where(finite & ~got_nan, np.abs(got - ref), 0.0)
        bad = (ref_nan != got_nan) | (ref_inf & (got != ref))
        bad |= finite & ~got_nan & ~(err <= atol + rtol * (np.abs(ref) + scale))
    bad |= finite & got_nan
    ref_norm = np.linalg.norm(np.where(finite, ref, 0.0))
    with np.errstate(invalid="ignore", over="ignore"):
        diff = np.where(finite & ~got_nan, got - ref, 0.0)
        rel = float(np.linalg.norm(diff) / ref_norm) if ref_norm > 0 else float(np.abs(diff).max(initial=0.0))
    if (finite & got_nan).any():
        rel = float("nan")
    idx = np.argwhere(bad)[:SHOW_BAD]
    shown = [(tuple(int(i) for i in ix), float(got[tuple(ix)]), float(ref[tuple(ix)])) for ix in idx]
    n_bad = int(bad.sum())
    return Report(n_bad == 0, rel, float(err.max(initial=0.0)), n_bad, ref.size, shown)


def _synchronize(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def run_checked(variant: Variant, inputs: tuple, out: torch.Tensor) -> torch.Tensor:
    """Poison `out`, run, wait for the device; errors in the launch surface here."""
    out.fill_(float("nan"))
    variant.run(inputs, out)
    _synchronize(variant.device)
    return out


def check_variant(variant: Variant, M: int, N: int, dtype: torch.dtype, kind: str, seed: int) -> Report:
    """Fresh seeded inputs of `kind`, a poisoned output, one run, compared to float64."""
    reason = variant.refuses(M, N, dtype)
    if reason:
        return Report(True, 0.0, 0.0, 0, 0, note=f"skipped: {reason}", skipped=True)
    host_inputs = make_inputs(variant.op, M, N, dtype, kind, seed)
    inputs = tuple(t.to(variant.device) for t in host_inputs)
    out = torch.empty(out_shape(variant.op, M, N), dtype=dtype, device=variant.device)
    run_checked(variant, inputs, out)
    return compare_to_reference(variant.op, host_inputs, out, dtype, rtol=variant_rtol(variant, N, dtype))

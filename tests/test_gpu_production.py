"""Production CUDA softmax kernels on a GPU (marker gpu; skipped without CUDA).

- every production variant (cuda.<op>_<regime>) against the float64 reference with the harness's checker, on
  every input kind, every dtype, shapes on both sides of its thresholds (taken from the plan rules), odd N,
  N = 1, M = 1;
- the public forward / backward (what ops.py calls) on non-contiguous inputs, non-last dims of 3-D and 4-D
  tensors, an unaligned pointer, expanded rows, 1-D inputs, the automatic plans of a few large shapes, a side
  stream, and one tensor beyond 2^31 elements (64-bit offsets).

The instantiations the variant checks use are compiled up front in parallel (same cache entries as the
run-time path), so a cold NVRTC cache costs seconds, not minutes.
"""

import math
import os

import numpy as np
import pytest
import torch

pytestmark = pytest.mark.gpu

if not torch.cuda.is_available():
    pytest.skip("no CUDA GPU", allow_module_level=True)
pytest.importorskip("cuda.core", reason="cuda-core not installed")

from onlinesoftmax import reference as R  # noqa: E402
from onlinesoftmax import registry  # noqa: E402
from onlinesoftmax.harness.check import check_variant, compare_to_reference, run_checked  # noqa: E402
from onlinesoftmax.harness.runs import dtype_name  # noqa: E402
from onlinesoftmax.harness.inputs import kinds_for, make_inputs, out_shape  # noqa: E402
from onlinesoftmax.runtime import nvrtc  # noqa: E402
from onlinesoftmax.runtime.bounded import BoundedCache  # noqa: E402
from onlinesoftmax import opdefs  # noqa: E402
from onlinesoftmax.engines.cuda import plan as P  # noqa: E402
from onlinesoftmax.engines.cuda import run as E  # noqa: E402
from onlinesoftmax.engines.cuda import compiled as K  # noqa: E402
from onlinesoftmax.engines.cuda import variants as V  # noqa: E402
from plan_cases import AUTOMATIC_PLANS, case_id  # noqa: E402

DTYPES = opdefs.GPU_DTYPES


def _shapes(op: str, regime: str, dtype) -> list[tuple[int, int]]:
    """(M, N) on both sides of the regime's thresholds, from the plan rules."""
    W = P.vec_width(dtype)
    wmax = P.warp_max_n(op, dtype, W)
    rcap = P.ROW_MAX_THREADS * P.reg_slots(op, dtype, W) * W
    cap = P.row_capacity(op, dtype, W)
    three = P.ROW_MAX_THREADS * P.FWD_ROW_SLOTS * W  # block_threads: the forward's switch from 3 slots a thread
    return {
        # N = 1, odd N (scalar path), the longest warp row; M = 37 spans several lane groups and a partial CTA
        "warp": [(1, 1), (37, 33), (37, wmax)],
        # just above the warp regime, odd N, the forward's 3-slot CTAs full and one access more (4 slots), registers
        # full, first smem slot
        "block": [(3, wmax + W), (2, wmax + 1), (2, three), (2, three + W), (2, rcap), (1, rcap + W)],
        # a cluster of 2 on a short row (mostly empty CTAs), just above one CTA, N = 262144 (C = 8, or 16 fp32 bwd)
        "cluster": [(2, 100 * W), (2, cap + W), (1, 262144)],
        # one element, odd N, several chunks per row
        "split": [(1, 1), (3, 3001), (2, 70000)],
        # one CTA a row (G = 1), groups of a few CTAs with shared-memory slots, more CTAs than fit at once (70 rows
        # of 140001: the tickets), and fp32 groups of more than 32 CTAs (warp 0 folds two pairs a lane or more)
        "group": [(1, 1), (3, 3001), (2, 70000), (70, 140001), (2, 1200001)],
        # the strided kernels on (M, N) as (outer = M, N, inner = 1): the columns one up to a cluster of 8
        "columns": [(3, 5), (2, 300), (2, 20000), (1, 30000)],
        "strided": [(3, 5), (2, 300), (2, 5000)],
        # (M, N) as (outer = M, N, inner = 1): one lane, 256 threads down N; N = 1, one band, G = 2, G = 8 (fp32
        # forward; 15 backward)
        "bands": [(1, 1), (3, 5), (2, 300), (2, 5000), (2, 30000)],
        # (M, N) as (outer = M, N, inner = 1): a thread per row; N = 1, every CAP and its edge, a partial CTA; then
        # G = 2, 4, 8 threads a row (their edges, an empty last band at N = 129)
        # contiguous aligned rows staged in shared memory: N = 1, a row per CTA's lane group and more, the tensor
        # ending inside an access, every slot count's edge, a partial last CTA, N a multiple of the vector; each lane
        # count (flat_config: forward 4 lanes at N = 1, 5, 17 and 33, 8 at 63, 16 at 127 and 129, 32 from 257;
        # softmax backward 4 at 1 and 5, 8 at 17, 16 at 33, 32 from 63; log-softmax backward 4 at 1, 5 and 17, 8 at
        # 33, 16 at 63, 32 from 127) with a last pass whose rows end inside a warp (37 rows,
        # and 301 = a partial last CTA of 45 or 13 rows); full passes before a partial one, whose forward reads the slots
        # inside every row unmasked (plan.flat_sure), on 4 lanes (64 rows a pass: 70 x 5, 200 x 33) and at the longest row
        # (8 rows a pass: 20 x FLAT_MAX_N)
        "flat": [(3, 1), (37, 5), (37, 17), (37, 33), (37, 63), (301, 127), (131, 129), (70, 257), (19, 1023), (11, 1025),
                 (5, P.FLAT_MAX_N), (9, 8 * W), (70, 5), (200, 33), (20, P.FLAT_MAX_N)],
        "chan": [(3, 1), (37, 19), (300, 32), (2, 8), (2, 9), (5, 33), (3, 40), (7, 41), (2, 80), (3, 81), (2, 129),
                 (37, 150), (2, 161), (2, 256)],
    }[regime]


def _variants():
    return [registry.get(n) for n in V.VARIANT_NAMES]


@pytest.fixture(scope="module", autouse=True)
def _precompile():
    arch = nvrtc.current_arch()
    names = set()
    for v in _variants():
        regime = v.name.rsplit("_", 1)[1]
        for dtype in DTYPES:
            for M, N in _shapes(v.op, regime, dtype):
                try:
                    names.update(P.plan(M, N, dtype, v.op, sms=K.sms(0), regime=regime, flat=True).kernels)
                except P.Unsupported:
                    pass
    K.compile_all(names, arch, batch=1, workers=max(1, min(16, os.cpu_count() or 1)))


def _check_rounded(v, M, N, dtype, kind, seed):
    """check_variant with the reference rounded to the output dtype: log_softmax of "huge" inputs is below
    -dtype max (x - m ~ -2 max), so the exact answer is -inf in the dtype while the float64 reference is finite."""
    host = make_inputs(v.op, M, N, dtype, kind, seed)
    ref = R.reference(v.op, host)
    ref = torch.from_numpy(ref).to(dtype).double().numpy()
    out = torch.empty(out_shape(v.op, M, N), dtype=dtype, device="cuda")
    run_checked(v, tuple(t.cuda() for t in host), out)
    return compare_to_reference(v.op, host, out, dtype, ref=ref)


@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_name)
@pytest.mark.parametrize("name", V.VARIANT_NAMES)
def test_variant_matches_reference(name, dtype, seed):
    failures, ran = _variant_failures(name, dtype, seed)
    assert ran and not failures, "\n".join(failures)


def _abandoning_at_once(monkeypatch, wait=0):
    """Group plans made from here on with a wait of `wait` ns (plan.GROUP_WAIT_NS; 0: every CTA of a group but those
    whose count completes it, or which find it complete at their first look, abandons its share to the kernel after,
    grp_fix). Every plan and entry cache of run.py fresh (the plans, the forced regimes', the exact shapes', the row
    counts', the geometries'), so that nothing made under the planned wait runs. (The first form reset only the
    first two: E.forward and E.backward found the entries an earlier test had bound with 200 us.)"""
    from onlinesoftmax.runtime.bounded import BoundedCache

    monkeypatch.setattr(P, "GROUP_WAIT_NS", wait)
    for name in ("_plans", "_entries", "_fwd_shapes", "_bwd_shapes", "_fwd_rows", "_bwd_rows", "_geometries",
                 "_fwd_entries", "_bwd_entries", "_cast_entries"):
        old = getattr(E, name)
        monkeypatch.setattr(E, name, BoundedCache(old.limit, old.on_drop))


def test_group_shares_abandoned_after_a_short_wait(monkeypatch):
    """A wait of 2 us (plan.GROUP_WAIT_NS): CTAs wait, time out and abandon while others of their group still
    arrive (the timed path and the compare-and-swap racing the arrivals, which a wait of 0 skips), on one stream and
    on four at once; the workspaces read after the calls show shares abandoned and shares not (not every CTA gave
    up), and every output matches float64 (64 rows of 1000003 fp32, softmax and its backward, G = 29 and 55)."""
    _abandoning_at_once(monkeypatch, wait=2000)
    monkeypatch.setattr(P, "GROUP_AUTOMATIC", True)
    g = torch.Generator(device="cuda").manual_seed(17)
    M, N = 64, 1000003
    x = torch.randn(M, N, device="cuda", generator=g) * 3
    y = torch.softmax(x, -1)
    dy = torch.randn(M, N, device="cuda", generator=g)
    failures = []
    for streams in (1, 4):
        for bwd in (False, True):
            p = E.plan_for("softmax_backward", y, dy) if bwd else E.plan_for("softmax", x)
            assert p.regime == "group" and p.wait == 2000, p
            outs = [torch.full_like(x, float("nan")) for _ in range(streams)]
            ss = [torch.cuda.Stream() for _ in range(streams)]
            with E.KeptWorkspaces() as keep:
                for s, out in zip(ss, outs):
                    s.wait_stream(torch.cuda.current_stream())
                    with torch.cuda.stream(s):
                        if bwd:
                            E.backward(y, dy, out, 1, False)
                        else:
                            E.forward(x, out, 1, False)
            torch.cuda.synchronize()
            gone = [P.group_abandoned(ws, M, p.parts) for ws in keep.kept]
            label = f"{'backward' if bwd else 'forward'} on {streams} streams"
            if len(gone) != streams or not 0 < sum(gone) < streams * M * (p.parts - 1):
                failures.append(f"{label}: shares abandoned per call {gone} of {M * p.parts}")
            for out in outs:
                rep = _backward_report(out, y, dy, 1, False, torch.float32) if bwd else \
                    _forward_report(out, x, 1, False, torch.float32)
                if not rep.ok:
                    failures.append(f"{label}: {rep.message}")
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_name)
@pytest.mark.parametrize("name", [n for n in V.VARIANT_NAMES if n.endswith("_group")])
def test_group_shares_abandoned_at_once_match_reference(name, dtype, seed, monkeypatch):
    """The group variants' checks with no wait: the shares written by grp_fix from the inputs and the row's pairs."""
    _abandoning_at_once(monkeypatch)
    failures, ran = _variant_failures(name, dtype, seed)
    assert ran and not failures, "\n".join(failures)


def _without_fix(self, M, a, b, out, x):
    """Known wrong (E._Entry._grouped without its second kernel): the group or bands kernel alone, on a zeroed
    workspace; what its CTAs abandon stays unwritten."""
    ws = torch.zeros(self.plan.workspace_for(M)[0], dtype=torch.float32, device=x.device)
    self.calls[0].rows(P.grid_for(M, self.pers[0]), M, a, b, ws.data_ptr(), out)


def test_check_catches_abandoned_shares_left_unwritten(monkeypatch):
    """Known wrong: with no wait, a group call that never launches grp_fix leaves the abandoned shares as the
    poison: the check fails (and the abandoning happens: the test above is not vacuous)."""
    _abandoning_at_once(monkeypatch)
    monkeypatch.setattr(E._Entry, "_grouped", _without_fix)
    rep = check_variant(registry.get("cuda.softmax_group"), 70, 140001, torch.float32, "normal", 5)
    assert not rep.skipped and not rep.ok, rep.message


def _variant_failures(name, dtype, seed):
    """check_variant of variant `name` on its regime's shapes (_shapes) and every input kind: (failures, checks run)."""
    v = registry.get(name)
    regime = name.rsplit("_", 1)[1]
    failures, ran = [], 0
    for M, N in _shapes(v.op, regime, dtype):
        for kind in kinds_for(v.op):
            if v.op == "log_softmax" and kind == "huge":
                rep = _check_rounded(v, M, N, dtype, kind, seed)
            else:
                rep = check_variant(v, M, N, dtype, kind, seed)
            if rep.skipped:
                failures.append(f"({M}, {N}) refused: {rep.message}")
                continue
            ran += 1
            if not rep.ok:
                failures.append(f"({M}, {N}) {kind}: {rep.message}")
    return failures, ran


# ---- the public entry points ----------------------------------------------------------------------------


def _forward_report(y, x, dim, log, dtype):
    """y against float64's forward of x along `dim`: the checker's rule (compare_to_reference: softmax's absolute
    floor at the flush-to-zero limit, not an atol above the long rows' probabilities)."""
    return compare_to_reference("log_softmax" if log else "softmax", (x,), y, dtype, dim)


def _backward_report(dx, y, dy, dim, log, dtype):
    """dx against float64 from the same y and dy along `dim`, each element's error measured against error_bounds'
    (a scale of the whole tensor's largest |dy| or |dx| let an all-zero softmax dx pass on long rows and non-last
    dims, and a row's largest term hid a missing one of log_softmax's sum terms)."""
    return compare_to_reference("log_softmax_backward" if log else "softmax_backward", (y, dy), dx, dtype, dim)


def _forward_into(failures, label, x, out, dim, log, dtype, x_ref=None):
    """E.forward(x, out) along `dim`, synchronized, then out against float64 (_forward_report) of x, or of x_ref (a
    copy taken before an in-place call); a mismatch's message into failures under `label`."""
    E.forward(x, out, dim, log)
    torch.cuda.synchronize()
    rep = _forward_report(out, x if x_ref is None else x_ref, dim, log, dtype)
    if not rep.ok:
        failures.append(f"{label}: {rep.message}")


def _backward_into(failures, label, y, dy, dx, dim, log, dtype, dy_ref=None):
    """E.backward(y, dy, dx) along `dim`, synchronized, then dx against float64 (_backward_report) from y and dy, or
    dy_ref (a copy taken before an in-place call); a mismatch's message into failures under `label`."""
    E.backward(y, dy, dx, dim, log)
    torch.cuda.synchronize()
    rep = _backward_report(dx, y, dy if dy_ref is None else dy_ref, dim, log, dtype)
    if not rep.ok:
        failures.append(f"{label}: {rep.message}")


def _layouts(dtype):
    g = torch.Generator(device="cuda").manual_seed(0)

    def rnd(*shape):
        return torch.randn(*shape, generator=g, device="cuda").to(dtype)

    base = rnd(6, 37, 40)
    wide = rnd(5, 1025)
    def adversarial(x):
        """Channels (dim 1) with adversarial columns (the chan kernel: per column, not per row): all -inf; -inf
        but for one finite value in the last row (at C = 150, in the last of 8 bands: the bands before it empty);
        a NaN; huge magnitudes; an outlier in the middle row."""
        C = x.shape[1]
        x[0, :, 0, 0] = float("-inf")
        x[0, :, 0, 1] = float("-inf")
        x[0, C - 1, 0, 1] = 2.0
        x[1, 3, 1, 4] = float("nan")
        x[2, :, 1, 2] = 1e4 * torch.sign(x[2, :, 1, 2])
        x[-1, C // 2, 1, 5] = 3e4
        return x

    return [
        ("contiguous, last dim", rnd(4, 5, 64), 2),
        ("3-D dim 0", base, 0),
        ("3-D dim 1", base, 1),
        ("3-D dim 2", base, 2),
        ("transposed, last dim", base.transpose(1, 2), 2),
        ("transposed, dim 1", base.transpose(1, 2), 1),
        ("unaligned pointer x[:, 1:]", wide[:, 1:], 1),
        ("unaligned, long rows", rnd(3, 20001)[:, 1:], 1),
        ("padded rows x[:, :512]", wide[:, :512], 1),
        ("expanded rows (stride 0)", rnd(1, 96).expand(5, 96), 1),
        ("1-D", rnd(300), 0),
        ("N = 1", rnd(7, 1), 1),
        ("dim 0 of size 1", rnd(1, 9), 0),
        ("4-D dim 1", rnd(2, 33, 3, 8), 1),
        ("strided, odd inner", rnd(3, 50, 7), 1),
        ("dim 0 of 70 x 64", rnd(70, 64), 0),
        ("dim 0 of 8192 x 64", rnd(8192, 64), 0),
        ("dim 1 of 4 x 3000 x 16", rnd(4, 3000, 16), 1),
        # adversarial columns through the columns kernel (forward) and bands (backward: few strips, each strided CTA's
        # strip past plan.BANDS_FEW_STRIPS_BYTES), through the strided kernel both ways (C = 1000, 40 strips), and an
        # odd width
        ("long columns, adversarial", adversarial(rnd(3, 4500, 2, 32) * 3), 1),
        ("long columns, adversarial, many strips", adversarial(rnd(40, 1000, 2, 32) * 3), 1),
        ("dim 0 of an odd-width matrix", rnd(1537, 333), 0),
        # the chan kernels (one thread a column, N <= 32): channels of a segmentation map (2-element accesses in
        # 16 bits), an odd inner (one element an access), a partial last CTA, every CAP edge, an unaligned view
        ("channels, C = 19", rnd(3, 19, 17, 30), 1),
        ("channels, C = 21, odd inner", rnd(2, 21, 7, 37), 1),
        ("channels, C = 32", rnd(2, 32, 300), 1),
        ("channels, C = 8", rnd(4, 8, 128), 1),
        ("channels, C = 9, sliced", rnd(5, 16, 9, 64)[:, :9], 1),
        ("dim 0 of 1 x 1000", rnd(1, 1000), 0),
        ("channels, unaligned base", rnd(2 * 19 * 64 + 1)[1:].view(2, 19, 64), 1),
        ("channels, adversarial columns", adversarial(rnd(4, 19, 8, 32) * 3), 1),
        # chan with G = 2, 4, 8 threads a column (N <= 256): band edges, an empty last band (N = 129), odd inner
        ("channels, C = 33", rnd(3, 33, 64), 1),
        ("channels, C = 65, odd inner", rnd(2, 65, 7, 5), 1),
        ("channels, C = 129", rnd(2, 129, 96), 1),
        ("channels, C = 150", rnd(2, 150, 8, 16), 1),
        ("channels, C = 256, sliced", rnd(3, 300, 40)[:, :256], 1),
        ("channels, C = 150, adversarial columns", adversarial(rnd(3, 150, 2, 32) * 3), 1),
    ]


def _tol(dtype):
    from onlinesoftmax.harness.check import TOLERANCE

    return TOLERANCE[dtype]


@pytest.mark.parametrize("log", [False, True], ids=["softmax", "log_softmax"])
@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_name)
def test_forward_backward_layouts(dtype, log):
    """Every layout of _layouts, forward and backward (dy in other strides than y), NaN-poisoned, against float64;
    the channel layouts on the chan kernels both ways and the long adversarial columns on the columns kernel
    forward and bands backward, or the strided kernel both ways, as their comments say (a plan change would
    otherwise test another)."""
    op, bop = ("log_softmax", "log_softmax_backward") if log else ("softmax", "softmax_backward")
    failures = []
    for label, x, dim in _layouts(dtype):
        want = {"long columns, adversarial": ("columns", "bands"),
                "long columns, adversarial, many strips": ("strided", "strided")}.get(
            label, ("chan", "chan") if label.startswith("channels") else None)
        out = torch.full_like(x, float("nan"), memory_format=torch.contiguous_format)
        if want and E.plan_for(op, x, dim=dim, out=out).regime != want[0]:
            failures.append(f"forward {label}: plan {E.plan_for(op, x, dim=dim, out=out).regime}, not {want[0]}")
        _forward_into(failures, f"forward {label}", x, out, dim, log, dtype)
        y = out.clone()
        dy = torch.randn(x.shape, device="cuda").to(dtype)
        if x.dim() > 1:  # strides other than y's: the backward takes each input's own layout
            dy = dy.transpose(0, -1).contiguous().transpose(0, -1)
        dx = torch.full_like(x, float("nan"), memory_format=torch.contiguous_format)
        if want and E.plan_for(bop, y, dy, dim=dim, out=dx).regime != want[1]:
            failures.append(f"backward {label}: plan {E.plan_for(bop, y, dy, dim=dim, out=dx).regime}, not {want[1]}")
        _backward_into(failures, f"backward {label}", y, dy, dx, dim, log, dtype)
    assert not failures, "\n".join(failures)


def _bands_layouts(dtype):
    """The non-last dims of _layouts (but the short channels, whose bands would be mostly empty rows) and a few
    where the bands kernels read 16-byte accesses, several bands a strip, inner dims that do not fill a strip, and
    an odd width with several strips."""
    g = torch.Generator(device="cuda").manual_seed(1)
    more = [("dim 1 of 3 x 2000 x 72", torch.randn(3, 2000, 72, generator=g, device="cuda").to(dtype), 1),
            ("dim 0 of 3001 x 1001", torch.randn(3001, 1001, generator=g, device="cuda").to(dtype), 0),
            ("dim 1 of 2 x 777 x 8 x 33", torch.randn(2, 777, 8, 33, generator=g, device="cuda").to(dtype) * 5, 1)]
    return [(label, x, dim) for label, x, dim in _layouts(dtype) if dim != x.dim() - 1 and x.shape[dim] > 32] + more


@pytest.mark.parametrize("wait", ["planned", "none"])
@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_name)
def test_bands_layouts(dtype, wait, monkeypatch):
    """The bands regime forced (run_regime) on the non-last dims of _bands_layouts, every op, NaN-poisoned outputs
    against float64; with the planned wait, and with none (GROUP_WAIT_NS = 0: a band whose group is not complete
    when its CTA arrives is abandoned to bands_fix, which writes it from the inputs and the pairs; on these small
    grids few are: test_bands_fix_writes_the_same_bits asserts bands abandoned)."""
    if wait == "none":
        _abandoning_at_once(monkeypatch)
    failures = _forced_failures(_bands_layouts(dtype), "bands", dtype)
    assert not failures, "\n".join(failures)


def _forced_failures(layouts, regime: str, dtype) -> list[str]:
    """`regime` forced (run_regime) on each (label, x, dim) of `layouts`, softmax and log-softmax, then their backward
    from the forward's y and a fresh dy, every output NaN-poisoned and checked against float64: the failures."""
    failures = []
    for label, x, dim in layouts:
        for log in (False, True):
            op = "log_softmax" if log else "softmax"
            out = torch.full_like(x, float("nan"), memory_format=torch.contiguous_format)
            E.run_regime(op, (x,), out, dim, regime)
            torch.cuda.synchronize()
            rep = _forward_report(out, x, dim, log, dtype)
            if not rep.ok:
                failures.append(f"{op} {label}: {rep.message}")
            y = out.clone()
            dy = torch.randn(x.shape, device="cuda").to(dtype)
            dx = torch.full_like(x, float("nan"), memory_format=torch.contiguous_format)
            E.run_regime(op + "_backward", (y, dy), dx, dim, regime)
            torch.cuda.synchronize()
            rep = _backward_report(dx, y, dy, dim, log, dtype)
            if not rep.ok:
                failures.append(f"{op}_backward {label}: {rep.message}")
    return failures


def _period_layouts(dtype):
    """Non-last dims for the period kernels (forced): odd widths (a period of V rows) in one chunk and in two, inner
    even but not whole vectors (a period of 2 or 4 rows), a period of ten chunks, N below a period, N = 1, slabs
    ending inside a vector (4097 x 1001, 12289 x 1001, 1537 x 333, 999 x 70: the last one read element by element;
    12289 x 1001 keeps from 12 of its band's periods to all of them, the 16-bit forward in 224 KB), several slabs
    of whole vectors, and adversarial columns: all -inf; -inf but for one finite value in the middle; a NaN; huge
    magnitudes; an outlier."""
    g = torch.Generator(device="cuda").manual_seed(2)

    def rnd(*shape):
        return torch.randn(*shape, generator=g, device="cuda").to(dtype)

    adv = rnd(257, 1001) * 3
    adv[:, 0] = float("-inf")
    adv[:, 1] = float("-inf")
    adv[200, 1] = 2.0
    adv[5, 7] = float("nan")
    adv[:, 9] = 1e4 * torch.sign(adv[:, 9])
    adv[128, 11] = 3e4
    return [("dim 0 of 4097 x 1001", rnd(4097, 1001), 0),
            ("dim 0 of 12289 x 1001", rnd(12289, 1001), 0),  # kept: fp32 24 / 12 of 47, 16-bit 24 (224 KB) / 12 of 24
            ("dim 0 of 1537 x 333", rnd(1537, 333), 0),
            ("dim 0 of 999 x 70", rnd(999, 70), 0),
            ("dim 0 of 300 x 5003", rnd(300, 5003), 0),
            ("dim 0 of 3 x 65", rnd(3, 65), 0),
            ("dim 0 of 1 x 99", rnd(1, 99), 0),
            ("dim 1 of 3 x 40 x 100", rnd(3, 40, 100), 1),
            ("dim 1 of 5 x 64 x 73", rnd(5, 64, 73), 1),
            ("adversarial columns, dim 0 of 257 x 1001", adv, 0)]


@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_name)
def test_period_layouts(dtype):
    """The period regime forced (run_regime) on _period_layouts, every op, NaN-poisoned outputs against float64."""
    failures = _forced_failures(_period_layouts(dtype), "period", dtype)
    assert not failures, "\n".join(failures)


def _period_without_waits(self, M, a, b, out, x):
    """Known wrong (E._Entry._grouped, for the kernel test_check_catches_period_without_barriers builds): the period
    call on a NaN workspace."""
    ws = torch.full((self.plan.workspace_for(M)[0],), float("nan"), device=x.device)
    self.calls[0].rows(P.grid_for(M, self.pers[0]), M, a, b, ws.data_ptr(), out)


def test_check_catches_period_without_barriers(monkeypatch):
    """Known wrong: the period kernel built with OS_GRID_SYNC_NO_WAIT (its grid barriers arrive but do not wait), on
    a NaN workspace: merges and applies read pairs not yet written, the outputs are wrong, and the check says so."""
    no_wait = nvrtc.CompileOptions(defines=("OS_GRID_SYNC_NO_WAIT",))
    monkeypatch.setattr(K, "module", lambda kernel, arch=K.DEFAULT_ARCH: nvrtc.compile_source(
        K.FILE, [kernel], arch=arch, options=no_wait, package=K.SOURCES))
    monkeypatch.setattr(K, "_kernels", BoundedCache(16))
    monkeypatch.setattr(E, "_entries", BoundedCache(16))
    monkeypatch.setattr(E._Entry, "_grouped", _period_without_waits)
    x = torch.randn(1537, 333, device="cuda")
    out = torch.zeros_like(x)
    E.run_regime("softmax", (x,), out, 0, "period")
    torch.cuda.synchronize()
    assert not _forward_report(out, x, 0, False, torch.float32).ok


def test_period_calls_on_several_streams_at_once():
    """Cooperative launches side by side: eight period calls (dim 0 of 4097 x 1001, forward and backward, fp32 and
    bf16) on four streams of their own, queued behind a spin kernel so that they meet on the device, beside rows
    kernels on the same streams. Every CTA of a cooperative launch is resident before any starts, so no barrier
    waits on a CTA that cannot start (bounded by the test's timeout otherwise): NaN-poisoned outputs against
    float64."""
    g = torch.Generator(device="cuda").manual_seed(21)
    streams = [torch.cuda.Stream() for _ in range(4)]
    cases = []
    for i in range(8):
        dtype = (torch.float32, torch.bfloat16)[i % 2]
        x = (torch.randn(4097, 1001, generator=g, device="cuda") * 3).to(dtype)
        dy = torch.randn(4097, 1001, generator=g, device="cuda").to(dtype)
        rows = torch.randn(64, 4096, generator=g, device="cuda")
        y, dx, ry = (torch.full_like(t, float("nan")) for t in (x, x, rows))
        cases.append((x, dy, y, dx, rows, ry, dtype))
    E.forward(cases[0][0], cases[0][2], 0, False)  # compiled and planned before the storm
    E.forward(cases[1][0], cases[1][2], 0, False)
    torch.cuda.synchronize()
    for c in cases:
        c[2].fill_(float("nan"))
    for s in streams:
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            torch.cuda._sleep(2_000_000)
    for i, (x, dy, y, dx, rows, ry, dtype) in enumerate(cases):
        with torch.cuda.stream(streams[i % 4]):
            E.forward(rows, ry, 1, False)
            E.forward(x, y, 0, False)
            E.backward(y, dy, dx, 0, False)
    torch.cuda.synchronize()
    failures = []
    for i, (x, dy, y, dx, rows, ry, dtype) in enumerate(cases):
        assert E.plan_for("softmax", x, dim=0).regime == "period"
        for what, rep in (("forward", _forward_report(y, x, 0, False, dtype)),
                          ("backward", _backward_report(dx, y, dy, 0, False, dtype)),
                          ("rows", _forward_report(ry, rows, 1, False, torch.float32))):
            if not rep.ok:
                failures.append(f"call {i} {what}: {rep.message}")
    assert not failures, "\n".join(failures)


def _bands_abandoning_case(dtype):
    """(32, 3000, 256): 32 x 8 strips (16-bit: 4) of 3 bands forward and 5 backward (2 x 1024 + 952, 4 x 608 + 568
    rows: shared-memory slots, a shorter last band), more CTAs than an H100 or H200 holds at once (16-bit forward:
    384 against 264): the CTAs of a group start apart, and with no wait they abandon (on a small grid every CTA
    arrives within one load of the first, and none is abandoned)."""
    return torch.randn(32, 3000, 256, device="cuda", generator=torch.Generator(device="cuda").manual_seed(3)).to(dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["float32", "bfloat16"])
@pytest.mark.parametrize("op", ["softmax", "log_softmax", "softmax_backward", "log_softmax_backward"])
def test_bands_fix_writes_the_same_bits(op, dtype, monkeypatch):
    """Every op on _bands_abandoning_case with the planned wait (no band abandoned alone on the device), then with
    none (bands abandoned, read back from the workspace, and written by bands_fix from the inputs and the same folded
    pairs): the outputs equal bit for bit, and match float64; then in place (out is x, or dx is dy), equal again."""
    x = _bands_abandoning_case(dtype)
    bwd = op.endswith("backward")
    fwd_op = op.replace("_backward", "")
    ins = (x,)
    if bwd:
        y = torch.empty_like(x)
        E.run_regime(fwd_op, (x,), y, 1)
        ins = (y, torch.randn(x.shape, device="cuda", generator=torch.Generator(device="cuda").manual_seed(4)).to(dtype))

    def call(keep_ws):
        out = torch.full_like(x, float("nan"))
        with E.KeptWorkspaces() as keep:
            E.run_regime(op, ins, out, 1, "bands")
        torch.cuda.synchronize()
        p = E.plan_for(op, *ins, dim=1, regime="bands")
        return out, (P.bands_abandoned(keep.kept[0], p.items) if keep_ws else None)

    planned, _ = call(False)
    _abandoning_at_once(monkeypatch)
    none, gone = call(True)
    assert gone > 0
    assert torch.equal(planned, none)
    rep = (_backward_report(none, *ins, 1, fwd_op == "log_softmax", dtype) if bwd else
           _forward_report(none, x, 1, op == "log_softmax", dtype))
    assert rep.ok, rep.message
    inplace = ins[-1].clone()  # x forward, dy backward: the kernels read it and write their outputs over it
    E.run_regime(op, ins[:-1] + (inplace,), inplace, 1, "bands")
    torch.cuda.synchronize()
    assert torch.equal(inplace, planned)


def test_check_catches_abandoned_bands_left_unwritten(monkeypatch):
    """Known wrong: with no wait, a bands call that never launches bands_fix leaves the abandoned bands as the
    poison, and the check fails."""
    _abandoning_at_once(monkeypatch)
    monkeypatch.setattr(E._Entry, "_grouped", _without_fix)
    x = _bands_abandoning_case(torch.float32)
    out = torch.full_like(x, float("nan"))
    E.run_regime("softmax", (x,), out, 1, "bands")
    torch.cuda.synchronize()
    assert not _forward_report(out, x, 1, False, torch.float32).ok


@pytest.mark.parametrize("shape, dim, dtype, regime, bwd_regime", AUTOMATIC_PLANS, ids=case_id)
def test_automatic_plans(shape, dim, dtype, regime, bwd_regime, monkeypatch):
    """The plans the shapes get (forward and backward: the aligned 16-bit backward of one CTA's rows takes the
    smallest cluster whose registers hold them, the columns forward's backward the strided kernel; a cluster that
    could not be resident would have fallen back to split or strided; groups of CTAs where automatic plans take them,
    plan.GROUP_AUTOMATIC), NaN-poisoned outputs against float64."""
    monkeypatch.setattr(P, "GROUP_AUTOMATIC", True)  # (a shape only this test plans: its cached plan stays its own)
    x = torch.randn(shape, device="cuda").to(dtype) * 4
    for log in (False, True):
        op = "log_softmax" if log else "softmax"
        assert E.plan_for(op, x, dim=dim).regime == regime
        out = torch.full_like(x, float("nan"))  # poisoned: an element left unwritten fails
        E.forward(x, out, dim, log)
        # the harness's checker against float64 (an absolute atol + 2 rtol here let softmax outputs of zero pass)
        rep = _forward_report(out, x, dim, log, dtype)
        assert rep.ok, (shape, dim, dtype, log, rep.message)
        bop = op + "_backward"
        y = out
        dy = torch.randn_like(x)
        assert E.plan_for(bop, y, dy, dim=dim).regime == bwd_regime, (shape, dim, dtype, log)
        dx = torch.full_like(x, float("nan"))
        E.backward(y, dy, dx, dim, log)
        torch.cuda.synchronize()
        rep = _backward_report(dx, y, dy, dim, log, dtype)
        assert rep.ok, (shape, dim, dtype, log, rep.message)


@pytest.mark.parametrize("N", [65537, 100003, 128256, 200003])
@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_name)
def test_long_rows_run_the_rules_plan(dtype, N):
    """Many long rows, odd or not: the plan run (forward and backward) is the rules' own, not the fallback a cluster
    that cannot be resident gets (a kernel's dynamic smem at exactly 48 KiB once went unallowed: the backward of
    100003 and 200003 fell back to split at a third of the speed, with correct values)."""
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    M = P.stable_rows(sms)
    x = torch.randn(M, N, device="cuda", dtype=dtype)
    for op, ins in (("softmax", (x,)), ("softmax_backward", (x, x.clone()))):
        want = P.plan(M, N, dtype, op, vec=N % P.vec_width(dtype) == 0, window=1, sms=sms)
        assert want.regime == "cluster" or (want.regime == "block" and N < 100000), want
        assert E.plan_for(op, *ins).kernels == want.kernels, (op, N, dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["float32", "bfloat16"])
def test_few_row_clusters_in_one_round(dtype):
    """16 rows of 262144, where the few-row rule's clusters of 16 CTAs outnumber those the device holds at once
    (run._one_round): every plan run that is wider than the row needs (all but the fp32 backward's, whose y and dy
    take 16 CTAs) has its clusters resident together (the occupancy query), and the NaN-poisoned outputs of the
    forward and backward of both ops match float64."""
    M, N = 16, 262144
    g = torch.Generator(device="cuda").manual_seed(12)
    x = (torch.randn(M, N, device="cuda", generator=g) * 4).to(dtype)
    dy = torch.randn(M, N, device="cuda", generator=g).to(dtype)
    failures = []
    for log in (False, True):
        op = "log_softmax" if log else "softmax"
        y = torch.full_like(x, float("nan"))
        dx = torch.full_like(x, float("nan"))
        for name, p in ((op, E.plan_for(op, x)), (op + "_backward", E.plan_for(op + "_backward", x, dy))):
            for l in p.launches:
                resident = K.kernel(l.kernel, 0, l.block, l.smem, l.cluster).resident
                wider = l.cluster > P.cluster_size(name, dtype, P.vec_width(dtype), N)
                if wider and (resident is None or resident < l.grid):
                    failures.append(f"{name}: {l.grid} clusters of {l.cluster} ({l.kernel}), {resident} resident")
        _forward_into(failures, op, x, y, 1, log, dtype)
        _backward_into(failures, f"{op} backward", y, dy, dx, 1, log, dtype)
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["float32", "bfloat16"])
def test_torch_compile_fullgraph_runs_the_custom_op(dtype):
    """torch.compile(fullgraph=True) with Inductor on the GPU: Dynamo's graph holds our custom forward op, and the
    loss and each input's gradient (through the ops' registered autograd) match float64: the log-softmax term's and
    the softmax term's on inputs of their own, so that neither gradient hides in the other's (a sum of the two had
    let the softmax term's, the smaller, go unchecked), and weights of one sign, so that the loss's terms do not
    cancel."""
    import onlinesoftmax as osm

    seen = []

    def backend(gm, example_inputs):
        from torch._inductor.compile_fx import compile_fx

        seen.extend(str(n.target) for n in gm.graph.nodes if n.op == "call_function")
        return compile_fx(gm, example_inputs)

    @torch.compile(fullgraph=True, backend=backend)
    def f(a, b, w):
        return (osm.log_softmax(a * 2.0, dim=-1) * w).sum() + (osm.softmax(b, dim=0) * w).sum()

    a, b = ((torch.randn(64, 3000, device="cuda") * 3).to(dtype).requires_grad_() for _ in range(2))
    w = torch.rand(64, 3000, device="cuda").to(dtype)
    loss = f(a, b, w)
    loss.backward()
    assert any("onlinesoftmax.softmax_forward" in t for t in seen), seen
    wd = w.double()
    ya, yb = torch.log_softmax(a.detach().double() * 2.0, -1), torch.softmax(b.detach().double(), 0)
    want = (ya * wd).sum() + (yb * wd).sum()
    terms = (ya.abs() * wd).sum() + (yb * wd).sum()  # what the loss's rounding scales with
    rtol, _ = _tol(dtype)
    assert abs(loss.double().item() - want.item()) <= 2 * rtol * terms.item(), (loss, want)
    # a's gradient is twice log-softmax's backward (a * 2.0: exact), b's softmax's over dim 0; dy is w for both
    rep = _backward_report(a.grad / 2, ya.to(dtype), w, 1, True, dtype)
    assert rep.ok, ("log_softmax", rep.message)
    rep = _backward_report(b.grad, yb.to(dtype), w, 0, False, dtype)
    assert rep.ok, ("softmax over dim 0", rep.message)


def test_side_stream_and_workspace():
    """The split regime's workspace on a side stream: 300001 fp32 exceeds a cluster of 8 (200001, since the window
    path, is a cluster's); NaN-poisoned, against float64."""
    x = torch.randn(4, 300001, device="cuda")
    out = torch.full_like(x, float("nan"))
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())  # x and the poison, written on this stream, before the launch there
    with torch.cuda.stream(s):
        assert E.plan_for("softmax", x).regime == "split"
        E.forward(x, out, 1, False)
    s.synchronize()
    rep = _forward_report(out, x, 1, False, torch.float32)  # outputs near 2e-6: the checker's floor, not an atol
    assert rep.ok, rep.message


def test_split_group_and_period_regimes_in_a_cuda_graph(monkeypatch):
    """The split, group and period regimes captured in a CUDA graph and replayed on new inputs: the split's two
    launches (the second a programmatic one, which starts while the first runs), one row (plan.few_rows_split) and in
    waves (32 rows of 1000007 fp32, groups off: four waves reusing the workspace, from the graph's pool); the group's
    zeroed workspace (a memset node: the tickets and counters start from zero on every replay) and launch (32 rows of
    1000003 fp32, plan.GROUP_AUTOMATIC); the period kernel's cooperative launch alone (the driver's grid barrier,
    nothing zeroed: dim 0 of 4097 x 1001 fp32), forward and backward; NaN-poisoned outputs against float64 on every
    replay."""
    g = torch.Generator(device="cuda").manual_seed(13)
    failures = []
    for M, N, dtype, regime in ((1, 262144, torch.bfloat16, "split"), (32, 1000003, torch.float32, "group"),
                                (32, 1000007, torch.float32, "split"), (4097, 1001, torch.float32, "period")):
        dim = 0 if regime == "period" else 1
        # (lengths no other test plans at these row counts: their cached plans stay as made here)
        monkeypatch.setattr(P, "GROUP_AUTOMATIC", regime == "group")
        x = torch.randn(M, N, device="cuda", dtype=dtype)
        dy = torch.randn(M, N, device="cuda", dtype=dtype)
        y, dx = torch.empty_like(x), torch.empty_like(x)
        p, bp = E.plan_for("log_softmax", x, dim=dim), E.plan_for("log_softmax_backward", x, dy, dim=dim)
        if (p.regime, bp.regime) != (regime, regime) or (M > 1 and regime == "split" and not (p.wave and bp.wave)):
            failures.append(f"({M}, {N}): plans {p.regime} wave {p.wave}, {bp.regime} wave {bp.wave}")
        E.forward(x, y, dim, True)  # compiled, planned and cached before the capture
        E.backward(y, dy, dx, dim, True)
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            E.forward(x, y, dim, True)
            E.backward(y, dy, dx, dim, True)
        for _ in range(2):
            x.copy_(torch.randn(M, N, device="cuda", generator=g) * 3)
            dy.copy_(torch.randn(M, N, device="cuda", generator=g))
            y.fill_(float("nan"))
            dx.fill_(float("nan"))
            graph.replay()
            torch.cuda.synchronize()
            rep = _forward_report(y, x, dim, True, dtype)
            if not rep.ok:
                failures.append(f"({M}, {N}) forward: {rep.message}")
            rep = _backward_report(dx, y, dy, dim, True, dtype)
            if not rep.ok:
                failures.append(f"({M}, {N}) backward: {rep.message}")
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize("wait", ["planned", "none"])
def test_split_and_group_regimes_in_place(wait, monkeypatch):
    """The split and group regimes in place (out is x forward, dx is dy backward). The split's second kernel, a
    programmatic launch, reads its first inputs while the first kernel may still read the row, and writes only after
    the wait: one row (plan.few_rows_split), a row through the window (an odd N, 2 elements into the buffer). A
    group's CTAs write only after every CTA of the row has read its share: 32 rows of 1000003 fp32, aligned and
    through the window (3 elements in; plan.GROUP_AUTOMATIC); with no wait ("none"), the shares abandoned are
    written by grp_fix from inputs no CTA has written. Against float64 of copies taken before."""
    monkeypatch.setattr(P, "GROUP_AUTOMATIC", True)
    if wait == "none":
        _abandoning_at_once(monkeypatch)
    g = torch.Generator(device="cuda").manual_seed(14)
    failures = []
    for M, N, dtype, off, regime in ((1, 262144, torch.bfloat16, 0, "split"), (2, 262143, torch.float16, 2, "split"),
                                     (32, 1000003, torch.float32, 0, "group"), (32, 1000003, torch.float32, 3, "group")):
        for log in (False, True):
            op = "log_softmax" if log else "softmax"
            x = _at_offset(M, N, dtype, off, g)
            x0 = x.clone()
            p = E.plan_for(op, x, dim=1, out=x)
            if p.regime != regime or p.W == 1:
                failures.append(f"{op} ({M}, {N}): plan {p.regime} W={p.W}")
            _forward_into(failures, f"{op} ({M}, {N})", x, x, 1, log, dtype, x_ref=x0)
            y, dy = x, _at_offset(M, N, dtype, off, g)
            dy0 = dy.clone()
            _backward_into(failures, f"{op} backward ({M}, {N})", y, dy, dy, 1, log, dtype, dy_ref=dy0)
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["float32", "bfloat16"])
def test_split_waves(dtype, monkeypatch):
    """Split rows in waves (plan.split_wave: the launches go wave by wave, each wave's rows at their own pointers and
    the workspace reused), with the L2 budget cut to 4 MB so that a few rows make the waves: rows of 1000013 (the
    window path, from an offset of 3 elements) and of 1000016 (aligned), lengths no other test plans (the plans made
    here keep the cut budget, and no groups), forward and backward, the fewest waves both take and a short last one;
    NaN-poisoned outputs against float64."""
    monkeypatch.setattr(P, "SPLIT_L2_BUDGET", 4 << 20)
    monkeypatch.setattr(P, "GROUP_AUTOMATIC", False)
    g = torch.Generator(device="cuda").manual_seed(11)
    failures = []
    for N, off in ((1000013, 3), (1000016, 0)):
        for log in (False, True):
            op = "log_softmax" if log else "softmax"
            M = P.SPLIT_MIN_WAVES * max(P.split_wave(o, dtype, 1 << 20, N, 132) for o in (op, op + "_backward")) + 1
            x = _at_offset(M, N, dtype, off, g)
            y = _out_at(x, off)
            p = E.plan_for(op, x, dim=1, out=y)
            if p.regime != "split" or not 0 < p.wave < M or p.W == 1:
                failures.append(f"{op} ({M}, {N}): plan {p.regime} wave {p.wave} W={p.W}")
            _forward_into(failures, f"{op} ({M}, {N})", x, y, 1, log, dtype)
            dy = _at_offset(M, N, dtype, off, g)
            dx = _out_at(x, off)
            bp = E.plan_for(op + "_backward", y, dy, dim=1, out=dx)
            if bp.regime != "split" or not 0 < bp.wave < M or bp.W == 1:
                failures.append(f"{op} backward ({M}, {N}): plan {bp.regime} wave {bp.wave} W={bp.W}")
            _backward_into(failures, f"{op} backward ({M}, {N})", y, dy, dx, 1, log, dtype)
    assert not failures, "\n".join(failures)


def test_beyond_2_31_elements():
    """Row offsets in 64 bits: 2^21 + 3 rows of 1024 bf16 (just over 2^31 elements); the last rows checked."""
    M, N = (1 << 21) + 3, 1024
    need = 2 * M * N * 2
    free, _ = torch.cuda.mem_get_info()
    if free < need + (2 << 30):
        pytest.skip(f"needs {need >> 30} GiB free")
    x = torch.empty(M, N, device="cuda", dtype=torch.bfloat16)
    x[-8:].normal_()
    x[:-8].fill_(1.0)
    out = torch.full_like(x, float("nan"))  # poisoned: the rows checked must have been written
    E.forward(x, out, 1, False)
    want = torch.softmax(x[-8:].double(), 1)
    torch.testing.assert_close(out[-8:].double(), want.to(torch.bfloat16).double(), rtol=1.6e-2, atol=1e-5)
    assert torch.all(out[:4].float() == 1.0 / N)
    del x, out
    torch.cuda.empty_cache()


# ---- the window path: any N, rows starting anywhere, 16-byte loads --------------------------------------------


def _window_shapes(op, dtype):
    """(M, N, regime) with N not a multiple of the vector, on both sides of the window rules' capacities (the rules
    size for N + W - 1): the warp regime, one CTA in registers, with shared-memory slots, a cluster, few rows."""
    W = P.vec_width(dtype)
    wmax = P.warp_max_n(op, dtype, W)
    rcap = P.ROW_MAX_THREADS * P.reg_slots(op, dtype, W) * W
    cap = P.row_capacity(op, dtype, W)
    many = 140  # more rows than SMs: no few-rows rule
    three = P.ROW_MAX_THREADS * P.FWD_ROW_SLOTS * W  # block_threads: the forward's switch from 3 slots a thread
    beyond = P.max_cluster(op, dtype) * cap  # past the widest cluster: split, through the window where P = 1
    # ... and rows enough that the groups of CTAs fill the chip (2 an SM): the group regime where P = 1
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    groups = -(-P.GROUP_CTAS_PER_SM * sms // P.group_config(op, dtype, W, beyond + 3 + W - 1)[0])
    return [(37, 1, "warp"), (37, 32, "warp"), (37, 33, "warp"), (37, 129, "warp"), (37, 199, "warp"),
            (9, wmax - W + 1, "warp"), (5, wmax - W + 2, "block"),
            (many, three - W + 1, "block"), (many, three - W + 2, "block"), (many, rcap - W + 1, "block"), (many, rcap + 3, "block" if cap > rcap else "cluster"),
            (many, cap - W + 1, "block"), (many, cap + 1, "cluster"), (2, 2 * cap - W + 1, "cluster"),
            (1, 131071, "cluster"), (300, 50257, None), (3, beyond + 3, "split"), (2, 1000003, "split"),
            (groups, beyond + 3, "group")]


def _split_path(p: int, V: int) -> tuple:
    """(W, window) of a split plan where the row kernels would take window p: the window path only where the out rows
    start as the inputs' (P = 1); the scalar kernels for the others (out rows or dy elsewhere)."""
    return (V, 1) if p == 1 else (1, 0)


def _at_offset(M, N, dtype, offset, g):
    """An (M, N) contiguous tensor starting `offset` elements into its allocation (the last row's tail ends the
    allocation: a read beside the row beyond it would be caught by compute-sanitizer)."""
    buf = torch.randn(M * N + offset, generator=g, device="cuda").to(dtype) * 3
    return buf[offset:].view(M, N)


def _out_at(x, offset):
    buf = torch.full((x.numel() + offset,), float("nan"), dtype=x.dtype, device=x.device)
    return buf[offset:].view(x.shape)


def _dy_like(x, kind, x_off, g):
    """dy for the window tests: "alike" starts as y (x_off); "after" and "before" one element after and V - 1 elements
    after it (dy's rows one element further into their first access, or V - 1: dy access i - 1 and i realigned to
    y's i); "stride" rows N + 1 apart, two elements after y's first: each row's distance from y's its own."""
    M, N = x.shape
    V = P.vec_width(x.dtype)
    if kind == "stride":
        return _at_offset(M, N + 1, x.dtype, x_off + 2, g)[:, :N]
    return _at_offset(M, N, x.dtype, x_off + {"alike": 0, "after": 1, "before": V - 1}[kind], g)


@pytest.mark.parametrize("log", [False, True], ids=["softmax", "log_softmax"])
@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_name)
def test_window_path_any_n_any_offset(dtype, log, monkeypatch):
    """Odd N and unaligned rows take the 16-byte window kernels (P = 1: out rows start as the inputs'; P = 2: out
    rows elsewhere, before and after them: realigned 16-byte stores), forward and backward, every regime (one CTA,
    shared-memory slots, clusters: the accesses a warp's last lane takes from the next warp or CTA; split rows past
    the widest cluster, P = 1 only; rows enough for groups of CTAs, P = 1 only, the split where the out rows start
    elsewhere), but the
    forward's short rows (plan.scalar_short_rows: the scalar warp kernel); NaN-poisoned outputs against float64. A
    dy that starts differently from y (after it, before it, rows at other distances) takes dy's own window realigned
    to y's (P = 3) where the out rows start as y's, aligned y included (fp32: where plan.dy_window picks it), and the
    scalar path otherwise: beyond one CTA's registers a cluster of CTAs holding the row in registers (asserted at
    300 x 50257, a padded vocabulary's gradient). Automatic plans take groups here (plan.GROUP_AUTOMATIC)."""
    monkeypatch.setattr(P, "GROUP_AUTOMATIC", True)
    g = torch.Generator(device="cuda").manual_seed(7)
    op = "log_softmax" if log else "softmax"
    bop = op + "_backward"
    V = P.vec_width(dtype)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    failures = []
    for M, N, regime in _window_shapes(op, dtype):
        for x_off, o_off, want_p in ((0, 0, 1), (3, 3, 1), (1, 0, 2), (0, 5, 2)):
            aligned = N % V == 0 and x_off == o_off == 0  # the forward's aligned path: only dy unlike y is new here
            x = _at_offset(M, N, dtype, x_off, g)
            out = _out_at(x, o_off)
            p = E.plan_for(op, x, dim=1, out=out)
            want = (1, 0) if P.scalar_short_rows(op, N, V, False, want_p) else (V, 0 if aligned else want_p)
            if regime in ("split", "group") and not aligned:
                want = _split_path(want_p, V)
            expect = "split" if regime == "group" and want_p != 1 else regime  # groups: out rows as the inputs'
            if (p.W, p.window) != want or (regime and not aligned and p.regime != expect):
                failures.append(f"({M}, {N}) offsets {x_off}/{o_off}: plan {p.regime} W={p.W} P={p.window}")
                continue
            _forward_into(failures, f"forward ({M}, {N}) offsets {x_off}/{o_off}", x, out, 1, log, dtype)
            y = _out_at(x, x_off)  # y starts as x
            y.copy_(out)
            dy_window = x_off == o_off and P.dy_window(bop, dtype, M, N, sms)  # dy unlike y: its own window, or scalar
            for kind in ("after", "before", "stride") if aligned else ("alike", "after", "before", "stride"):
                want_bp = want_p if kind == "alike" else 3 if dy_window else 0
                dy = _dy_like(x, kind, x_off, g)
                dx = _out_at(x, o_off)
                bp = E.plan_for(bop, y, dy, dim=1, out=dx)
                if bp.regime == "split":
                    want_bp = _split_path(want_bp, V)[1]
                if bp.window != want_bp or (want_bp and bp.W == 1) or (N == 50257 and bp.regime != "cluster"):
                    failures.append(f"({M}, {N}) backward offsets {x_off}/{kind}/{o_off}: plan {bp.regime} "
                                    f"W={bp.W} P={bp.window}")
                _backward_into(failures, f"backward ({M}, {N}) offsets {x_off}/{kind}/{o_off}", y, dy, dx, 1, log,
                               dtype)
    assert not failures, "\n".join(failures)


def test_fp32_log_softmax_backward_realigning_windows_past_6_slots():
    """plan.REALIGN_WIDE_SLOTS: an fp32 log-softmax backward row that 8 CTAs hold in 7 shared-memory slots each (N from
    163838 to 180221 on the window path) runs on 16 CTAs where its out rows (P = 2: y and dy sliced alike) or dy
    (P = 3: y fresh) start elsewhere than y's, whose static exchange left one CTA of 8 an SM; at 6 slots on 8.
    Many rows (not the few-rows rule), NaN-poisoned outputs, adversarial rows of y (an outlier, all -inf but one,
    all -inf, a NaN; -inf but for a NaN with its sign bit set, a +inf or a -0.0: rows alive whose flag's bits
    (bwd_acc) read as a subnormal, -0.0 and +inf), against float64."""
    g = torch.Generator(device="cuda").manual_seed(11)
    M = 24  # x 8 CTAs > the SMs
    failures = []
    for N, ctas, sslots in ((163837, 8, 6), (165001, 16, None), (180221, 16, None)):
        x = torch.randn(M, N, generator=g, device="cuda") * 3
        x[0, 7] = 1e4
        y_ref = torch.log_softmax(x, 1)
        y_ref[1] = float("-inf")
        y_ref[1, N // 2] = 0.0
        y_ref[2] = float("-inf")
        y_ref[3, 11] = float("nan")
        y_ref[4:7] = float("-inf")
        y_ref.view(torch.int32)[4, N - 2] = -0x400000  # a NaN, bits 0xffc00000
        y_ref[5, 3] = float("inf")
        y_ref[6, N // 3] = -0.0
        for window in (2, 3):
            y = _at_offset(M, N + 1, torch.float32, 0, g)[:, 1:] if window == 2 else torch.empty_like(y_ref)
            y.copy_(y_ref)
            dy = _at_offset(M, N + 1, torch.float32, 0, g)[:, 1:]
            out = torch.full((M, N), float("nan"), device="cuda")
            p = E.plan_for("log_softmax_backward", y, dy, dim=1, out=out)
            (l,) = p.launches
            if (p.window, l.cluster) != (window, ctas) or (sslots and int(l.kernel.split(",")[5]) != sslots):
                failures.append(f"N = {N}, P = {window}: plan {l.kernel} on {l.cluster} CTAs")
                continue
            E.backward(y, dy, out, 1, True)
            torch.cuda.synchronize()
            ins = (y.cpu(), dy.cpu())
            ref = R.log_softmax_backward(*ins)
            rep = compare_to_reference("log_softmax_backward", ins, out, torch.float32, ref=ref)
            if not rep.ok:
                failures.append(f"N = {N}, P = {window}: {rep.message}")
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["float16", "bfloat16"])
def test_log_softmax_16bit_rows_near_one_hot(dtype):
    """16-bit log-softmax outputs take log d through lg2.approx (production.cuh's os_log_approx): rows whose largest
    element leaves d - 1 between about 1e-8 and 1e-3 (their largest log-probability just below 0) in every forward
    regime (flat, warp, block, block with shared memory, a cluster, few rows; over dim 1 of (B, N, inner): strided,
    scalar and vector, and chan), NaN-poisoned outputs: no output above 0, and each within the checker's tolerance
    of float64."""
    g = torch.Generator(device="cuda").manual_seed(13)
    failures, regimes = [], set()
    # (M, N, B): M rows of N; B: the same rows as B x (N, M / B), the softmax over dim 1
    for M, N, B in ((20000, 129, 0), (600, 1000, 0), (300, 4097, 0), (200, 40000, 0), (140, 131071, 0),
                    (8, 131071, 0), (300, 4097, 1), (8192, 1000, 2), (2048, 150, 8)):
        x = torch.randn(M, N, generator=g, device="cuda") * 0.5
        hot = torch.randint(0, N, (M,), generator=g, device="cuda")
        lift = math.log(N) + 7 + 11 * torch.rand(M, generator=g, device="cuda")  # exp(-lift) * N in 1e-8 .. 1e-3
        x[torch.arange(M, device="cuda"), hot] += lift
        x = x.to(dtype)
        if B:
            x = x.view(B, M // B, N).transpose(1, 2).contiguous()
        out = torch.full_like(x, float("nan"))
        regime = E.plan_for("log_softmax", x, dim=1, out=out).regime
        regimes.add(regime)
        E.forward(x, out, 1, True)
        torch.cuda.synchronize()
        label = f"{tuple(x.shape)} ({regime})"
        if not (out <= 0).all():
            failures.append(f"{label}: {int((out > 0).sum())} outputs above 0, {int(out.isnan().sum())} NaN")
        rep = _forward_report(out, x, 1, True, dtype)
        if not rep.ok:
            failures.append(f"{label}: {rep.message}")
    assert not failures, "\n".join(failures)
    assert regimes == {"flat", "warp", "block", "cluster", "strided", "chan"}, regimes


# ---- the fused cast: 16-bit in, float32 out (softmax(x, dim, dtype=torch.float32)) ------------------------------


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["float16", "bfloat16"])
def test_fused_cast_to_float32(dtype):
    """forward_cast writes float32 from 16-bit data in one pass where a plan fuses it (kernel names ending in the
    DTO = 0 argument), and casts first elsewhere (few rows beyond the clusters, a non-last dim, an unaligned
    input); every output against float64 with float32's tolerance, NaN-poisoned. Through the public op, the
    gradient comes back in x's dtype and matches float64's from the same y and dy (torch's 16-bit gradient within
    2e-2 had let an all-zero softmax gradient pass: 99% of its elements are below that)."""
    import onlinesoftmax

    g = torch.Generator(device="cuda").manual_seed(11)
    cases = [((4096, 128), -1, True), ((300, 50257), -1, True), ((140, 4097), -1, True), ((2, 131071), -1, True),
             ((1, (1 << 21) + 1), -1, False), ((64, 96, 33), 1, False), (None, -1, False)]
    failures = []
    for shape, dim, fused in cases:
        x = _at_offset(37, 1000, dtype, 1, g) if shape is None else \
            (torch.randn(shape, generator=g, device="cuda") * 4).to(dtype)
        d = dim % x.dim()
        for log in (False, True):
            op = "log_softmax" if log else "softmax"
            out = torch.full(x.shape, float("nan"), device="cuda")
            entry = E._cast_entry(op, x, out, d)
            is_fused = entry is not E._CAST_FIRST
            if is_fused != fused or (fused and not all(k.endswith(",0>") for k in entry.plan.kernels)):
                failures.append(f"{tuple(x.shape)} dim {d} {op}: fused {is_fused}, expected {fused}")
            E.forward_cast(x, out, d, log)
            torch.cuda.synchronize()
            rep = _forward_report(out, x, d, log, torch.float32)
            if not rep.ok:
                failures.append(f"{tuple(x.shape)} dim {d} {op}: {rep.message}")
    assert not failures, "\n".join(failures)
    x = (torch.randn(64, 1001, generator=g, device="cuda") * 3).to(dtype).requires_grad_()
    for f, tf, log in ((onlinesoftmax.softmax, torch.softmax, False), (onlinesoftmax.log_softmax, torch.log_softmax,
                                                                           True)):
        y = f(x, -1, dtype=torch.float32)
        assert y.dtype == torch.float32
        dy = torch.randn_like(y)
        (gx,) = torch.autograd.grad(y, x, dy)
        assert gx.dtype == dtype
        torch.testing.assert_close(y, tf(x, -1, dtype=torch.float32), rtol=1e-5, atol=1e-6)
        rep = _backward_report(gx, y.detach(), dy, 1, log, dtype)
        assert rep.ok, (dtype, log, rep.message)


def _poisoned_pool(nbytes: int) -> None:
    """Leave NaN in the caching allocator's next block of this size (all bits set: NaN in fp32, fp16 and bf16; the
    same byte count, so the same block): a fresh output the op forgets to write shows NaN, not the zeros or old
    results that happened to be there."""
    torch.full((nbytes,), 255, dtype=torch.uint8, device="cuda")


def test_public_hot_path_decides_as_resolve(monkeypatch):
    """osm.softmax / log_softmax skip resolve() for plain eager calls on CUDA tensors (ops/softmax.py _apply): those
    must give what the full path gives (the float64 reference, a contiguous output in the input's dtype), and every
    other call (a cast, grad, a dim that is not an int, 0-d, empty, float64, another backend, a subclass, a bad dim)
    must still go through resolve and get its answer or its error."""
    from onlinesoftmax.errors import ArgumentTypeError, DimError
    from onlinesoftmax.ops import softmax as ops

    seen = []
    real = ops.resolve
    monkeypatch.setattr(ops, "resolve", lambda *a: seen.append(a) or real(*a))
    g = torch.Generator(device="cuda").manual_seed(12)
    failures = []
    for dtype in DTYPES:
        base = (torch.randn(70, 1001, generator=g, device="cuda") * 4).to(dtype)
        base[3] = float("-inf")
        base[5, 7] = float("nan")
        base[9, :-1] = float("-inf")
        layouts = (("rows", base), ("sliced", base[:, 1:]), ("transposed", base.t()), ("3-d", base.view(7, 10, 1001)))
        for label, x in layouts:
            for dim in (-1, 0, 1):
                for backend in ("auto", "cuda"):
                    for log in (False, True):
                        seen.clear()
                        _poisoned_pool(x.numel() * x.element_size())
                        y = (ops.log_softmax if log else ops.softmax)(x, dim, backend=backend)
                        torch.cuda.synchronize()
                        d = dim % x.dim()
                        rep = _forward_report(y, x, d, log, dtype)
                        ok = (rep.ok and not seen and y.dtype == dtype and y.is_contiguous()
                              and y.stride() == torch.empty(x.shape).stride())
                        if not ok:
                            failures.append(f"{label} {dtype} dim {dim} {backend} log={log}: resolve calls "
                                            f"{len(seen)}, {rep.message}, strides {y.stride()}")
    assert not failures, "\n".join(failures)

    x = torch.randn(8, 33, device="cuda")

    class Sub(torch.Tensor):
        pass

    slow = [(x, 1, {"dtype": torch.float32}), (x.clone().requires_grad_(), 1, {}), (x, np.int64(1), {}),
            (x[0, 0], 0, {}), (x[:0], 1, {}), (x.double(), 1, {}), (x.as_subclass(Sub), 1, {}),
            (x, 1, {"backend": "reference"})]
    for t, dim, kw in slow:
        seen.clear()
        y = ops.softmax(t, dim, **kw)
        assert len(seen) == 1, (tuple(t.shape), t.dtype, dim, kw)
        torch.testing.assert_close(y.double(), torch.softmax(t.detach().double(), dim), rtol=1e-5, atol=1e-6,
                                   check_dtype=False)
    for dim, err in ((True, ArgumentTypeError), (2, DimError), (-3, DimError), (1.0, ArgumentTypeError)):
        seen.clear()
        with pytest.raises(err):
            ops.softmax(x, dim)
        assert len(seen) == 1

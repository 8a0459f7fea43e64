"""The Triton kernels on CPU tensors under TRITON_INTERPRET=1: every op, every regime, every dtype.

The interpreter runs a kernel's programs one after another in Python, so shapes stay tiny and the
regime knobs are forced small (FORCE_CHUNK: 16-element chunks for "online" and "split";
FORCE_PROGRAMS: a grid of 2, so the split schedule interleaves reads and writes). Every case is
checked against the float64 reference, through the harness where possible.
"""

import os

import numpy as np
import pytest
import torch

# triton.jit decides when a kernel is defined whether it is interpreted, once per process: these
# tests run in a process of their own (`make test` starts it with TRITON_INTERPRET=1; the main
# session leaves this file out, see conftest.py), never beside the compiled kernels.
if os.environ.get("TRITON_INTERPRET") != "1":
    pytest.skip("run with TRITON_INTERPRET=1 in a process of its own", allow_module_level=True)
pytest.importorskip("triton")

# The interpreter computes in NumPy, which warns on every inf - inf and overflow the tests provoke.
pytestmark = [pytest.mark.filterwarnings("ignore::RuntimeWarning"),
              pytest.mark.filterwarnings("ignore::DeprecationWarning")]  # NumPy, in the interpreter

from onlinesoftmax import reference  # noqa: E402
from onlinesoftmax.errors import OnlineSoftmaxError  # noqa: E402
from onlinesoftmax.harness.check import check_variant, compare_to_reference  # noqa: E402
from onlinesoftmax.harness.inputs import kinds_for  # noqa: E402
from onlinesoftmax.intmath import pow2floor  # noqa: E402
from onlinesoftmax.registry import get  # noqa: E402
from onlinesoftmax.engines.triton import variants as tv  # noqa: E402  (registers the triton.* variants)
from onlinesoftmax.engines.triton import softmax_rules as R  # noqa: E402
from window_cases import check_padded_and_in_place, expected_windows, record_windows  # noqa: E402

K = tv.kernels()

OPS = ("softmax", "log_softmax", "softmax_backward", "log_softmax_backward")
REGIMES = ("rows", "online", "split")
F32, F16, BF16 = torch.float32, torch.float16, torch.bfloat16
CHUNK = 16


@pytest.fixture(autouse=True)
def small_knobs(monkeypatch):
    """Tiny chunks and a grid of 2 programs, so a 21-column row spans two chunks (one a tail)."""
    monkeypatch.setattr(R, "FORCE_CHUNK", CHUNK)
    monkeypatch.setattr(R, "FORCE_PROGRAMS", 2)


def _variant(op, regime):
    return get(f"triton.{op}_{regime}")


def _run_direct(op, regime, inputs, dtype):
    """Run a variant on given inputs; the report against float64, as the harness computes it."""
    variant = _variant(op, regime)
    out = torch.full(inputs[0].shape, float("nan"), dtype=dtype)
    variant.run(inputs, out)
    return compare_to_reference(op, inputs, out, dtype), out


def _special_rows(N, dtype, seed=0):
    """One row per hazard, each placed across chunk boundaries (chunks of CHUNK columns)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(12, N, generator=g, dtype=torch.float64) * 3
    big = float(torch.finfo(dtype).max)
    x[0] = float("-inf")  # masked row
    x[1, N - 1] = float("nan")  # NaN in the last chunk
    x[2, 0] = float("nan")  # NaN in the first lane of the first chunk
    x[3] = float("-inf")
    x[3, N - 1] = 0.75  # one finite value, in the tail of the last chunk
    x[4] = float("-inf")
    x[4, 0] = -2.0  # one finite value, first
    x[5, N // 2] = float("inf")  # +inf among finite values
    x[6] = float("-inf")
    x[6, 1] = float("inf")  # +inf alone among -inf
    x[7] = big * (torch.rand(N, generator=g, dtype=torch.float64) * 2 - 1)  # near +-max
    x[8] = big  # all at the max
    x[9, : N // 2] = float("-inf")  # first chunks empty, the max later
    x[10] = x[10] + 100.0
    # row 11: plain N(0, 9)
    return x.to(dtype)


def _inputs(op, x):
    if op in ("softmax", "log_softmax"):
        return (x,)
    y = reference.log_softmax(x) if op.startswith("log") else reference.softmax(x)
    y = torch.from_numpy(y).to(x.dtype)
    dy = torch.randn(x.shape, generator=torch.Generator().manual_seed(1)).to(x.dtype)
    return (y, dy)


# ------------------------------------------------------------------------------ registration
def test_variants_registered():
    names = [f"triton.{op}_{regime}" for op in OPS for regime in REGIMES]
    for name in names:
        v = get(name)
        assert v.backend == "triton" and v.device == "cpu"
        assert v.dtypes == (F32, F16, BF16)
        assert v.available() is None
        assert v.rung and v.seed_ref and v.summary


def test_supports_and_bytes():
    assert get("triton.softmax_rows").refuses(4, 65536, F32) is None
    assert "rows" in get("triton.softmax_rows").refuses(4, 65537, F32)
    assert "rows" in get("triton.softmax_backward_rows").refuses(4, 32769, BF16)
    assert get("triton.softmax_online").refuses(1, 1 << 20, F32) is None
    assert get("triton.softmax_split").refuses(1, 1 << 20, F32) is None
    assert get("triton.softmax_rows").algo_bytes(8, 128, 4) == 2 * 8 * 128 * 4
    assert get("triton.softmax_backward_rows").algo_bytes(8, 128, 2) == 3 * 8 * 128 * 2
    assert get("triton.log_softmax_online").algo_bytes(8, 128, 4) == 3 * 8 * 128 * 4
    assert get("triton.softmax_backward_online").algo_bytes(8, 128, 4) == 5 * 8 * 128 * 4
    assert get("triton.softmax_split").algo_bytes(8, 128, 4) > 3 * 8 * 128 * 4
    assert get("triton.softmax_rows").resources(8, 128, F32) is None  # no GPU here


# ------------------------------------------------------------------ every kind, via the harness
@pytest.mark.parametrize("regime", REGIMES)
@pytest.mark.parametrize("op", OPS)
def test_harness_kinds_fp32(op, regime, seed):
    """Every input kind; 3 rows x 21 columns: two chunks (the last a tail) online and split."""
    for kind in kinds_for(op):
        report = check_variant(_variant(op, regime), 3, 21, F32, kind, seed)
        assert report.ok, f"{kind}: {report.message}"


@pytest.mark.parametrize("dtype", [F16, BF16], ids=["fp16", "bf16"])
@pytest.mark.parametrize("regime", REGIMES)
@pytest.mark.parametrize("op", OPS)
def test_harness_16bit(op, regime, dtype, seed):
    for kind in ("normal", "huge"):  # the other hazards: test_special_rows, in every dtype
        report = check_variant(_variant(op, regime), 3, 21, dtype, kind, seed)
        assert report.ok, f"{kind}: {report.message}"


# ------------------------------------------------------------------------ adversarial rows
@pytest.mark.parametrize("dtype", [F32, F16, BF16], ids=["fp32", "fp16", "bf16"])
@pytest.mark.parametrize("regime", REGIMES)
@pytest.mark.parametrize("op", OPS)
def test_special_rows(op, regime, dtype):
    """Masked rows, NaN in the first/last chunk, +inf, one finite value, values near the max."""
    x = _special_rows(24, dtype)
    report, out = _run_direct(op, regime, _inputs(op, x), dtype)
    assert report.ok, report.message
    if op == "log_softmax":
        assert out[3, -1].item() == 0.0 and out[4, 0].item() == 0.0  # exactly 0: one finite value
        assert torch.isneginf(out[0]).all()
    if op == "softmax":
        assert (out[0] == 0).all()
        assert out[3, -1].item() == 1.0
    if op.endswith("backward"):
        assert (out[0] == 0).all()  # the masked row's gradient
    if op in ("softmax", "log_softmax"):
        for row in (1, 2, 5, 6):  # NaN or +inf anywhere: NaN across the row
            assert torch.isnan(out[row]).all(), (row, out[row])


@pytest.mark.parametrize("regime", REGIMES)
def test_log_backward_nan_with_masked(regime):
    """y = [nan, -inf, ...]: not a masked row (reference: dx = dy - exp(y) sum dy, nan only
    where y is nan); `tl.max` may drop the nan, so the live flag must not come from max(y)."""
    y = torch.full((2, 24), float("-inf"))
    y[0, 3] = float("nan")
    dy = torch.randn(2, 24)
    report, out = _run_direct("log_softmax_backward", regime, (y, dy), F32)
    assert report.ok, report.message
    assert torch.isnan(out[0, 3]) and torch.equal(out[0, :3], dy[0, :3])
    assert (out[1] == 0).all()


@pytest.mark.parametrize("in_place", [False, True], ids=["out", "in_place"])
@pytest.mark.parametrize("N", [37, 48], ids=["windowed", "aligned"])
def test_online_log_backward_live_found_while_writing(N, in_place, monkeypatch):
    """The online kernel's log-softmax backward sums dy alone in pass 1 and finds whether a row's y is live as pass 2
    writes it, the last chunk first: a row of y all -inf (pass 2 wrote dy there) must be written again with 0s, in
    place too (out is dy, which pass 2 has overwritten), and a row live in one lane alone (its first lane, written
    last; its last; a middle chunk; a NaN) is not. N = 37: rows at every offset of a vector, through windows, so the
    live lane lies in an end for some rows; N = 48: aligned rows, no window. Against float64, out poisoned."""
    windows = record_windows(monkeypatch, K, every=False, regime="online")
    y = torch.full((12, N), float("-inf"))
    y[1, 0] = 0.0
    y[2, N - 1] = 0.0
    y[3, 17] = 0.0
    y[4, 5] = float("nan")
    y[5:] = torch.from_numpy(reference.log_softmax(torch.randn(7, N, generator=torch.Generator().manual_seed(3))))
    y[7] = float("-inf")  # a dead row between live ones
    dy = torch.randn(12, N, generator=torch.Generator().manual_seed(4))
    ref = reference.reference("log_softmax_backward", (y, dy))
    own = (y.clone(), dy.clone())
    out = own[1] if in_place else torch.full((12, N), float("nan"))
    K.softmax_backward(*own, out, log=True, regime="online")
    assert windows == ([4] if N == 37 else [1]), windows
    report = compare_to_reference("log_softmax_backward", (y, dy), out, F32, ref=ref)
    assert report.ok, report.message
    assert (out[0] == 0).all() and (out[7] == 0).all()
    assert torch.isnan(out[4, 5]) and torch.equal(out[4, :5], dy[4, :5])
    for row, lane in ((1, 0), (2, N - 1), (3, 17)):  # dx = dy - exp(y) sum dy: dy where y = -inf
        keep = torch.arange(N) != lane
        assert torch.equal(out[row, keep], dy[row, keep]), row


# ------------------------------------------------------------------- shapes around the knobs
@pytest.mark.parametrize("regime", REGIMES)
@pytest.mark.parametrize("op", OPS)
def test_shapes_around_chunk(op, regime, seed):
    """N = 1, below, at and just past one and two chunks; M = 1 and a few rows."""
    for M, N in [(1, 1), (2, CHUNK - 1), (1, CHUNK), (2, CHUNK + 1), (1, 2 * CHUNK + 3)]:
        report = check_variant(_variant(op, regime), M, N, F32, "normal", seed)
        assert report.ok, f"{M}x{N}: {report.message}"


@pytest.mark.parametrize("op", OPS)
def test_rows_several_rows_per_tile(op, seed, monkeypatch):
    """Small N packs several rows in one tile; M not a multiple of BLOCK_M; a partial last tile; tiles of 64 bytes,
    so that the 2 programs walk 23 tiles each way round the persistent loop (one tile of 64 rows had left the loop's
    second pass untested: a loop stopped after each program's first tile passed)."""
    monkeypatch.setattr(R, "ROWS_TILE_BYTES", 64)
    cfg = R.rows_config(45, 5, F32)
    assert cfg.BLOCK_M == 2 and -(-45 // cfg.BLOCK_M) > R.FORCE_PROGRAMS
    for kind in ("normal", "masked", "nan"):
        report = check_variant(_variant(op, "rows"), 45, 5, F32, kind, seed)
        assert report.ok, f"{kind}: {report.message}"


@pytest.mark.parametrize("op", OPS)
def test_scalar_rows_tile(op, seed):
    """Rows of 65-256 whose accesses are scalar (rows_scalar: odd N here) take their own tile (rows_scalar_tile:
    8 rows of 256 in fp32 on 2 warps, else 2 KB on one warp: 4 rows of 256 in 16 bits, 4 of 128 in fp32 and 8 in
    16 bits); M not a multiple of it, a partial last tile."""
    assert R.rows_config(37, 129, F32, scalar=True).BLOCK_M == 8
    assert R.rows_config(37, 255, BF16, scalar=True).BLOCK_M == 4
    assert R.rows_config(37, 127, F32, scalar=True).BLOCK_M == 4
    assert R.rows_config(37, 65, F16, scalar=True).BLOCK_M == 8
    for N, dtype in ((129, F32), (255, BF16), (127, F32), (65, F16)):
        for kind in ("normal", "masked", "one_finite"):
            report = check_variant(_variant(op, "rows"), 37, N, dtype, kind, seed)
            assert report.ok, f"{N} {dtype} {kind}: {report.message}"


@pytest.mark.parametrize("dtype", [F32, BF16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("op", OPS)
def test_rows_in_two_tiles(op, dtype, seed):
    """Rows held in two tiles (rules.rows_pieces: the largest power of two in N, whole, then a masked power of two
    for the rest): a tail of one element (129, 1025), of 4 (131) and a wide one (3000: 2048 + 1024); several rows a
    tile and a partial last tile; every input kind in fp32 (masked rows, one finite value in the tail, NaN, huge),
    the harness's outputs poisoned with NaN."""
    kinds = kinds_for(op) if dtype == F32 else ("normal", "huge", "masked", "one_finite", "nan")
    for M, N, tail in ((37, 129, 1), (9, 131, 4), (3, 1025, 1), (2, 3000, 1024)):
        assert R.rows_pieces(N) == (pow2floor(N), tail)
        for kind in kinds:
            report = check_variant(_variant(op, "rows"), M, N, dtype, kind, seed)
            assert report.ok, f"{M}x{N} {kind}: {report.message}"


@pytest.mark.parametrize("dtype", [F32, F16, BF16], ids=["fp32", "fp16", "bf16"])
@pytest.mark.parametrize("op", OPS)
def test_rows_of_whole_vectors(op, dtype, seed, monkeypatch):
    """Rows that are whole 16-byte vectors Triton cannot prove so (N a multiple of 16 bytes, not of 16 elements:
    1000, 3000 in two tiles, 24; rules.rows_unit) run with UNIT set, aligned or not (the rows of a view one element
    off a vector keep the scalar path, UNIT 1), and match float64 on every input kind; a row stride that is not a
    multiple of the vector (a padded view) keeps UNIT 1 too."""
    units = []
    launch = K._launch_on
    monkeypatch.setattr(K, "_launch_on", lambda dev, kernel, grid, args, meta, key: (
        units.append(meta["UNIT"]) if kernel is K.rows_kernel else None, launch(dev, kernel, grid, args, meta, key))[1])
    u = 16 // dtype.itemsize
    assert R.rows_unit(1000, (1000, 1000), dtype.itemsize) == u and R.rows_unit(1024, (1024,), dtype.itemsize) == 1
    assert R.rows_unit(1000, (1000, 1000), dtype.itemsize, aligned=False) == 1
    assert R.rows_unit(1000, (1000, 1004), dtype.itemsize) == (1 if u == 8 else u)
    kinds = ("normal", "huge", "masked", "one_finite", "nan")
    for M, N in ((5, 1000), (2, 3000), (9, 24)):
        for kind in kinds:
            units.clear()
            report = check_variant(_variant(op, "rows"), M, N, dtype, kind, seed)
            assert report.ok, f"{M}x{N} {kind}: {report.message}"
            assert units and set(units) == {u}, (M, N, units)
    def off(t):  # one element off a vector: scalar
        v = torch.empty(t.numel() + 1, dtype=dtype)[1:].view(t.shape)
        return v.copy_(t)
    units.clear()
    report, _ = _run_direct(op, "rows", tuple(off(t) for t in _inputs(op, (torch.randn(4, 1000) * 3).to(dtype))),
                            dtype)
    assert report.ok and units == [1], (report.message, units)


@pytest.mark.parametrize("windowed", [False, True], ids=["scalar", "windows"])
@pytest.mark.parametrize("N", [129, 1025, 3000])
@pytest.mark.parametrize("op", OPS)
def test_special_rows_in_two_tiles(op, N, windowed, monkeypatch):
    """test_special_rows' hazards at widths held in two tiles (rules.rows_pieces), placed in the tail tile: the one
    finite value of row 3 (so the log-softmax backward's y is live in its tail alone), NaN in row 1, +inf in row 5's
    tail too, and row 10's max at the tail's first column. Windowed (rows of 12 at 4 offsets of a vector), those
    values also lie in the ends (rows_kernel: computed from the row's reduction in a tile of their own), and row 4's
    one finite value, the row's first, too."""
    assert R.rows_pieces(N, 4 if windowed else 1)[1] > 0
    if windowed:
        windows = record_windows(monkeypatch, K)
    x = _special_rows(N, F32)
    x[5, N - 1] = float("inf")
    x[10, pow2floor(N)] = 500.0
    report, out = _run_direct(op, "rows", _inputs(op, x), F32)
    assert report.ok, report.message
    if windowed:
        assert windows == expected_windows(12, N, N, 4), windows
    if op == "softmax":
        assert out[3, -1].item() == 1.0 and (out[3, :-1] == 0).all() and (out[0] == 0).all()
    if op == "log_softmax":
        assert out[3, -1].item() == 0.0 and torch.isneginf(out[0]).all()
    if op in ("softmax", "log_softmax"):
        for row in (1, 2, 5, 6):
            assert torch.isnan(out[row]).all(), (row, out[row])
    else:
        assert (out[0] == 0).all()
    if op == "log_softmax_backward":
        assert (out[3] != 0).any(), "a row live in its tail alone took the masked rows' zero gradient"


@pytest.fixture
def windows(monkeypatch):
    return record_windows(monkeypatch, K)


@pytest.mark.parametrize("dtype", [F32, F16, BF16], ids=["fp32", "fp16", "bf16"])
@pytest.mark.parametrize("op", OPS)
def test_window_rows(op, dtype, seed, windows):
    """Rows Triton would access an element at a time, read through 16-byte windows (rules.rows_window): N = 129 and
    37 (ends both sides of the body from the second row on), 1000 (every row on a vector, no ends in fp32), V + 1;
    M where the last row's window passes the tensor's end (that row then runs in a scalar launch of its own) and
    where it does not; every input kind in fp32, the harness's outputs poisoned with NaN."""
    V = 16 // dtype.itemsize
    kinds = kinds_for(op) if dtype == F32 else ("normal", "huge", "masked", "one_finite", "nan")
    for M, N in ((37, 129), (8, 129), (5, 37), (3, 1000), (4, V + 1)):
        for kind in kinds:
            windows.clear()
            report = check_variant(_variant(op, "rows"), M, N, dtype, kind, seed)
            assert report.ok, f"{M}x{N} {kind}: {report.message}"
            assert windows == expected_windows(M, N, N, V), (M, N, windows)


@pytest.mark.parametrize("regime", REGIMES)
@pytest.mark.parametrize("dtype", [F32, BF16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("backward", [False, True])
def test_window_padded_rows_and_in_place(backward, dtype, regime, monkeypatch):
    """tests/window_cases.py: 6 padded rows of 129 in rows of 136, in place, off a vector; in each regime (online and
    split: 9 chunks of 16 lanes a row, the ends apart)."""
    windows = record_windows(monkeypatch, K, regime=regime)
    check_padded_and_in_place(K, windows, 6, 129, 136, dtype, backward, "cpu", regime=regime)


@pytest.mark.parametrize("regime", ["online", "split"])
@pytest.mark.parametrize("op", OPS)
def test_chunk_windows_of_a_few_elements(op, regime, monkeypatch):
    """Rows of 4 fp32 elements 7 apart (padded: every row at another offset of a vector, the ends on both sides) in
    chunks of 4 lanes: the split kernel's ends take a tile of their own (windows), the online kernel's would need a
    chunk of 2V = 8 lanes, so it reads the rows one element at a time (rules.chunk_window); against float64, the
    outputs poisoned with NaN and the padding untouched."""
    monkeypatch.setattr(R, "FORCE_CHUNK", 4)
    windows = record_windows(monkeypatch, K, regime=regime)
    g = torch.Generator().manual_seed(2)
    wide = [torch.randn(9, 7, generator=g) * 3 for _ in range(2 if op.endswith("backward") else 1)]
    if op.endswith("backward"):
        wide[0] = torch.from_numpy((reference.log_softmax if op.startswith("log") else reference.softmax)(wide[0]))
        wide[0] = wide[0].float()
    ins = tuple(w[:, :4] for w in wide)
    out_wide = torch.full((9, 7), float("nan"))
    (K.softmax_backward(*ins, out_wide[:, :4], log=op.startswith("log"), regime=regime) if op.endswith("backward")
     else K.softmax_forward(*ins, out_wide[:, :4], log=op.startswith("log"), regime=regime))
    report = compare_to_reference(op, ins, out_wide[:, :4], F32)
    assert report.ok, report.message
    assert torch.isnan(out_wide[:, 4:]).all()
    assert windows == ([1] if regime == "online" else [4]), windows


@pytest.mark.parametrize("regime", ["online", "split"])
@pytest.mark.parametrize("op", OPS)
def test_chunk_windows_special_rows(op, regime, monkeypatch):
    """The online and split kernels through windows (rules.chunk_window) with test_special_rows' hazards in a row's
    ends, the < 4 elements each side of its vector body that go through a chunk of their own: 12 rows of 37 fp32
    elements start at offsets r % 4 of a vector, so row r's ends are its first (4 - r % 4) % 4 elements and its last
    (r + 1) % 4. In them: NaN first (row 1) and last (row 2), one finite value first (row 5) and last (row 4, the
    log-softmax backward's y live there alone), +inf (row 6, next to last), the row's max (row 9, first); row 0
    masked. Against float64, the outputs poisoned with NaN; the launches recorded as windowed."""
    N = 37
    assert [R.chunk_window(N, (N, N), 4)] == [4]
    windows = record_windows(monkeypatch, K, regime=regime)
    x = _special_rows(N, F32)
    x[1] = torch.randn(N)
    x[1, 0] = float("nan")
    x[2] = torch.randn(N)
    x[2, N - 1] = float("nan")
    x[4] = float("-inf")
    x[4, N - 1] = 0.5
    x[5] = float("-inf")
    x[5, 0] = -1.0
    x[6] = torch.randn(N)
    x[6, N - 2] = float("inf")
    x[9] = torch.randn(N)
    x[9, 0] = 500.0
    report, out = _run_direct(op, regime, _inputs(op, x), F32)
    assert report.ok, report.message
    assert windows == [4], windows
    if op == "softmax":
        assert out[4, -1].item() == 1.0 and out[5, 0].item() == 1.0 and (out[0] == 0).all()
        assert out[9, 0].item() == 1.0
    if op == "log_softmax":
        assert out[4, -1].item() == 0.0 and out[5, 0].item() == 0.0 and torch.isneginf(out[0]).all()
    if op in ("softmax", "log_softmax"):
        for row in (1, 2, 6):
            assert torch.isnan(out[row]).all(), (row, out[row])
    if op == "log_softmax_backward":
        assert (out[4] != 0).any() and (out[5] != 0).any()


@pytest.mark.parametrize("programs", [1, 3, 64])
@pytest.mark.parametrize("op", ["softmax", "log_softmax_backward"])
def test_split_schedules(op, programs, monkeypatch, seed):
    """LAG = C + programs: 1 program interleaves writes of early rows with reads of later ones;
    64 make LAG = M*C (all reads first). PBLOCK = 2 merges the C = 3 partials in two steps."""
    monkeypatch.setattr(R, "FORCE_PROGRAMS", programs)
    monkeypatch.setattr(R, "SPLIT_MAX_PARTIALS_BLOCK", 2)
    report = check_variant(_variant(op, "split"), 5, 37, F32, "outliers", seed)
    assert report.ok, report.message


@pytest.mark.parametrize("backward", [False, True])
@pytest.mark.parametrize("regime", REGIMES)
@pytest.mark.parametrize("N", [37, 131])
def test_row_strides(N, regime, backward):
    """Row strides other than N, on the inputs and the output: nothing written past N. Two rows hold their finite
    values at the row's end alone: one value (row 1), the last three (row 2); at 131 the rows regime holds a row in
    two tiles (128 + a tail of 4, rules.rows_pieces), so those values lie in its tail tile."""
    assert R.rows_pieces(N) == ((128, 4) if N == 131 else (64, 0))
    g = torch.Generator().manual_seed(3)
    x = torch.randn(6, N + 27, generator=g)[:, 5:N + 5]
    x[1] = float("-inf")
    x[1, N - 1] = 2.0
    x[2, :N - 3] = float("-inf")
    out_wide = torch.full((6, N + 13), float("nan"))
    out = out_wide[:, :N]
    if backward:
        y = torch.softmax(x, -1)
        dy = torch.randn(6, N + 43, generator=g)[:, 11:N + 11]
        K.softmax_backward(y, dy, out, regime=regime)
        ref = reference.softmax_backward(y, dy)
    else:
        K.softmax_forward(x, out, regime=regime)
        ref = reference.softmax(x)
        assert out[1, -1].item() == 1.0 and (out[1, :-1] == 0).all()
    np.testing.assert_allclose(out.double().numpy(), ref, rtol=2e-5, atol=1e-6)
    assert torch.isnan(out_wide[:, N:]).all()  # nothing written past N


@pytest.mark.parametrize("log", [False, True])
def test_public_op_on_2d_views(log):
    """The public op over dim 1 of 2-D views: rows of stride 50 (launched as they are, ops._triton_rows) and a
    transposed view (unit stride along dim 0: made contiguous first), forward and backward through autograd, against
    float64, the backward's dy itself a view."""
    import onlinesoftmax as osm

    g = torch.Generator().manual_seed(7)
    wide = torch.randn(6, 50, generator=g, dtype=torch.float64) * 3
    fn, ref = (osm.log_softmax, torch.log_softmax) if log else (osm.softmax, torch.softmax)
    for x in (wide[:, 3:40], wide.t()[:37]):
        x32 = x.float().requires_grad_()
        y = fn(x32, 1, backend="triton")
        x64 = x.clone().requires_grad_()
        want = ref(x64, 1)
        np.testing.assert_allclose(y.detach().double().numpy(), want.detach().numpy(), rtol=2e-5, atol=1e-6)
        dy = torch.randn(x.shape[0], 2 * x.shape[1], generator=g, dtype=torch.float64)[:, ::2]
        y.backward(dy.float())
        want.backward(dy)
        np.testing.assert_allclose(x32.grad.double().numpy(), x64.grad.numpy(), rtol=1e-4, atol=1e-5)


# ------------------------------------------------------------------------ the automatic regime
def test_auto_regime_runs(seed):
    x = torch.randn(3, 50, dtype=F32)
    out = torch.full_like(x, float("nan"))
    K.softmax_forward(x, out)
    np.testing.assert_allclose(out.double().numpy(), reference.softmax(x), rtol=2e-5, atol=1e-6)


# ------------------------------------------------------------ non-last dims: the columns kernel
def _columns_input(shape, dim, dtype, g):
    """randn * 3 with adversarial columns along dim: all -inf, one finite value, a NaN, +-1e4, an outlier."""
    x = torch.randn(shape, generator=g, dtype=torch.float64) * 3
    xm = x.movedim(dim, -1).reshape(-1, shape[dim])  # a view: each row is one column along dim
    lines = xm.shape[0]
    if lines >= 5:
        xm[0] = float("-inf")
        xm[1] = float("-inf")
        xm[1, -1] = 2.0
        xm[2, shape[dim] // 2] = float("nan")
        xm[3] = 1e4 * torch.sign(xm[3])
        xm[4, 0] = 3e4
    return x.to(dtype)


@pytest.mark.parametrize("dtype", [F32, BF16, F16], ids=["fp32", "bf16", "fp16"])
@pytest.mark.parametrize("shape, dim", [((3, 19, 37), 1), ((2, 150, 10), 1), ((37, 5), 0), ((2, 3, 33, 4), 2),
                                        ((4, 1, 6), 1), ((2, 1024, 3), 1), ((9, 8, 2), 0)])
def test_non_last_dims_take_the_columns_kernel(shape, dim, dtype, monkeypatch):
    """softmax / log_softmax and their backward over a non-last dim of a contiguous tensor run a columns kernel
    (the transposing path is made to fail): the streamed one up to its limits (a whole-dim tile or
    several, small_knobs' two persistent programs walking the tasks), the tile one above; on adversarial columns, against
    float64, the outputs poisoned with NaN."""
    import onlinesoftmax as osm
    from onlinesoftmax.ops import softmax as ops

    monkeypatch.setattr(ops, "_triton_rows", lambda *a: pytest.fail("the non-last dim was moved last"))
    monkeypatch.setattr(torch, "empty_like", lambda t, **kw: torch.full_like(t, float("nan"), **kw))
    launched = []
    launch = K._launch_on
    monkeypatch.setattr(K, "_launch_on", lambda dev, kernel, *a: (launched.append(kernel), launch(dev, kernel, *a)))
    g = torch.Generator().manual_seed(sum(shape) + dim)
    x = _columns_input(shape, dim, dtype, g)
    dy = torch.randn(shape, generator=g).to(dtype)
    N = shape[dim]

    def rows(t):  # the dim last, one row per column
        return t.movedim(dim, -1).reshape(-1, N)

    for log in (False, True):
        op = "log_softmax" if log else "softmax"
        y = ops.forward(x, dim, log, "triton")
        ref = reference.reference(op, (rows(x),))
        rep = compare_to_reference(op, (rows(x),), rows(y), dtype, ref=ref)
        assert rep.ok, (op, rep.message)
        # the backward from the reference's y (rounded to the dtype), so that a NaN column stays NaN only there
        yr = torch.from_numpy(ref).to(dtype).reshape(x.movedim(dim, -1).shape).movedim(-1, dim).contiguous()
        dx = ops.backward(yr, dy, dim, log, "triton")
        bop = op + "_backward"
        ins = (rows(yr), rows(dy))
        rep = compare_to_reference(bop, ins, rows(dx), dtype)
        assert rep.ok, (bop, rep.message)
    assert osm.softmax(x, dim, backend="triton").shape == x.shape
    fwd, bwd = (K.cols_stream_kernel if R.cols_stream_config(N, dtype, b) else K.cols_kernel for b in (False, True))
    assert launched == [fwd, bwd, fwd, bwd, fwd]
    assert (N <= R.COLS_STREAM_MAX_N) == (fwd is K.cols_stream_kernel)
    assert (N <= R.COLS_STREAM_BWD_MAX_N) == (bwd is K.cols_stream_kernel)


def test_columns_kernel_limits(monkeypatch):
    """Past COLS_MAX_N rows, or from a non-contiguous input, the dim is moved last (the rows kernels); the launcher
    refuses tensors that do not match out."""
    from onlinesoftmax.ops import softmax as ops

    moved = []
    rows = ops._triton_rows
    monkeypatch.setattr(ops, "_triton_rows", lambda *a: (moved.append(1), rows(*a)))
    monkeypatch.setattr(R, "COLS_MAX_N", 8)
    x = torch.randn(3, 9, 5)
    torch.testing.assert_close(ops.forward(x, 1, False, "triton"), torch.softmax(x, 1))
    assert moved == [1]
    torch.testing.assert_close(ops.forward(x[:, :8, :4], 1, True, "triton"), torch.log_softmax(x[:, :8, :4], 1))
    assert moved == [1, 1]
    torch.testing.assert_close(ops.forward(x[:, :8].contiguous(), 1, False, "triton"), torch.softmax(x[:, :8], 1))
    assert moved == [1, 1]  # contiguous and 8 rows: the columns kernel
    with pytest.raises(OnlineSoftmaxError, match="contiguous"):
        K.softmax_columns((torch.randn(2, 4, 3).transpose(0, 2),), torch.empty(3, 4, 2), False)
    with pytest.raises(OnlineSoftmaxError, match="dtype"):
        K.softmax_columns((torch.randn(2, 4, 3), torch.randn(2, 4, 3, dtype=F16)), torch.empty(2, 4, 3), True)


# ---------------------------------------------------------------------------------- errors
def test_launcher_errors():
    x = torch.randn(2, 8)
    with pytest.raises(OnlineSoftmaxError, match="regime"):
        K.softmax_forward(x, torch.empty_like(x), regime="nope")
    with pytest.raises(OnlineSoftmaxError, match="dtype"):
        K.softmax_forward(x, torch.empty(2, 8, dtype=F16))
    with pytest.raises(OnlineSoftmaxError, match="shape"):
        K.softmax_forward(x, torch.empty(2, 9))
    with pytest.raises(OnlineSoftmaxError, match="stride"):
        K.softmax_forward(x.t().contiguous().t(), torch.empty_like(x))
    with pytest.raises(OnlineSoftmaxError, match="2-D"):
        K.softmax_forward(torch.randn(8), torch.empty(8))
    with pytest.raises(OnlineSoftmaxError, match="dtype"):
        K.softmax_forward(x.double(), torch.empty_like(x.double()))
    # empty shapes: nothing to do, but the same checks
    K.softmax_forward(torch.empty(0, 8), torch.empty(0, 8))
    with pytest.raises(OnlineSoftmaxError, match="dtype"):
        K.softmax_forward(torch.empty(0, 8, dtype=torch.float64), torch.empty(0, 8, dtype=torch.float64))
    with pytest.raises(OnlineSoftmaxError, match="regime"):
        K.softmax_forward(torch.empty(2, 0), torch.empty(2, 0), regime="nope")


# ------------------------------------------------------------- the compiled path, without a GPU
def test_kernels_compile_for_sm90_without_spills(tmp_path):
    """The compiled (not interpreted) kernels build for sm_90, through the launchers as they launch
    (benchmarks/triton_codegen_diff.py, the tool that compares their PTX before and after a
    change), and each regime's largest configuration (and the columns kernels' at C = 150, and the streamed one's
    with the most rows one tile holds, and at its most rows; the online and split kernels through windows too, at odd
    N) has no stack frame (no spills), but for the backward rows kernel."""
    import json
    import pathlib
    import subprocess
    import sys

    from fakes import cuobjdump

    cuobjdump()
    root = pathlib.Path(__file__).resolve().parents[1]
    launches = []
    for op, dtype in [("softmax", "float32"), ("log_softmax", "bfloat16"), ("softmax_backward", "float32"),
                      ("log_softmax_backward", "bfloat16")]:
        backward = op.endswith("backward")
        whole = R.COLS_WHOLE_VALUES // (16 // getattr(torch, dtype).itemsize * (2 if backward else 1))
        streamed = R.COLS_STREAM_BWD_MAX_N if backward else R.COLS_STREAM_MAX_N
        launches += [f"triton.{op}_rows.{dtype}.4096x{R.rows_max_n(getattr(torch, dtype), backward)}",
                     f"triton.{op}_online.{dtype}.4096x65536", f"triton.{op}_split.{dtype}.512x262144",
                     f"triton.{op}_online.{dtype}.4096x65537", f"triton.{op}_split.{dtype}.512x262145",  # windows
                     f"triton.{op}_cols.{dtype}.2x{R.COLS_MAX_N}x4096", f"triton.{op}_cols.{dtype}.8x150x65536",
                     f"triton.{op}_cols.{dtype}.4x{whole}x4096", f"triton.{op}_cols.{dtype}.2x{streamed}x4096"]
    whole_vectors = [f"triton.{op}_rows.{dtype}.64x{n}" for op in ("softmax", "log_softmax_backward")
                     for dtype in ("float32", "bfloat16") for n in (1000, 3000)]  # rules.rows_unit
    launches += whole_vectors
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(root / "src"), env.get("PYTHONPATH")) if p)
    r = subprocess.run([sys.executable, str(root / "benchmarks" / "triton_codegen_diff.py"), "dump", str(tmp_path),
                        "--launch", *launches], env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    configs = json.loads((tmp_path / "index.json").read_text())["configs"]
    assert sorted(configs) == sorted(launches)
    for name in whole_vectors:  # every global access 16 bytes (one element each without UNIT)
        assert configs[name]["meta"]["UNIT"] == str(16 // getattr(torch, name.split(".")[2]).itemsize), name
        ptx = (tmp_path / "ptx" / f"{name}.ptx").read_text()
        accesses = [line for line in ptx.splitlines() if "ld.global" in line or "st.global" in line]
        assert accesses and all(".v4." in line for line in accesses), (name, accesses[:4])
    for name, res in configs.items():
        # the one known spill: backward rows at N = 32768 (y and dy live; 80-104 bytes of stack),
        # kept because it measured faster than the chunked regimes on the H200
        # (benchmarks/results/h200-tune-triton.txt)
        allowed = 128 if name.split(".")[1].endswith("backward_rows") else 0
        assert res["stack"] <= allowed and res["local"] == 0, (name, res)
        # the streamed columns kernel holds 64 values a thread a tile, 128 in a whole-dim tile (138-254 registers):
        # each measured faster than half of that (h200-tune-triton-columns-85e14e9.txt, softmax_rules.py)
        assert res["registers"] <= (255 if res["kernel"] == "cols_stream_kernel" else 128), (name, res)
        if res["kernel"] == "split_kernel":  # two programs resident an SM (rules.split_largest_chunk): the fp32
            # forward at a chunk of 8192 through windows took 81-86 registers, and ran one program an SM
            regs = -(-res["registers"] // 8) * 8  # allocated in 8s a thread
            assert regs * 32 * int(res["meta"]["num_warps"]) * R.split_programs(1) <= 65536, (name, res)

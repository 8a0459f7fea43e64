"""Every Triton variant (op x regime) against the float64 reference on a GPU, adversarial inputs
included, on realistic shapes either side of each regime's thresholds.

Run on the device with `pytest -m gpu tests/test_gpu_triton.py`; skipped cleanly without a GPU.
Every distinct (kernel, block sizes, dtype) compiles once (~1 s): the 16-bit dtypes run on a
subset of the shapes so the file stays a few minutes.
"""

import os

import pytest
import torch

pytestmark = pytest.mark.gpu

if not torch.cuda.is_available():  # skip the module whole: no thousands of skipped items on CPU
    pytest.skip("needs a CUDA GPU (torch.cuda.is_available() is False)", allow_module_level=True)
if os.environ.get("TRITON_INTERPRET") == "1":
    pytest.skip("TRITON_INTERPRET=1: these are the compiled kernels' tests", allow_module_level=True)

pytest.importorskip("triton")

from onlinesoftmax.harness.check import check_variant, compare_to_reference  # noqa: E402
from onlinesoftmax.harness.inputs import kinds_for  # noqa: E402
from onlinesoftmax.registry import get  # noqa: E402
from onlinesoftmax.engines.triton import variants as tv  # noqa: E402  (registers the triton.* variants)
from window_cases import check_padded_and_in_place, expected_windows, record_windows  # noqa: E402

K = tv.kernels()

OPS = ("softmax", "log_softmax", "softmax_backward", "log_softmax_backward")
F32, F16, BF16 = torch.float32, torch.float16, torch.bfloat16

# regime -> [(M, N, also in fp16 and bf16)]
SHAPES = {
    "rows": [
        (1, 1, True),
        (5, 33, True),  # odd N, several rows per tile
        (1001, 127, True),  # scalar rows in tiles of one warp (rules.rows_scalar_tile), a partial last tile
        (1000, 128, False),  # 32 rows per fp32 tile, a partial last tile, a persistent grid
        (257, 1000, True),  # whole 16-byte vectors Triton cannot prove so (rules.rows_unit)
        (3, 1023, False),
        (2, 4097, True),  # odd N just past a power of two: 4096 + 1 lanes (rules.rows_pieces)
        (37, 3000, True),  # 2048 + 1024 lanes, whole vectors (rules.rows_unit)
        (4095, 129, True),  # odd N (with the windows on, test_window_rows: the last row a launch of its own)
        (8, 12289, True),  # through the windows by the rules (test_rule_windows), no launch for the last row
        (3, 16383, True),  # one scalar tile of 16384 lanes; 16-bit: 4 warps (rules.rows_16bit_long)
        (1, 16384, False),  # one 64 KB fp32 row per tile (BLOCK_M = 1)
        (1, 32769, True),  # past rows_max_n (forced here); past rows_hard_max_n backward: refused
    ],
    "online": [
        (1, 1, False),
        (3, 7, True),
        (2, 4097, False),  # one full chunk and a one-element tail
        (300, 5000, True),  # more rows than programs; through windows (5000 is not a multiple of 16)
        (150, 40001, True),  # odd long rows through windows, every row at another offset of a vector
        (2, 32769, False),
        (1, 262147, True),  # 65 chunks, odd tail
    ],
    "split": [
        (1, 1, False),
        (3, 7, True),
        (1, 2049, False),
        (300, 4099, True),  # many rows: LAG < M * C, reads and writes interleave
        (5, 70001, False),
        (1, 262147, True),  # one row over every SM
        (32, 131072, False),  # the anchors' few-rows case
    ],
}
BIG = 1 << 20  # above this many elements, only the kinds that change the code path


def _cases():
    for op in OPS:
        for regime, shapes in SHAPES.items():
            for M, N, all_dtypes in shapes:
                for dtype in (F32, F16, BF16) if all_dtypes else (F32,):
                    d = str(dtype).replace("torch.", "")
                    yield pytest.param(op, regime, M, N, dtype, id=f"{op}_{regime}-{M}x{N}-{d}")


@pytest.mark.parametrize("op,regime,M,N,dtype", list(_cases()))
def test_variant(op, regime, M, N, dtype, seed):
    v = get(f"triton.{op}_{regime}")
    reason = v.refuses(M, N, dtype)
    if reason:
        pytest.skip(f"{v.name} refuses ({M}, {N}): {reason}")
    kinds = kinds_for(op) if M * N <= BIG else ("normal", "masked", "nan", "huge")
    for kind in kinds:
        report = check_variant(v, M, N, dtype, kind, seed)
        assert not report.skipped, report.message
        assert report.ok, f"{v.name} ({M}, {N}) {dtype} {kind}: {report.message}"


@pytest.mark.parametrize(
    "M,N,dtype,backward,regime",
    [
        (4096, 128, BF16, False, "rows"),
        (64, 32768, F32, False, "rows"),
        (200, 40000, BF16, False, "online"),  # 80 KB rows, M >= SMs
        (64, 40000, BF16, False, "split"),  # too few rows for one per SM
        (160, 60000, F32, False, "online"),  # 240 KB rows: fp32 forward online up to 256 KB
        (160, 70000, F32, False, "split"),  # 280 KB rows: past it
        (160, 40000, BF16, True, "online"),  # past the rows limit: 16-bit rows go online
        (160, 40000, F32, True, "split"),  # y + dy = 320 KB per row: past the L2 window
        (160, 131071, BF16, True, "split"),  # y + dy = 512 KB: past the 16-bit window
    ],
)
def test_auto_regime(M, N, dtype, backward, regime):
    """regime=None picks as documented and matches float64: the forward within the dtype's rtol of every element,
    however small (fp32 math, one rounding: an atol of 1e-5 had let a zero pass for 95% of a long row's elements);
    the backward within error_bounds' per-element bound (a row-wide max |dy| had let 0.9x the answer pass)."""
    assert K.pick_regime(M, N, dtype, backward, K.sm_count(torch.device("cuda"))) == regime
    g = torch.Generator(device="cuda").manual_seed(0)
    x = (torch.randn(M, N, device="cuda", generator=g) * 4).to(dtype)
    want = torch.softmax(x.double(), -1)
    out = torch.full_like(x, float("nan"))
    if backward:
        y = want.to(dtype)
        dy = torch.randn(M, N, device="cuda", generator=g).to(dtype)
        K.softmax_backward(y, dy, out)
        torch.cuda.synchronize()
        rep = compare_to_reference("softmax_backward", (y, dy), out, dtype)
        assert rep.ok, rep.message
    else:
        K.softmax_forward(x, out)
        torch.cuda.synchronize()
        rtol = {F32: 2e-5, F16: 2e-3, BF16: 1.6e-2}[dtype]
        err = (out.double() - want).abs()
        assert (err <= rtol * want.abs() + 1e-30).all(), (err / want.abs()).max().item()


@pytest.mark.parametrize("dtype", [F32, BF16, F16], ids=["fp32", "bf16", "fp16"])
@pytest.mark.parametrize("op", OPS)
def test_window_rows(op, dtype, seed, monkeypatch):
    """The rows variants with the 16-byte windows on for every N (rules.ROWS_WINDOW_MIN_N): odd N with and without the
    last row's own launch (4095 x 129; 4096 x 129 and 64 x 32001, M * N a multiple of 8), N = 1000 (rows on
    vectors), 5 x 33; 129 and 33 x 3000 in two tiles (rules.rows_pieces: 128 + V lanes, 2048 + 1024)."""
    windows = record_windows(monkeypatch, K)
    V = 16 // dtype.itemsize
    for M, N in ((4095, 129), (4096, 129), (64, 32001), (257, 1000), (5, 33), (33, 3000)):
        for kind in kinds_for(op) if M * N <= BIG else ("normal", "masked", "nan", "huge"):
            windows.clear()
            report = check_variant(get(f"triton.{op}_rows"), M, N, dtype, kind, seed)
            assert report.ok, f"{M}x{N} {kind}: {report.message}"
            assert windows == expected_windows(M, N, N, V), (M, N, windows)


@pytest.mark.parametrize("dtype", [F32, BF16, F16], ids=["fp32", "bf16", "fp16"])
@pytest.mark.parametrize("op", OPS)
def test_rule_windows(op, dtype, seed, monkeypatch):
    """The windows where the rules put them (rules.ROWS_WINDOW_MIN_N, rows_window_tail), not forced: 8 x 12289
    through windows in one launch, 8 x 8193 too, in two tiles (8192 + V lanes); 3 x 12289, whose last row would need
    a launch of its own, and 2 x 4097, shorter than the windows' rows, without; each against float64."""
    windows = record_windows(monkeypatch, K, every=False)
    V = 16 // dtype.itemsize
    for M, N, want in ((8, 12289, [V]), (8, 8193, [V]), (3, 12289, [1]), (2, 4097, [1])):
        for kind in kinds_for(op):
            windows.clear()
            report = check_variant(get(f"triton.{op}_rows"), M, N, dtype, kind, seed)
            assert report.ok, f"{M}x{N} {kind}: {report.message}"
            assert windows == want, (M, N, windows)


@pytest.mark.parametrize("dtype", [F32, BF16, F16], ids=["fp32", "bf16", "fp16"])
@pytest.mark.parametrize("backward", [False, True])
@pytest.mark.parametrize("M,N,width", [(4095, 129, 136), (1000, 4097, 4104), (64, 32001, 32008)])
def test_window_padded_rows_and_in_place(M, N, width, dtype, backward, monkeypatch):
    """tests/window_cases.py at real sizes: padded rows read through windows (the padding NaN and +-inf, neither
    used nor written), in place, and off a vector."""
    check_padded_and_in_place(K, record_windows(monkeypatch, K), M, N, width, dtype, backward, "cuda")


@pytest.mark.parametrize("dtype", [F32, BF16, F16], ids=["fp32", "bf16", "fp16"])
@pytest.mark.parametrize("backward", [False, True])
@pytest.mark.parametrize("regime,M,N,width", [("online", 300, 50001, 50008), ("split", 5, 70001, 70010)])
def test_chunk_windows_padded_and_in_place(regime, M, N, width, dtype, backward, monkeypatch):
    """tests/window_cases.py through the online and split kernels' windows (rules.chunk_window): padded rows (their
    padding NaN and +-inf, neither used nor written), in place, and off a vector (no window)."""
    check_padded_and_in_place(K, record_windows(monkeypatch, K, regime=regime), M, N, width, dtype, backward, "cuda",
                              regime=regime)


def test_runs_on_torch_current_stream():
    v = get("triton.softmax_split")
    x = torch.randn(4, 100000, device="cuda")
    want = torch.softmax(x.double(), dim=-1).float()
    for _ in range(2):  # planned twice on the default stream: the side stream's call below is the ready launch
        v.run((x,), torch.empty_like(x))
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        torch.cuda._sleep(10**8)  # ~50 ms on s first: a launch on another stream would run before the poison below
        out = torch.full_like(x, float("nan"))
        v.run((x,), out)
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    torch.testing.assert_close(out, want, rtol=2e-5, atol=1e-6)


def test_split_is_repeatable_under_contention():
    """The split regime's counters and ticket start from zero on every call; run it many times
    back to back (one row over every SM, and many short rows) and compare with the first."""
    for M, N in [(1, 1 << 20), (512, 8192)]:
        x = torch.randn(M, N, device="cuda")
        first = torch.empty_like(x)
        K.softmax_forward(x, first, regime="split")
        for _ in range(20):
            out = torch.full_like(x, float("nan"))
            K.softmax_forward(x, out, regime="split")
            assert torch.equal(out, first)


# knobs that change the plans of test_ready_launch_matches_float64's shapes (rows tiles, split and online chunks)
NEW_PLANS = {"ROWS_TILE_BYTES": 8 * 1024, "ROWS_SCALAR_TILE_BYTES": 4 * 1024, "ROWS_ONE_WARP_TILE_BYTES": 1024,
             "SPLIT_MAX_CHUNK": 4096, "ONLINE_CHUNK_BYTES": 4096}


@pytest.mark.parametrize("window", [False, True], ids=["scalar", "window"])
@pytest.mark.parametrize("dtype", [F32, BF16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("M,N,regime", [(7, 32768, None), (4095, 129, None), (4096, 129, None), (32, 131072, None),
                                        (300, 5000, "online")])
def test_ready_launch_matches_float64(M, N, regime, dtype, window, seed, monkeypatch):
    """A shape planned twice goes through the launcher's ready launch (softmax.py _Ready: no plan, no binder). Calls
    alternate between aligned rows and rows 2 elements into their buffer (unaligned pointers: another
    specialisation), three of each, then the knobs change every plan (NEW_PLANS) for three more of each; every op,
    each output NaN-poisoned, against float64. With the windows on for every N (rules.ROWS_WINDOW_MIN_N), the aligned
    4095 x 129 is planned every call (its last row a launch of its own) and 4096 x 129 goes through windows ready."""
    K._READY.clear()  # its native entries with it
    monkeypatch.setattr(K, "_READY", K.BoundedCache(K.READY_CACHE, K._drop_native))
    monkeypatch.setattr(K, "_SEEN", K.BoundedCache(K.SEEN_CACHE))
    monkeypatch.setattr(K.rules, "ROWS_WINDOW_MIN_N", 1 if window else None)
    monkeypatch.setattr(K.rules, "ROWS_WINDOW_TAIL_MIN_BYTES", 0)
    planned = {}
    plan = K.plan

    def counted(backward, log, *rest, **kw):
        key = (backward, log, max(t.data_ptr() & 15 for t in rest[-3]))  # the op, x's or dy's offset: the call's key
        planned[key] = planned.get(key, 0) + 1
        return plan(backward, log, *rest, **kw)

    monkeypatch.setattr(K, "plan", counted)
    g = torch.Generator(device="cuda").manual_seed(seed)
    base = (torch.randn(M * N + 2, device="cuda", generator=g) * 3).to(dtype)
    dy = torch.randn(M * N + 2, device="cuda", generator=g).to(dtype)
    for i in range(12):
        off = 2 * (i % 2)
        if i == 6:
            for k, v in NEW_PLANS.items():
                monkeypatch.setattr(K.rules, k, v)
        x = base[off:off + M * N].view(M, N)
        d = dy[off:off + M * N].view(M, N)
        for log in (False, True):
            y = (torch.log_softmax if log else torch.softmax)(x.double(), -1).to(dtype)
            out = torch.full_like(x, float("nan"))
            K.softmax_forward(x, out, log=log, regime=regime)
            torch.cuda.synchronize()
            rep = compare_to_reference("log_softmax" if log else "softmax", (x,), out, dtype)
            assert rep.ok, f"call {i} forward log={log}: {rep.message}"
            grad = torch.full_like(x, float("nan"))
            K.softmax_backward(y, d, grad, log=log, regime=regime)
            torch.cuda.synchronize()
            rep = compare_to_reference("log_softmax_backward" if log else "softmax_backward", (y, d), grad, dtype)
            assert rep.ok, f"call {i} backward log={log}: {rep.message}"
    assert len(planned) == 8, planned
    for (backward, log, offset), n in planned.items():
        # the window's tail only with every pointer aligned
        tail = window and offset == 0 and M * N % (16 // dtype.itemsize) != 0 and K.rules.rows_scalar(N, (N,))
        # 6 calls of each key: planned twice (seen, then made ready) before the knobs changed, at most twice after
        assert n == 6 if tail else n <= 4, (backward, log, offset, n, planned)


def test_every_variant_is_available_here():
    for v in (get(f"triton.{op}_{r}") for op in OPS for r in SHAPES):
        assert v.available() is None and v.device == "cuda", v.name


def test_resources_report():
    """Registers / spills of the instantiations the regime thresholds were set from (ptxas for
    sm_90 offline gave 51-64 registers and no spills for these)."""
    for name, N in [("triton.softmax_rows", 32768), ("triton.softmax_backward_rows", 16384),
                    ("triton.softmax_split", 262144), ("triton.softmax_online", 65536)]:
        r = get(name).resources(512, N, F32)
        assert r["registers"] > 0 and r["stack"] == 0, (name, r)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=["fp32", "bf16", "fp16"])
@pytest.mark.parametrize("shape, dim", [((16, 19, 64, 128), 1), ((8, 150, 32, 64), 1), ((2, 1000, 16, 16), 1),
                                        ((1024, 64), 0), ((3, 33, 4095), 1)])
def test_non_last_dims_take_the_columns_kernel(shape, dim, dtype, monkeypatch, poisoned):
    """backend="triton" over a non-last dim of a contiguous tensor runs the columns kernel (the transposing path
    fails the test), forward and backward, against float64 with NaN-poisoned outputs (an unwritten element
    fails)."""
    import numpy as np

    from onlinesoftmax.ops import softmax as ops

    monkeypatch.setattr(ops, "_triton_rows", lambda *a: pytest.fail("the non-last dim was moved last"))
    g = torch.Generator(device="cuda").manual_seed(sum(shape))
    x = (torch.randn(shape, generator=g, device="cuda") * 3).to(dtype)
    dy = torch.randn(shape, generator=g, device="cuda").to(dtype)
    N = shape[dim]

    def rows(t):
        return t.movedim(dim, -1).reshape(-1, N).cpu()

    for log in (False, True):
        op = "log_softmax" if log else "softmax"
        y = ops.forward(x, dim, log, "triton")
        torch.cuda.synchronize()
        rep = compare_to_reference(op, (rows(x),), rows(y), dtype)
        assert rep.ok, (op, rep.message)
        dx = ops.backward(y, dy, dim, log, "triton")
        torch.cuda.synchronize()
        ins = (rows(y), rows(dy))
        rep = compare_to_reference(op + "_backward", ins, rows(dx), dtype)
        assert rep.ok, (op + "_backward", rep.message)
        assert np.isfinite(rows(dx).double().numpy()).all()

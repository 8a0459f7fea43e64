"""The Triton engine's rules (engines/triton/softmax_rules.py), and that the registry's Triton variants and
the launchers apply the same ones. No kernel runs here: the launchers' plans are pure Python."""

import itertools
import subprocess
import sys

import pytest
import torch

from onlinesoftmax.errors import OnlineSoftmaxError
from onlinesoftmax.intmath import pow2ceil
from onlinesoftmax.engines.triton import softmax_rules as R
from onlinesoftmax.registry import OPS, variants

F32, F16, BF16 = torch.float32, torch.float16, torch.bfloat16
SMS = 132


# ---------------------------------------------------------------------------- regime choice
def test_pick_regime():
    for N in (1, 128, 1000, 16384, 32768):
        assert R.pick_regime(4096, N, F32, sms=SMS) == "rows"
        assert R.pick_regime(1, N, BF16, sms=SMS) == "rows"
    assert R.pick_regime(4096, 32768, F32, backward=True, sms=SMS) == "rows"
    # just past the rows limit, while M >= SMs: 16-bit rows online but a y + dy past 448 KB; fp32 forward rows
    # online up to 256 KB; else split
    assert R.pick_regime(4096, 32769, F32, sms=SMS) == "online"
    assert R.pick_regime(4096, 32769, BF16, sms=SMS) == "online"
    assert R.pick_regime(131, 32769, BF16, sms=SMS) == "split"
    assert R.pick_regime(4096, 32769, F32, backward=True, sms=SMS) == "split"
    assert R.pick_regime(4096, 32769, BF16, backward=True, sms=SMS) == "online"
    assert R.pick_regime(2048, 65536, BF16, sms=SMS) == "online"
    assert R.pick_regime(671, 200003, BF16, sms=SMS) == "online"  # 400 KB
    assert R.pick_regime(512, 262143, BF16, sms=SMS) == "online"  # one input re-read: any length
    assert R.pick_regime(512, 262143, BF16, backward=True, log=True, sms=SMS) == "online"
    assert R.pick_regime(671, 200003, BF16, backward=True, log=True, sms=SMS) == "online"  # dy alone re-read: 400 KB
    assert R.pick_regime(1024, 131071, BF16, backward=True, log=True, sms=SMS) == "online"
    assert R.pick_regime(1024, 131071, BF16, backward=True, sms=SMS) == "split"  # y + dy: 512 KB
    assert R.pick_regime(2047, 65537, BF16, backward=True, sms=SMS) == "online"  # 256 KB
    assert R.pick_regime(2047, 65537, F32, backward=True, log=True, sms=SMS) == "split"  # the fp32 backward
    assert R.pick_regime(2048, 65536, F32, sms=SMS) == "online"  # 256 KB rows
    assert R.pick_regime(2047, 65537, F32, sms=SMS) == "split"
    assert R.pick_regime(1024, 131072, F32, sms=SMS) == "split"
    assert R.pick_regime(4096, 32769, F32, backward=True, log=True, sms=SMS) == "split"  # the fp32 backward
    assert R.pick_regime(32, 131072, BF16, sms=SMS) == "split"  # too few rows for one per SM
    assert R.pick_regime(1, 262144, F32, backward=True, sms=SMS) == "split"


def test_online_stages_fit_their_bytes():
    """16 KB chunks of each input (8192 16-bit elements, 4096 fp32), four in flight where every input's four fit in
    ONLINE_STAGE_BYTES, fewer where not, never none."""
    for dtype, backward in itertools.product((BF16, F32), (False, True)):
        cfg = R.online_config(65537, dtype, backward)
        assert (cfg.CHUNK, cfg.num_stages) == (16384 // dtype.itemsize, 4)
    assert R.online_stages(8192, 4, True) == 2
    assert R.online_stages(1 << 20, 4, True) == 1
    for chunk, itemsize, backward in itertools.product((1024, 8192, 65536), (2, 4), (False, True)):
        stages = R.online_stages(chunk, itemsize, backward)
        assert stages == 1 or stages * chunk * itemsize * (1 + backward) <= R.ONLINE_STAGE_BYTES


def test_split_config_rules(monkeypatch):
    big = R.split_config(512, 262144, SMS, 2)
    assert big.CHUNK == R.SPLIT_MAX_CHUNK and big.C * big.CHUNK == 262144
    assert R.split_config(512, 262144, SMS, 2, backward=True).CHUNK == R.SPLIT_MAX_CHUNK // 2
    assert R.split_config(512, 262144, SMS, 4).CHUNK == R.SPLIT_MAX_CHUNK  # fp32 even N: 64 registers
    assert R.split_config(512, 262143, SMS, 4, v=4).CHUNK == R.SPLIT_MAX_CHUNK // 2  # through windows: 81-86
    assert R.split_config(512, 262143, SMS, 2, v=8).CHUNK == R.SPLIT_MAX_CHUNK  # 16-bit windows: 63-64
    assert R.split_config(512, 262143, SMS, 4, backward=True, v=4).CHUNK == R.SPLIT_MAX_CHUNK // 2
    assert R.split_config(16, 131072, SMS, 4).CHUNK == 4096  # two tasks a program (SPLIT_TASKS_PER_PROGRAM)
    assert R.split_config(1, 262144, SMS, 4).CHUNK == R.SPLIT_MIN_CHUNK  # spread one row wide
    assert R.split_config(1, 1000, SMS, 4).CHUNK == 1024  # never wider than the row
    assert R.split_lag(16, 512, 264) == 16 + 264
    assert R.split_lag(16, 2, 264) == 32
    monkeypatch.setattr(R, "FORCE_CHUNK", 16)
    cfg = R.split_config(1, 262144, SMS, 4)
    assert cfg.CHUNK == 16 and cfg.C == 262144 // 16 and cfg.PBLOCK == R.SPLIT_MAX_PARTIALS_BLOCK
    assert R.split_config(1, 33, SMS, 4, v=4).C == 3  # windows: the chunks cover N + v - 1 = 36 lanes
    assert R.split_config(1, 29, SMS, 4, v=4).C == 2


def test_chunk_window_rule(monkeypatch):
    """The online and split kernels read rows through windows wherever row_window takes them (any length: nothing
    outside the row is read), unless CHUNK_WINDOWS is off; the rows kernel keeps its own rule."""
    for N, size, V in ((50001, 2, 8), (65537, 4, 4), (1000003, 2, 8), (40001, 2, 8), (5000, 4, 4), (129, 4, 4),
                       (9, 2, 8)):
        assert R.chunk_window(N, (N, N), size) == V, (N, size)
    assert R.chunk_window(32767, (32767, 32767), 4) == 4 and R.rows_window_fits(32767, (32767, 32767), 4) == 1
    for N, strides, aligned in ((65536, (65536, 65536), True), (40000, (40000, 40000), True),
                                (50001, (50001, 50001), False), (50001, (50002, 50001), True), (7, (7, 7), True),
                                (50001, (50000, 50000), True)):
        assert R.chunk_window(N, strides, 2, aligned) == 1, (N, strides, aligned)
    assert R.chunk_window(4, (5, 5), 4, chunk=8) == 4 and R.chunk_window(4, (5, 5), 4, chunk=4) == 1  # 2V lanes
    monkeypatch.setattr(R, "CHUNK_WINDOWS", False)
    assert R.chunk_window(50001, (50001, 50001), 2) == 1


def test_occupancy():
    # 64 registers x 256 threads: 4 programs in 64K registers; 100 KB of shared memory: 2 in 228 KB
    assert R.occupancy(64, 0, 8, 65536, 228 * 1024, 2048) == 4
    assert R.occupancy(64, 100 * 1024, 8, 65536, 228 * 1024, 2048) == 2
    assert R.occupancy(60, 0, 8, 65536, 228 * 1024, 2048) == 4  # allocated in steps of 8
    assert R.occupancy(255, 0, 32, 65536, 228 * 1024, 2048) == 1  # at least one
    assert R.persistent_programs(4, SMS, 10) == 10
    assert R.persistent_programs(4, SMS, 10**6) == 4 * SMS


# ------------------------------------------------------- the registry asks the rules, not triton
def test_registry_asks_the_rules_without_triton():
    """With triton unimportable, the Triton variants still register and say what they accept and
    the bytes they move: variants/triton.py asks rules.py, which imports no triton."""
    code = ("import sys\n"
            "sys.modules['triton'] = None\n"
            "import torch\n"
            "from onlinesoftmax.registry import get\n"
            "v = get('triton.softmax_backward_rows')\n"
            "assert v.supports(4, 32768, torch.float32) is None\n"
            "assert 'rows' in v.supports(4, 32769, torch.float32)\n"
            "assert get('triton.softmax_split').algo_bytes(1, 1 << 20, 4) > 3 * (1 << 20) * 4\n"
            "assert 'triton' in get('triton.softmax_rows').available()\n"
            "assert 'onlinesoftmax.engines.triton.softmax_rules' in sys.modules\n"
            "assert 'onlinesoftmax.engines.triton.softmax' not in sys.modules\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def _registry_verdict(variant, M, N, dtype):
    if dtype not in variant.dtypes:
        return "dtype"
    return variant.supports(M, N, dtype)


def _launcher_verdict(K, backward, regime, M, N, dtype):
    n = 3 if backward else 2
    try:
        K.plan(backward, False, regime, M, N, dtype, SMS, (dtype,) * n, (N,) * n, lambda _n, dt, _zero: dt)
    except OnlineSoftmaxError as exc:
        return str(exc)
    return None


def test_registry_and_launchers_agree():
    """Every Triton variant accepts exactly the shapes and dtypes its launcher accepts, with the
    launcher's reason, and counts the split workspace the launcher allocates."""
    pytest.importorskip("triton")
    from onlinesoftmax.engines.triton import variants as tv

    K = tv.kernels()
    triton_variants = [v for v in variants(backend="triton") if v.name.startswith("triton.")]  # not api.triton.*
    assert {v.name.rsplit("_", 1)[1] for v in triton_variants} == set(R.REGIMES)
    assert {v.op for v in triton_variants} == {op for op in OPS if op != "sum"}
    refused = 0
    for v in triton_variants:
        regime = v.name.rsplit("_", 1)[1]
        backward = v.op.endswith("backward")
        for dtype in (F32, F16, BF16, torch.float64):
            for N in (1, 4097, 32768, 32769, 65536, 65537, 1 << 20):
                registry, launcher = _registry_verdict(v, 4, N, dtype), _launcher_verdict(K, backward, regime, 4, N,
                                                                                         dtype)
                if registry == "dtype":
                    assert launcher and "dtype" in launcher, (v.name, dtype, N)
                else:
                    assert registry == launcher, (v.name, dtype, N)
                refused += launcher is not None
    # float64 (12 variants x 7 N); rows forward past 65536 (2 N x 2 ops x 3 dtypes), backward past 32768 (4 x 2 x 3)
    assert refused == 12 * 7 + 2 * 2 * 3 + 4 * 2 * 3


@pytest.mark.parametrize("backward", [False, True])
@pytest.mark.parametrize("M,N", [(1, 1 << 20), (32, 131072), (512, 262144), (300, 4099), (300, 8191)])
def test_split_bytes_are_the_launchers_workspace(M, N, backward):
    """rules.split_workspace_bytes (the registry's byte count) is the traffic of the workspace the
    launcher allocates: partials written once and read C times, counters written and read."""
    pytest.importorskip("triton")
    from onlinesoftmax.engines.triton import variants as tv

    K = tv.kernels()
    sizes = {}

    def workspace(n, dtype, zero):
        sizes[dtype] = n
        return dtype

    n = 3 if backward else 2
    plan = K.plan(backward, False, "split", M, N, F32, SMS, (F32,) * n, (N,) * n, workspace)
    traffic = sizes[torch.float32] * 4 * (1 + plan.config.C) + sizes[torch.int32] * 4 * 2
    assert R.split_workspace_bytes(M, N, backward, SMS) == traffic


@pytest.mark.parametrize("backward", [False, True])
def test_rows_grid_is_one_tile_a_program_unless_persistent(backward, monkeypatch):
    """The rows regime launches a program a tile, one stage (the H200's rule, rows_persistent); the knob, or tests
    forcing the programs, give the persistent grid: at most SMs x occupancy programs, the next tile pipelined."""
    pytest.importorskip("triton")
    from onlinesoftmax.engines.triton import variants as tv

    K = tv.kernels()
    n, M, N = (3 if backward else 2), 10**6, 128

    def rows_plan():
        return K.plan(backward, False, "rows", M, N, F32, SMS, (F32,) * n, (N,) * n, lambda _n, dt, _zero: dt)

    monkeypatch.setattr(R, "FORCE_PROGRAMS", None)
    plan = rows_plan()
    tiles = -(-M // plan.config.BLOCK_M)
    assert tiles > 4 * SMS and plan.grid == (tiles,)
    assert plan.meta["num_stages"] == plan.meta["NUM_STAGES"] == 1
    monkeypatch.setattr(R, "ROWS_PERSISTENT", True)
    plan = rows_plan()
    assert plan.grid[0] <= 4 * SMS and plan.meta["num_stages"] == plan.meta["NUM_STAGES"] == 2
    monkeypatch.setattr(R, "ROWS_PERSISTENT", False)
    monkeypatch.setattr(R, "FORCE_PROGRAMS", 2)
    assert rows_plan().grid == (2,)


def test_scalar_rows_of_65_to_256_take_the_tiles_timed_at_127_and_129(monkeypatch):
    """Rows whose accesses Triton cannot vectorise (N or a row stride not a multiple of 16, or a pointer not 16-byte
    aligned) and 65-256 wide take the launches tune_triton.py timed at N = 127 and 129 (rules.rows_scalar_tile):
    fp32 rows of 129-256 the 8 KB tile on 2 warps ([8, 256]), the others 2 KB on one warp (fp32 [4, 128], 16-bit
    [8, 128] and [4, 256]), unless the window serves them (rows_window); vectorised rows, windowed rows, and scalar
    rows of other widths (63, 64, 1025, 4097), keep the rules' tile."""
    pytest.importorskip("triton")
    from onlinesoftmax.engines.triton import variants as tv

    K = tv.kernels()
    M = 4096

    def config(N, dtype, tensors=None, strides=None, backward=False):
        n = 3 if backward else 2
        return K.plan(backward, False, "rows", M, N, dtype, SMS, tensors or (dtype,) * n, strides or (N,) * n,
                      lambda _n, dt, _zero: dt).config

    for backward in (False, True):
        n = 3 if backward else 2
        uneven = lambda N: (N + 1,) + (N,) * (n - 1)  # noqa: E731 - strides unlike each other: no window
        # 129 in two tiles (rules.rows_pieces): 128 + 1 lanes, the tile's rows as if 256 wide
        assert config(129, F32, strides=uneven(129), backward=backward) == R.RowsConfig(8, 128, 2, 1, TAIL=1)
        assert config(129, BF16, strides=uneven(129), backward=backward) == R.RowsConfig(4, 128, 1, 1, TAIL=1)
        assert config(200, F16, strides=uneven(200), backward=backward) == R.RowsConfig(4, 256, 1, 1)
        assert config(127, F32, backward=backward) == R.RowsConfig(4, 128, 1, 1)
        assert config(65, BF16, backward=backward) == R.RowsConfig(8, 128, 1, 1)
        assert config(128, F32, strides=uneven(128), backward=backward) == R.RowsConfig(4, 128, 1, 1)  # the bounds
        assert config(64, F32, strides=uneven(64), backward=backward) == R.rows_config(M, 64, F32, backward)
        for N, dtype in ((256, F32), (256, BF16), (128, F32), (63, F32), (1025, F32), (4097, BF16)):
            assert config(N, dtype, backward=backward) == R.rows_config(M, N, dtype, backward), (N, dtype)
        rule = R.ROWS_WINDOW_MIN_N
        monkeypatch.setattr(R, "ROWS_WINDOW_MIN_N", 1)
        for N, dtype, lanes in ((129, F32, (128, 4)), (200, BF16, (256, 0))):  # windowed: N + V - 1 lanes, the rules'
            cfg = config(N, dtype, backward=backward)  # tile (no scalar tile), two pieces where they take fewer lanes
            assert cfg == R.rows_config(M, N, dtype, backward, v=16 // dtype.itemsize), N
            assert (cfg.BLOCK_N, cfg.TAIL) == lanes, (N, cfg)
        monkeypatch.setattr(R, "ROWS_WINDOW_MIN_N", rule)
    assert config(256, F32, strides=(272, 256)) == R.rows_config(M, 256, F32)  # strides of 16: vectorised
    assert config(256, F32, strides=(257, 256)) == R.RowsConfig(8, 256, 2, 1)  # a sliced view's rows
    assert config(256, BF16, strides=(257, 256)) == R.RowsConfig(4, 256, 1, 1)
    x = torch.empty(M * 256 + 1)[1:].view(M, 256)  # 4 bytes past a 16-byte boundary
    assert config(256, F32, tensors=(x, torch.empty(M, 256))) == R.RowsConfig(8, 256, 2, 1)
    assert config(256, F32, tensors=(torch.empty(M, 256), torch.empty(M, 256))) == R.rows_config(M, 256, F32)


def test_rows_pieces_hold_a_row_in_fewer_lanes(monkeypatch):
    """A row of ROWS_PIECES_MIN_N <= N <= ROWS_PIECES_MAX_N not a power of two takes two power-of-two tiles (the
    largest power of two in N, then one holding the rest) where they take fewer lanes than pow2ceil(N), and one tile
    elsewhere; through windows of v elements, N + v - 1 lanes the same way, the tail a vector at least. The tile's
    rows and warps follow the lanes it holds; a backward tile of 16384 lanes or more takes 32 warps, a smaller one
    ROWS_BACKWARD_MIN_WARPS at least."""
    pytest.importorskip("triton")
    from onlinesoftmax.engines.triton import variants as tv

    expected = {128: (128, 0), 129: (128, 1), 191: (128, 64), 192: (128, 64), 193: (256, 0), 255: (256, 0),
                1000: (1024, 0), 1025: (1024, 1), 3000: (2048, 1024), 3072: (2048, 1024), 3073: (4096, 0),
                4097: (4096, 1), 6144: (4096, 2048), 8191: (8192, 0), 8193: (8192, 1), 12289: (16384, 0),
                16383: (16384, 0), 16385: (32768, 0), 24576: (32768, 0), 32001: (32768, 0)}
    for N, pieces in expected.items():
        assert R.rows_pieces(N) == pieces, N
    windowed = {(129, 4): (128, 4), (129, 8): (128, 8), (131, 8): (128, 16), (1000, 8): (1024, 0),
                (4095, 8): (4096, 8), (4097, 4): (4096, 4), (8193, 8): (8192, 8), (12289, 4): (16384, 0),
                (16383, 4): (16384, 4), (32001, 8): (32768, 0)}
    for (N, v), pieces in windowed.items():
        assert R.rows_pieces(N, v) == pieces, (N, v)
    for N in range(1, 129):
        assert R.rows_pieces(N) == (pow2ceil(N), 0), N
    for v in (1, 4, 8):
        for N in range(129, R.ROWS_PIECES_MAX_N + 1):
            head, tail = R.rows_pieces(N, v)
            w = N + v - 1
            assert head + tail >= w and (tail == 0 or (head < w <= head + tail < pow2ceil(w) and v <= tail <= head))
            assert head & (head - 1) == 0 and tail & (tail - 1) == 0, N
    monkeypatch.setattr(R, "ROWS_PIECES_MIN_N", None)
    assert R.rows_pieces(129) == (256, 0) and R.rows_pieces(4097) == (8192, 0)
    monkeypatch.undo()

    K = tv.kernels()

    def meta(M, N, dtype, backward=False, strides=None):
        n = 3 if backward else 2
        return K.plan(backward, True, "rows", M, N, dtype, SMS, (dtype,) * n, strides or (N,) * n,
                      lambda _n, dt, _zero: dt).meta

    m = meta(32760, 4097, F32)
    assert (m["BLOCK_M"], m["BLOCK_N"], m["TAIL"], m["num_warps"], m["V"]) == (1, 4096, 1, 8, 1)
    m = meta(44739, 3000, BF16, backward=True)  # 4 warps (ROWS_BACKWARD_MIN_WARPS), not the halved 2
    assert (m["BLOCK_M"], m["BLOCK_N"], m["TAIL"], m["num_warps"]) == (1, 2048, 1024, 4)
    assert meta(44739, 3000, BF16)["num_warps"] == 2  # forward: the rules' 16-bit halving
    assert meta(32760, 4097, BF16, backward=True)["num_warps"] == 4
    m = meta(16382, 8193, BF16, backward=True)  # windowed (ROWS_WINDOW_MIN_N): 8192 + 8 lanes on 4 warps
    assert (m["BLOCK_N"], m["TAIL"], m["V"], m["num_warps"]) == (8192, 8, 8, 4)  # (rows_16bit_long)
    m = meta(16382, 8193, BF16, backward=True, strides=(8194, 8193, 8193))  # no window: 8192 + 1
    assert (m["BLOCK_N"], m["TAIL"], m["V"], m["num_warps"]) == (8192, 1, 1, 4)
    m = meta(8192, 16385, BF16, backward=True, strides=(16386, 16385, 16385))  # past ROWS_PIECES_MAX_N: one tile
    assert (m["BLOCK_N"], m["TAIL"], m["V"], m["num_warps"]) == (32768, 0, 1, 32)
    for N in (12289, 16383):  # long unaligned 16-bit rows: 4 warps forward and in the log-softmax backward
        assert meta(2, N, BF16)["num_warps"] == meta(2, N, F16, backward=True)["num_warps"] == 4, N
    assert meta(2, 8193, BF16)["num_warps"] == 8  # the forward from 16384 lanes only
    assert meta(2, 16384, BF16)["num_warps"] == 8 and meta(2, 16384, BF16, backward=True)["num_warps"] == 32
    assert meta(2, 12289, F32)["num_warps"] == 16 and meta(2, 32001, BF16)["num_warps"] == 16
    assert K.plan(True, False, "rows", 2, 12289, BF16, SMS, (BF16,) * 3, (12289,) * 3,
                  lambda _n, dt, _zero: dt).meta["num_warps"] == 32  # the softmax backward: the rules'
    monkeypatch.setattr(R, "ROWS_16BIT_LONG_WARPS", None)
    assert meta(2, 16383, BF16)["num_warps"] == 8 and meta(2, 12289, BF16, backward=True)["num_warps"] == 32
    monkeypatch.undo()
    assert meta(10921, 12289, F32, backward=True)["num_warps"] == 32
    assert meta(10921, 12289, F32)["num_warps"] == 16  # forward: the rules'
    monkeypatch.setattr(R, "ROWS_BACKWARD_FULL_WARPS_LANES", None)
    assert meta(10921, 12289, F32, backward=True)["num_warps"] == 16
    monkeypatch.setattr(R, "ROWS_BACKWARD_MIN_WARPS", None)
    assert meta(44739, 3000, BF16, backward=True)["num_warps"] == 2


def test_rows_window_rule(monkeypatch):
    """The window (V elements: 16 bytes) serves scalar rows only where every row starts at the same offset of a vector
    in every tensor, the stride holds the row, N holds a vector, and the widest window (N + V - 1 lanes, rows_pieces)
    takes at most V lanes more than the scalar row; and only for
    rows of ROWS_WINDOW_MIN_N or more (8192: faster on the H200 from 12289 up, slower at 129-4097)."""
    for N, size, V in ((12289, 4, 4), (32001, 4, 4), (32001, 2, 8), (8193, 2, 8)):  # the rule's own: windowed
        assert R.rows_window(N, (N, N), size) == V, (N, size)
    for N in (129, 1000, 1025, 4097, 8189):  # 8189: windowed with every N (8189 + 3 fits 8192)
        assert R.rows_window(N, (N, N), 4) == 1, N
    monkeypatch.setattr(R, "ROWS_WINDOW_MIN_N", None)
    assert R.rows_window(32001, (32001, 32001), 4) == 1
    monkeypatch.setattr(R, "ROWS_WINDOW_MIN_N", 1)
    assert R.rows_window(129, (129, 129), 4) == 4
    assert R.rows_window(129, (129, None, 129), 2) == 8  # a forward launch: no dy
    assert R.rows_window(1000, (1000, 1000), 4) == 4  # aligned rows Triton sees as scalar (1000 % 16)
    assert R.rows_window(129, (136, 136), 4) == 4  # padded rows
    assert R.rows_window(1000, (1001, 1001), 4) == 4
    assert R.rows_window(128, (128, 128), 4) == 1  # Triton vectorises these itself
    assert R.rows_window(129, (129, 129), 4, aligned=False) == 1  # a pointer off 16 bytes
    assert R.rows_window(129, (130, 129), 4) == 1  # rows at different offsets of a vector in x and out
    assert R.rows_window(129, (100, 100), 4) == 1  # overlapping rows
    assert R.rows_window(3, (3, 3), 4) == 1 and R.rows_window(7, (7, 7), 2) == 1  # shorter than a vector
    assert R.rows_window(5, (5, 5), 4) == 4 and R.rows_window(9, (9, 9), 2) == 8
    for N, size in ((32767, 4), (32763, 2), (127, 4), (131, 2)):  # the window more than V lanes past the row's
        assert R.rows_window(N, (N, N), size) == 1, (N, size)
    for N, size in ((4095, 4), (4093, 2), (4093, 4), (4089, 2), (16383, 4)):  # V lanes more at most (rows_pieces)
        assert R.rows_window(N, (N, N), size) == 16 // size, (N, size)


@pytest.mark.parametrize("backward", [False, True])
def test_rows_window_plans(backward, monkeypatch):
    """A windowed launch leaves the last row to a scalar launch of its own (Plan.tail, on the row's views) where that
    row's window would pass its end, and only there; one row alone is the scalar launch."""
    pytest.importorskip("triton")
    from onlinesoftmax.engines.triton import variants as tv

    K = tv.kernels()
    monkeypatch.setattr(R, "ROWS_WINDOW_MIN_N", 1)
    monkeypatch.setattr(R, "ROWS_WINDOW_TAIL_MIN_BYTES", 0)
    n = 3 if backward else 2
    M_AT = 3  # the arguments: in, dy (None forward), out, M, N, strides

    def plan(M, N, dtype=F32, width=None):
        ts = tuple(torch.empty(M, width or N, dtype=dtype)[:, :N] for _ in range(n))
        return ts, K.plan(backward, False, "rows", M, N, dtype, SMS, ts, tuple(t.stride(0) for t in ts),
                          lambda _n, dt, _zero: dt)

    ts, p = plan(37, 129)
    assert p.meta["V"] == 4 and p.args[M_AT] == 36 and p.tail.meta["V"] == 1 and p.tail.tail is None
    tail_tensors = [t.data_ptr() for t in p.tail.args[:M_AT] if t is not None]
    assert p.tail.args[M_AT] == 1 and tail_tensors == [t[36:].data_ptr() for t in ts]
    _, p = plan(36, 129)  # 36 x 129 elements: the last window ends on a vector
    assert p.meta["V"] == 4 and p.args[M_AT] == 36 and p.tail is None
    _, p = plan(36, 129, BF16)
    assert p.meta["V"] == 8 and p.args[M_AT] == 35 and p.tail.args[M_AT] == 1
    _, p = plan(5, 129, width=136)  # padded rows: 4 * 136 + 129 is not a multiple of 4
    assert p.meta["V"] == 4 and p.args[M_AT] == 4 and p.tail is not None
    _, p = plan(1, 129)
    assert p.meta["V"] == 1 and p.args[M_AT] == 1 and p.tail is None
    _, p = plan(37, 1000)  # whole 16-byte vectors: told so (rules.rows_unit), no window
    assert p.meta["V"] == 1 and p.meta["UNIT"] == 4 and p.tail is None
    monkeypatch.setattr(R, "ROWS_UNITS", False)
    _, p = plan(37, 1000)
    assert p.meta["V"] == 4 and p.meta["UNIT"] == 1 and p.tail is None
    # a plan with the last row apart only from ROWS_WINDOW_TAIL_MIN_BYTES of input (two launches: never ready)
    monkeypatch.setattr(R, "ROWS_WINDOW_TAIL_MIN_BYTES", 37 * 129 * 4)
    _, p = plan(37, 129)
    assert p.meta["V"] == 4 and p.tail is not None
    monkeypatch.setattr(R, "ROWS_WINDOW_TAIL_MIN_BYTES", 37 * 129 * 4 + 1)
    _, p = plan(37, 129)
    assert p.meta["V"] == 1 and p.args[M_AT] == 37 and p.tail is None
    _, p = plan(36, 129)  # no tail: windowed whatever the size
    assert p.meta["V"] == 4 and p.tail is None


def test_every_assignment_to_the_rules_counts(monkeypatch):
    """softmax_rules counts each assignment to (or deletion of) one of its names in `generation`, which the launcher's
    ready launches are made under (softmax._settings): a knob set, even to its own value, set back, a name added and
    removed."""
    g = R.generation
    monkeypatch.setattr(R, "ROWS_TILE_BYTES", R.ROWS_TILE_BYTES)
    assert R.generation == g + 1
    monkeypatch.setattr(R, "rows_pieces", lambda N, v=1: (N, 0))
    monkeypatch.setattr(R, "NOT_A_KNOB", 1, raising=False)
    monkeypatch.undo()
    assert R.generation == g + 6 and not hasattr(R, "NOT_A_KNOB")

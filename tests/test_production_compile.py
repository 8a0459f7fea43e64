"""Production softmax kernels (engines/cuda/kernels/softmax.cu; engines/cuda/plan.py, compiled.py, variants.py) without a GPU.

- every instantiation the launch plans can pick compiles for sm_90 with no spills and no stack frame; the list
  comes from the plan rules themselves (production.instantiations probes them on both sides of every breakpoint);
- the plans pick each regime on both sides of each threshold (pure Python);
- the registry variants exist, refuse what they cannot run with a reason, report resources without a GPU.
"""

import math
import os
import random
from types import SimpleNamespace

import pytest
import torch

from onlinesoftmax import registry
from onlinesoftmax.errors import Unavailable
from onlinesoftmax.runtime import compile_unavailable

if compile_unavailable():  # pragma: no cover - CI installs cuda-core, cuda-bindings and nvidia-cuda-nvrtc
    pytest.skip(compile_unavailable(), allow_module_level=True)

from onlinesoftmax import opdefs  # noqa: E402
from onlinesoftmax.engines.cuda import plan as P  # noqa: E402
from onlinesoftmax.engines.cuda import run as E  # noqa: E402
from onlinesoftmax.engines.cuda import compiled as K  # noqa: E402
from onlinesoftmax.engines.cuda import variants as V  # noqa: E402
from onlinesoftmax.runtime.bounded import BoundedCache  # noqa: E402
from fakes import stub_device  # noqa: E402
from plan_cases import AUTOMATIC_PLANS, case_id  # noqa: E402

ARCH = "sm_90"
pytestmark = pytest.mark.usefixtures("private_nvrtc_cache")  # cubins out of ~/.cache (conftest.py)
SMS = 132
SMEM_PER_SM = 228 * 1024
REGS_PER_SM = 64 * 1024
FWD = tuple(op for op in P.ENGINE_OPS if not opdefs.OPS[op].backward)
BWD = tuple(op for op in P.ENGINE_OPS if opdefs.OPS[op].backward)


@pytest.fixture(scope="module")
def inst():
    return P.instantiations()


@pytest.fixture(scope="module")
def report(inst):
    # one NVRTC call per 48 kernels, spread over the CPU cores (each worker process reads the cache env var)
    return K.compile_all(inst, ARCH, batch=48, workers=max(1, min(4, os.cpu_count() or 1)))


# ---- compilation ----------------------------------------------------------------------------------------


def test_every_instantiation_compiles_without_spills(inst, report):
    assert set(report) == set(inst)
    assert len(inst) > 100
    bad = {k: r for k, r in report.items() if r["spill_stores"] or r["spill_loads"] or r["stack"]}
    assert not bad, bad
    for k, r in report.items():
        assert 0 < r["registers"] <= 255, (k, r)


def _block_of(name: str) -> int:
    fam = name.split("<")[0]
    args = [int(a) for a in name[name.index("<") + 1:-1].split(",")]
    if fam.endswith("_warp"):
        return P.WARP_THREADS
    if fam.endswith("_grp_fix"):
        return P.GROUP_FIX_THREADS
    if fam.endswith("_row") or fam.endswith("_grp"):
        return args[2] if fam == "ce_row" else args[3]  # ce_row has no op code
    if "split" in fam:
        return P.SPLIT_THREADS
    if fam.endswith("_chan"):
        return P.CHAN_THREADS
    if fam.endswith("_flat"):
        return P.FLAT_THREADS
    return P.STRIDED_THREADS


def test_occupancy_targets(inst, report):
    """Launch bounds hold: warp kernels 4 CTAs/SM (the warp kernels of P = 2, realigned stores: 3), flat kernels 4
    (16-bit data 6: backward, and forward up to 12 slots a lane), row kernels 1024 threads/SM, or as near as whole
    CTAs get (two 512-thread CTAs per SM for the block/cluster rows), strided 2 CTAs/SM, but 1 for 16-bit
    16-byte accesses (plan.strided_ctas); dynamic + static smem of two row CTAs fits an SM, and of four flat CTAs
    with the largest chunk the plans give; a period CTA's (PERIOD_SMEM at most) fits the 227 KB a CTA may take."""
    for k, r in report.items():
        fam = k.split("<")[0].split("_", 1)[1]
        if fam not in ("warp", "row", "grp", "cols", "strided", "chan", "flat"):  # not cross-entropy's small launches
            continue
        threads = _block_of(k)
        # a row CTA of THREADS not a power of 2 (block_threads: whole warps) gets 1024 // THREADS per SM; chan: one
        # CTA at least (its registers hold whole columns: occupancy follows CAP)
        args = k[:-1].split("<")[1].split(",")
        realigned = fam == "warp" and args[5] == "2"  # <OP,DT,W,SLOTS,RPT,P[,DTO]>
        # flat <OP,DT,SLOTS,LG[,SURE]>: 16-bit data 6 CTAs (the forward up to 12 slots a lane), else 4
        flat = 6 if fam == "flat" and args[1] != "0" and (k.startswith("bwd") or int(args[2]) <= 12) else 4
        per_sm = {"warp": (3 if realigned else 4) * threads, "row": 1024 // threads * threads, "grp": 1024, "cols": 1024,
                  "strided": P.strided_ctas(int(args[2])) * threads, "chan": threads, "flat": flat * threads}
        if fam in per_sm:
            assert r["registers"] * per_sm[fam] <= REGS_PER_SM, (k, r["registers"])
    most = max(P.plan(1 << 20, N, dtype, op, vec=False, window=1, sms=SMS, regime="flat", flat=True).launches[0].smem
               for op in P.ENGINE_OPS for dtype in opdefs.GPU_DTYPES for N in range(1, P.FLAT_MAX_N + 1))
    assert 4 * (most + 1024) <= SMEM_PER_SM, most  # flat: four CTAs an SM, their dynamic smem only
    for dtype in opdefs.GPU_DTYPES:  # the columns kernels with the most shared memory: two CTAs per SM still
        W = P.vec_width(dtype)
        ss = P.columns_smem_slots(dtype, W)
        name = f"fwd_cols<0,{P.DT_CODE[dtype]},{W},{P.columns_slots('softmax', dtype, W)},{ss},8>"
        assert name in report, name
        dyn = P.smem_bytes("softmax", W, P.ROW_MAX_THREADS, ss)
        assert 2 * (dyn + report[name]["smem"] + 1024) <= SMEM_PER_SM, (name, dyn)
    # every row kernel of 512 threads with shared-memory slots, static shared memory included: the windows that
    # realign (P = 2, 3) declare 2.2-3 KB of it, which beside 7 fp32 backward slots left one CTA an SM
    # (plan.REALIGN_WIDE_SLOTS)
    checked = set()
    for k, r in report.items():
        fam = k.split("<")[0]
        if fam not in ("fwd_row", "bwd_row", "ce_row", "fwd_grp", "bwd_grp"):
            continue
        args = [int(a) for a in k[:-1].split("<")[1].split(",")]
        threads, sslots = (args[2], args[4]) if fam == "ce_row" else (args[3], args[5])  # ce_row has no op code
        if threads == P.ROW_MAX_THREADS and sslots:
            dyn = P.smem_bytes("softmax_backward" if fam.startswith("bwd") else "softmax", 4, threads, sslots)
            assert 2 * (dyn + r["smem"] + 1024) <= SMEM_PER_SM, (k, dyn, r["smem"])
            checked.add((fam, sslots))
    for k, r in report.items():  # the period kernels: PERIOD_SMEM and their static shared memory in one CTA's 227 KB
        if "_period<" in k:
            assert P.PERIOD_SMEM + r["smem"] <= SMEM_PER_SM - 1024, (k, r["smem"])
    most = max(P.BWD_WIDE_SLOTS.values())
    assert ("bwd_row", most) in checked and ("fwd_row", P.smem_slots("softmax", torch.bfloat16, 8)) in checked
    assert ("fwd_grp", P.smem_slots("softmax", torch.bfloat16, 8)) in checked


def _ctas_per_sm(registers: int, threads: int) -> int:
    """CTAs of `threads` an SM holds with `registers` a thread: each of the 4 schedulers holds a quarter of the warps
    (rounded up) in 16K registers, allocated in steps of 8 a thread; 2048 threads an SM."""
    regs = -(-registers // 8) * 8
    c = 2048 // threads
    while c > 1 and -(-c * threads // 32 // 4) * 32 * regs > 16384:
        c -= 1
    return c


def test_log_softmax_rows_hold_softmax_occupancy(report):
    """softmax.cu's fwd_row_ctas: the 16-bit log_softmax row kernels of 3 register slots, and of 4 in one CTA a row
    (the block regime's forward), fit as many CTAs an SM as softmax's; unbound they took 55-56 registers against
    softmax's 39-40 (192 threads: 6 CTAs an SM against 8), and 67-72 against 47-48 in 4 slots (416 threads: 2
    against 3)."""
    seen = {3: 0, 4: 0}
    for k, r in report.items():
        if k.startswith("fwd_row<1,") and k.split(",")[1] != "0":
            _, _, W, threads, slots, sslots, c, p = (int(a) for a in k[len("fwd_row<"):-1].split(",")[:8])
            if (slots == 3 or slots == 4 and c == 1) and sslots == 0 and p != 2:
                twin = report["fwd_row<0," + k[len("fwd_row<1,"):]]
                assert _ctas_per_sm(r["registers"], threads) >= _ctas_per_sm(twin["registers"], threads), \
                    (k, r["registers"], twin["registers"])
                seen[slots] += 1
    assert seen[3] >= 40 and seen[4] >= 16, seen  # 120 and 32 at dcc5a63: neither kind may drop out unchecked


def test_chan_backward_holds_two_ctas_where_bound(report):
    """softmax.cu's chan_bwd_ctas: bands of 24-32 rows of one element (24-28 when G > 1) and bands of 20-24 rows of
    16-bit pairs when G > 1 fit two 256-thread CTAs an SM; unbound they took 132-185 registers, one CTA (fp32
    log_softmax backward at C = 21: 67% of copy on the H200; 16-bit log_softmax backward at C = 150, 20 rows of 8
    bands: 72% on the H100, the softmax backward 96%)."""
    bound = 0
    for k, r in report.items():
        if k.startswith("bwd_chan<"):
            _, _, W, cap, G = (int(a) for a in k[len("bwd_chan<"):-1].split(","))
            if (cap >= 24 and (G == 1 or cap <= 28)) if W == 1 else (20 <= cap <= 24 and G > 1):
                bound += 1
                assert r["registers"] * 2 * P.CHAN_THREADS <= REGS_PER_SM, (k, r["registers"])
    assert bound >= 30


def test_plans_only_pick_enumerated_kernels(inst):
    """The probe grid of `instantiations` covers what plan returns on arbitrary shapes."""
    rng = random.Random(1234)
    for _ in range(3000):
        op = rng.choice(list(P.ENGINE_OPS))
        dtype = rng.choice(opdefs.GPU_DTYPES)
        N = rng.choice([rng.randint(1, 2048), rng.randint(1, 1 << 19)])
        M = rng.choice([1, 2, rng.randint(1, 300), rng.randint(1, 1 << 20)])
        vec = rng.random() < 0.7
        regime = rng.choice([None, None, "warp", "block", "cluster", "group", "split", "columns", "strided", "chan",
                             "flat"])
        try:
            p = P.plan(M, N, dtype, op, vec=vec, sms=SMS, regime=regime, flat=rng.random() < 0.5)
        except P.Unsupported:
            continue
        for k in p.kernels:
            assert k in inst, (op, dtype, M, N, vec, regime, k)
        inner = rng.choice([1, 3, 8, 1000, 4096])
        for regime in (None, "strided"):
            p = P.plan(M % 64 + 1, N, dtype, op, vec=vec, inner=inner, layout="strided", sms=SMS, regime=regime)
            assert p.kernels[0] in inst, p


# ---- the plan rules -------------------------------------------------------------------------------------


def _regime(op, dtype, M, N, vec=True):
    return P.plan(M, N, dtype, op, vec=vec, sms=SMS).regime


@pytest.mark.parametrize("dtype", opdefs.GPU_DTYPES)
@pytest.mark.parametrize("op", list(P.ENGINE_OPS))
def test_regime_thresholds(op, dtype):
    W = P.vec_width(dtype)
    many = 1 << 16
    wmax = P.warp_max_n(op, dtype, W)
    reg_cap = P.ROW_MAX_THREADS * P.reg_slots(op, dtype, W) * W
    cap = P.row_capacity(op, dtype, W)
    cmax = P.max_cluster(op, dtype)
    # warp | block
    assert _regime(op, dtype, many, wmax) == "warp"
    assert _regime(op, dtype, many, wmax + W) == "block"
    assert _regime(op, dtype, 1, 1) == "warp"
    # block in registers | block with smem slots | cluster of 2
    p = P.plan(many, reg_cap, dtype, op, sms=SMS)
    assert p.regime == "block" and p.launches[0].smem == 0
    p = P.plan(many, reg_cap + W, dtype, op, sms=SMS)
    assert p.regime == "block" and p.launches[0].smem > 0
    assert cap == (4 if op in FWD and dtype != torch.float32 else 2) * reg_cap + P.ROW_MAX_THREADS * W  # + a slot
    # one CTA holds up to cap; the aligned backward takes 2 CTAs holding the row in registers from the first N whose
    # halves fill BWD_LEAN_MIN_FILL of their register slots
    fill = math.ceil(P.BWD_LEAN_MIN_FILL * P.ROW_MAX_THREADS * P.reg_slots(op, dtype, W))
    one = cap if op in FWD else (2 * fill - 2) * W
    p = P.plan(many, one, dtype, op, sms=SMS)
    assert p.regime == "block" and p.launches[0].cluster == 1
    p = P.plan(many, one + W, dtype, op, sms=SMS)
    assert p.regime == "cluster" and p.launches[0].cluster == 2
    # the largest cluster, then groups of CTAs (their rules: test_group_rules), the scalar path split
    p = P.plan(4096, cmax * cap, dtype, op, sms=SMS)
    assert p.regime == "cluster" and p.launches[0].cluster == cmax
    assert _regime(op, dtype, 4096, cmax * cap + W) == "group"
    assert P.plan(4096, cmax * cap + 1, dtype, op, vec=False, sms=SMS).regime == "split"
    assert cmax * cap >= 262144  # the brief: large N up to at least 262144 for every dtype
    # few rows (M x CTAs per row < SMs, N >= FEW_ROWS_MIN_N): wider clusters on the 16-byte path, split on the
    # scalar one and beyond the cluster capacity
    n = P.FEW_ROWS_MIN_N
    assert _regime(op, dtype, SMS, n) == "block"
    assert _regime(op, dtype, 1, n - W) in ("warp", "block")
    c = P.cluster_size(op, dtype, W, 4 * cap)
    assert _regime(op, dtype, math.ceil(SMS / c), 4 * cap) == "cluster"
    assert _regime(op, dtype, SMS - 1, n) in ("block", "cluster")  # a cluster only with >= 128 threads' worth each
    for M, N in [(3, 262144), (32, 131072), (4, 3 * cap)]:  # the brief's 32 x 131072 among them (1 x 262144 splits)
        p = P.plan(M, N, dtype, op, sms=SMS)
        assert p.regime == "cluster" and M * p.launches[0].cluster >= min(SMS // 2, M * P.MAX_CLUSTER), (M, N, p)
    assert _regime(op, dtype, 1, 64 * cap) == "split"
    # odd N: the window path (16-byte loads), clusters included; the scalar path (inputs' rows starting unalike):
    # few rows split, also where a cluster would hold the row (50257)
    p = P.plan(8, 131072 + 1, dtype, op, sms=SMS)
    assert (p.regime, p.W, p.window) == ("cluster", W, 1)
    assert _regime(op, dtype, 8, 131072 + 1, vec=False) == "split"
    assert _regime(op, dtype, 8, 50257, vec=False) == "split"
    # the backward's registers-only clusters (cluster_size's lean rule) only on the aligned path: 65536 elements
    # take as many CTAs as hold them in registers; 65536 - W + 1 (the window: the same 65536 / W accesses) the
    # fewest with smem
    if op not in FWD:
        p = P.plan(many, 65536, dtype, op, sms=SMS)
        assert (p.launches[0].cluster, p.launches[0].smem) == (65536 // reg_cap, 0)
        p = P.plan(many, 65536 - W + 1, dtype, op, sms=SMS)
        assert p.window == 1 and p.launches[0].cluster == P.pow2ceil(-(-65536 // cap)) < 65536 // reg_cap
    p = P.plan(many, wmax + W + 1, dtype, op, sms=SMS)
    assert (p.W, p.window) == (W, 1) and p.kernels[0].endswith(",1>")
    assert P.plan(many, wmax + W + 1, dtype, op, vec=False, window=2, sms=SMS).kernels[0].endswith(",2>")
    assert P.plan(many, wmax + W + 1, dtype, op, vec=False, sms=SMS).W == 1
    assert P.plan(many, 4096, dtype, op, vec=False, sms=SMS).W == 1
    assert P.plan(many, 4096, dtype, op, vec=True, sms=SMS).W == W
    scal_cap = P.ROW_MAX_THREADS * P.reg_slots(op, dtype, 1)
    assert _regime(op, dtype, many, scal_cap, vec=False) == "block"
    # beyond one CTA's registers: the backward on clusters of CTAs holding the row in registers only, then split;
    # the forward (never scalar from run.py) splits
    p = P.plan(many, scal_cap + 1, dtype, op, vec=False, sms=SMS)
    if op in FWD:
        assert p.regime == "split"
    else:
        assert (p.regime, p.W, p.launches[0].cluster, p.launches[0].smem) == ("cluster", 1, 2, 0)
        assert _regime(op, dtype, many, P.max_cluster(op, dtype) * scal_cap, vec=False) == "cluster"
    assert _regime(op, dtype, many, P.max_cluster(op, dtype) * scal_cap + 1, vec=False) == "split"
    assert _regime(op, dtype, many, P.warp_max_n(op, dtype, 1), vec=False) == "warp"
    assert _regime(op, dtype, many, P.warp_max_n(op, dtype, 1) + 1, vec=False) == "block"


@pytest.mark.parametrize("dtype", opdefs.GPU_DTYPES)
@pytest.mark.parametrize("op", list(P.ENGINE_OPS))
def test_cluster_shares_are_balanced(op, dtype):
    """The row kernels' cluster CTAs share a row evenly (softmax.cu's CH: the accesses of the longest window over C):
    every CTA holds its share (CH <= threads x (slots + sslots)); its kernel's shared-memory slots (SSLOTS) and its
    dynamic smem are exactly the slots the share fills beyond the registers, and a block CTA's the slots its row
    fills; aligned and through the window."""
    W = P.vec_width(dtype)
    cap = P.row_capacity(op, dtype, W)
    rs, inputs = P.reg_slots(op, dtype, W), 2 if opdefs.OPS[op].backward else 1
    seen = set()
    for M in (1, 8, 32, 100, 4096):
        for N in (P.FEW_ROWS_MIN_N, 20000 * W, P.ROW_MAX_THREADS * rs * W + W, cap - W, cap + W, 3 * cap, 100003,
                  128256, 262144):
            for vec, window in ((N % W == 0, 1), (False, 1)):
                p = P.plan(M, N, dtype, op, vec=vec, window=window, sms=SMS)
                if p.regime not in ("cluster", "block") or p.W == 1:
                    continue
                (l,) = p.launches
                _, _, _, threads, slots, sslots, c, pw = (int(a) for a in l.kernel[l.kernel.index("<") + 1:-1].split(","))
                assert c == l.cluster and threads == l.block[0] and (slots == rs or sslots == 0)
                acc = -(-(N + (W - 1 if pw else 0)) // W)  # the kernel's (P ? N + 2W - 2 : N) / W
                ch = -(-acc // c) if c > 1 else threads * (slots + sslots)
                assert ch <= threads * (slots + sslots), (op, dtype, M, N, l)
                used = max(0, -(-min(ch, acc) // threads) - slots)
                assert used == sslots and l.smem == used * threads * 16 * inputs, (op, dtype, M, N, l)
                seen.add((p.regime, sslots > 0))
    assert ("cluster", True) in seen and ("block", True) in seen


@pytest.mark.parametrize("dtype", opdefs.GPU_DTYPES)
@pytest.mark.parametrize("op", list(P.ENGINE_OPS))
def test_few_rows_split_where_full_clusters_leave_the_sms_idle(op, dtype):
    """plan.few_rows_split: 1 or 2 rows whose clusters of 16 CTAs would each be full (512 threads x reg_slots
    accesses) take the split regime; a third row (48 CTAs of clusters, over a third of the SMs), or a row one access
    shorter, keeps the cluster. So do the rows whose out rows (or dy) start elsewhere than the inputs (the split
    would read them element by element), the fused cast and cross-entropy (no split form)."""
    W = P.vec_width(dtype)
    full = P.MAX_CLUSTER * P.ROW_MAX_THREADS * P.reg_slots(op, dtype, W) * W
    for M in (1, 2):
        p = P.plan(M, full, dtype, op, sms=SMS)
        assert p.regime == "split" and p.W == W
        assert P.plan(M, full - W, dtype, op, sms=SMS).regime == "cluster"
        assert P.plan(M, full + 1, dtype, op, vec=False, window=1, sms=SMS).regime == "split"
        for window in (2, 3) if opdefs.OPS[op].backward else (2,):
            p = P.plan(M, full + 1, dtype, op, vec=False, window=window, sms=SMS)
            assert p.regime == "cluster" and p.W == W, (window, p)
    assert P.plan(3, full, dtype, op, sms=SMS).regime == "cluster"
    inst = P.instantiations()
    if op == "softmax":
        p = P.cross_entropy_plan(1, full, dtype, sms=SMS)
        assert p.regime == "cluster" and p.kernels[0] in inst
    if dtype != torch.float32 and not opdefs.OPS[op].backward:
        p = P.plan(1, full, dtype, op, window=1, out_dtype=torch.float32, sms=SMS)
        assert p.regime == "cluster" and p.out_dtype == torch.float32 and p.kernels[0] in inst


def test_few_row_clusters_run_in_one_round(monkeypatch):
    """The few-row rule widens clusters to about two CTAs an SM, but a device holds only so many clusters at once
    (the H200: 14 of 16 CTAs). run._fitted_plan narrows a plan whose M clusters it cannot hold (the occupancy
    query's count) until they are resident in one round, and keeps it where they are, where the count is unknown,
    or where nothing narrower holds the row (many rows). Every plan it gives is among the instantiations."""
    known = {"count": True}
    resident = {16: 14, 8: 30, 4: 62, 2: 126}
    monkeypatch.setattr(E, "kernel", lambda name, device, block, smem, cluster: SimpleNamespace(
        fits=True, resident=resident.get(cluster, 1) if known["count"] else None))
    inst = P.instantiations()

    def fitted(M, N, dtype, op="softmax"):
        monkeypatch.setattr(E, "_plans", BoundedCache(E.PLAN_CACHE))
        p = E._fitted_plan(M, N, dtype, op, N % P.vec_width(dtype) == 0, 1, 1, "rows", SMS, None, 0, "split")
        assert all(k in inst for k in p.kernels), p
        return p.regime, p.launches[0].cluster, p.launches[0].grid

    for dtype in (torch.float32, torch.bfloat16):
        assert P.plan(16, 262144, dtype, sms=SMS).launches[0].cluster == 16  # the rule alone: two rounds
        assert fitted(16, 262144, dtype) == ("cluster", 8, 16)
        assert fitted(15, 262137, dtype) == ("cluster", 8, 15)  # through the window
        assert fitted(14, 262144, dtype) == ("cluster", 16, 14)
        assert fitted(7, 262144, dtype, "log_softmax") == ("cluster", 16, 7)
        assert fitted(64, 262144, torch.float32, "softmax_backward") == ("cluster", 16, 64)  # many rows: no narrower
        known["count"] = False
        assert fitted(16, 262144, dtype) == ("cluster", 16, 16)
        known["count"] = True



def test_window_rules():
    """The window path sizes the rules for N + W - 1 (a row may start W - 1 elements into its first access): its
    capacities are the aligned path's less W - 1; the split regime beyond them keeps the window where the out rows
    start as the inputs' (P = 1, its own kernels; and the group regime's) and falls back to scalar accesses where they
    do not (P = 2, 3)."""
    for op in P.ENGINE_OPS:
        for dtype in opdefs.GPU_DTYPES:
            W = P.vec_width(dtype)
            assert P.window_path(8 * W, W, True, 1) == (W, 0, 8 * W)
            assert P.window_path(8 * W + 1, W, True, 1) == (W, 1, 9 * W)
            assert P.window_path(8 * W, W, False, 2) == (W, 2, 9 * W - 1)
            assert P.window_path(8 * W, W, False, 0) == (1, 0, 8 * W)
            wmax = P.warp_max_n(op, dtype, W)
            assert P.plan(4096, wmax - W + 1, dtype, op, window=1, vec=False, sms=SMS).regime == "warp"
            assert P.plan(4096, wmax - W + 2, dtype, op, window=1, vec=False, sms=SMS).regime == "block"
            big = P.max_cluster(op, dtype) * P.row_capacity(op, dtype, W)
            for regime in ("group", "split"):  # beyond the clusters (groups where the rows fill the chip)
                p = P.plan(4096 if regime == "group" else 1, big - W + 2, dtype, op, window=1, vec=False, sms=SMS)
                assert (p.regime, p.W, p.window) == (regime, W, 1)
                assert all(f",{W}," in k and k.endswith(",1>") for k in p.kernels), p.kernels
            for window in (2, 3) if opdefs.OPS[op].backward else (2,):
                p = P.plan(4096, big - W + 2, dtype, op, window=window, vec=False, sms=SMS)
                assert (p.regime, p.W, p.window) == ("split", 1, 0), (window, p)


def test_fused_cast_plans():
    """16-bit in, float32 out (the kernels' DTO = 0): forward rows on chip only; every other plan refuses, so the
    engine casts first."""
    bf16, f32 = torch.bfloat16, torch.float32
    for M, N, regime in ((4096, 128, "warp"), (300, 50257, None), (140, 4097, "block"), (2, 131071, "cluster")):
        p = P.plan(M, N, bf16, "softmax", window=1, out_dtype=f32)
        assert p.out_dtype == f32 and all(k.endswith(",0>") for k in p.kernels), p
        assert regime is None or p.regime == regime
        base = P.plan(M, N, bf16, "softmax", window=1)
        assert [k[:-1] + ",0>" for k in base.kernels] == list(p.kernels)  # the same geometry, the cast added
    for kw in (dict(M=1, N=(1 << 21) + 1, dtype=bf16, op="softmax"),  # split
               dict(M=64, N=1000, dtype=bf16, op="softmax_backward"),
               dict(M=64, N=1000, dtype=bf16, op="softmax", vec=False, window=2)):
        with pytest.raises(P.Unsupported, match="cast first"):
            P.plan(sms=SMS, out_dtype=f32, **{"window": 1, **kw})


def test_row_access_from_pointers():
    """run.py's verdict on the pointers (_alignment) and row strides: aligned (P = 0), window 1 (the out rows start
    as the inputs'), window 2 (out rows elsewhere), window 3 (a backward's dy rows unlike y's, the out rows as y's),
    scalar (the inputs' rows start unalike and the out rows unlike the first input's)."""
    al = E._alignment
    V = 4
    assert E._row_access(al(4096, 0, 8192), 10, 64, V, (64,)) == (True, 1)
    assert E._row_access(al(4096, 0, 8192), 10, 63, V, (63,)) == (False, 1)  # odd N: rows start anywhere, alike
    assert E._row_access(al(4100, 0, 8196), 10, 64, V, (64,)) == (False, 1)  # both 4 bytes in
    assert E._row_access(al(4100, 0, 8192), 10, 64, V, (64,)) == (False, 2)  # x[:, 1:]-like base, fresh out
    assert E._row_access(al(4100, 0, 8192), 10, 63, V, (64,)) == (False, 2)  # sliced rows: stride 64, out 63
    assert E._row_access(al(4096, 4100, 8192), 10, 64, V, (64, 64)) == (False, 3)  # dy starts unlike y
    assert E._row_access(al(4096, 4112, 8192), 10, 64, V, (64, 66)) == (False, 3)  # dy's rows drift
    assert E._row_access(al(4096, 4112, 8192), 10, 64, V, (64, 66), 66) == (False, 0)  # and the out rows unlike y's
    assert E._row_access(al(4100, 4096, 8192), 10, 64, V, (64, 64)) == (False, 0)  # y and out 4 bytes apart
    assert E._row_access(al(4100, 4096, 8196), 1, 64, V, (64, 64)) == (False, 3)  # one row: dy's start alone
    assert E._row_access(al(4096, 4112, 8192), 1, 64, V, (64, 66)) == (True, 1)  # one row: strides do not matter
    assert E._row_access(al(4096, 4112, 8192), 10, 64, V, (64, 68)) == (True, 1)


def test_flat_lanes_rule():
    """flat_config: lanes per row a power of two in 4..32 (the kernels' LG 2..5), the smallest FLAT_SLOTS entry of
    elements a lane that covers the row, N beyond FLAT_MAX_N refused; the forward's lanes never fewer for a longer
    row, and the lanes timed best on the H200 where the rule was made (h200-tune-flat-lanes-*.txt,
    h200-tune-flat-bwd-f210efe.txt)."""
    for op in P.ENGINE_OPS:
        for dtype in opdefs.GPU_DTYPES:
            last = 0
            for N in range(1, P.FLAT_MAX_N + 1):
                lg, slots = P.flat_config(op, dtype, N)
                lanes = 1 << lg
                assert lanes in (4, 8, 16, 32) and slots in P.FLAT_SLOTS
                assert lanes * slots >= N, (N, lanes, slots)
                assert slots == P.FLAT_SLOTS[0] or lanes * P.FLAT_SLOTS[P.FLAT_SLOTS.index(slots) - 1] < N
                assert P.OPS[op].backward or lanes >= last, (op, N)
                last = lanes
    timed = {("softmax", torch.bfloat16, 33): 4, ("log_softmax", torch.float32, 33): 4,
             ("softmax", torch.bfloat16, 127): 16, ("log_softmax", torch.bfloat16, 127): 16,
             ("softmax", torch.bfloat16, 255): 32, ("softmax_backward", torch.bfloat16, 63): 32,
             ("softmax_backward", torch.bfloat16, 127): 32, ("log_softmax_backward", torch.bfloat16, 33): 8,
             ("log_softmax_backward", torch.bfloat16, 63): 16, ("log_softmax_backward", torch.bfloat16, 127): 32,
             ("log_softmax_backward", torch.float16, 129): 32}
    for (op, dtype, N), lanes in timed.items():
        assert 1 << P.flat_config(op, dtype, N)[0] == lanes, (op, dtype, N)
    with pytest.raises(P.Unsupported, match="too long"):
        P.flat_config("softmax", torch.bfloat16, P.FLAT_MAX_N + 1)


def test_flat_plans_only_pick_enumerated_kernels(inst):
    """Every flat kernel plan returns, forced or picked by the rules, for every N it holds, op and dtype, is among
    the instantiations (the compile test's list), and every flat instantiation is one of them."""
    picked = set()
    for op in P.ENGINE_OPS:
        for dtype in opdefs.GPU_DTYPES:
            for N in range(1, P.FLAT_MAX_N + 1):
                picked.update(P.plan(3, N, dtype, op, sms=SMS, regime="flat", flat=True).kernels)
                p = P.plan(1 << 22, N, dtype, op, vec=N % P.vec_width(dtype) == 0, window=1, sms=SMS, flat=True)
                if p.regime == "flat":
                    assert set(p.kernels) <= picked
    assert picked == {k for k in inst if "_flat<" in k}
    assert {k.split(",")[3].rstrip(">") for k in picked} == {"2", "3", "4", "5"}  # every lane count


def test_flat_rules():
    """The flat regime: each CTA's chunk of R rows starts on a 16-byte boundary (R x N x size a multiple of 16) and
    holds the step of rows' multiple nearest FLAT_SMEM_BYTES of all inputs (at least one step); the kernel takes flat_config's
    lanes and slots; forced, it needs the tensors' word that they are contiguous and aligned (flat=True)."""
    for dtype in opdefs.GPU_DTYPES:
        size, V = torch.empty((), dtype=dtype).element_size(), P.vec_width(dtype)
        for N in list(range(1, 300)) + list(range(300, P.FLAT_MAX_N + 1, 37)) + [P.FLAT_MAX_N]:
            for op in P.ENGINE_OPS:
                lg, slots = P.flat_config(op, dtype, N)
                R, step, ins = P.flat_rows(op, dtype, N), V // math.gcd(N, V), len(opdefs.OPS[op].inputs)
                assert R >= step and R % step == 0 and R * N * size % 16 == 0, (dtype, N, R)
                chunk = step * N * size * ins  # the bytes of one step of rows
                assert abs(R * N * size * ins - P.FLAT_SMEM_BYTES) <= chunk / 2 or R == step, (dtype, N, R)
                assert R * N * size * ins <= 1.5 * P.FLAT_SMEM_BYTES, (dtype, N, R)
                p = P.plan(1000, N, dtype, op, vec=False, window=1, sms=SMS, regime="flat", flat=True)
                (l,) = p.launches
                assert (p.regime, p.rows, l.grid, l.block, l.sig) == ("flat", R, -(-1000 // R), (P.FLAT_THREADS,),
                                                                      "flat")
                sure = "" if op.endswith("backward") else f",{P.flat_sure(slots)}"
                assert l.kernel == f"{'bwd' if op.endswith('backward') else 'fwd'}_flat<{opdefs.OPS[op].code}," \
                                   f"{P.DT_CODE[dtype]},{slots},{lg}{sure}>"
                assert not sure or (1 << lg) * P.flat_sure(slots) < N  # the slots read without a mask
                assert l.smem == R * N * size * ins
                assert p.at(5 * 10**6).launches[0].grid == -(-5 * 10**6 // R)
    with pytest.raises(P.Unsupported, match="contiguous"):
        P.plan(1000, 127, torch.bfloat16, "softmax", vec=False, window=1, sms=SMS, regime="flat")
    # the forward reads a lane's first flat_sure(slots) slots unmasked: a config with more slots than the fewest that
    # hold the row is refused, not run past the row
    config = P.flat_config
    try:
        P.flat_config = lambda op, dtype, N: (2, 12)
        with pytest.raises(P.OnlineSoftmaxError, match="past the row"):
            P.plan(1000, 33, torch.bfloat16, "softmax", vec=False, window=1, sms=SMS, regime="flat", flat=True)
    finally:
        P.flat_config = config
    # the rules' choice: the measured ranges (FLAT_RANGES), N off the vector, a chunk per SM, the tensors' word
    bf16, f16, f32 = torch.bfloat16, torch.float16, torch.float32
    many = 1 << 22
    picked = {(op, dtype, N) for op in P.ENGINE_OPS for dtype in (bf16, f16, f32) for N in range(1, P.FLAT_MAX_N + 9)
              if P.plan(many, N, dtype, op, vec=N % P.vec_width(dtype) == 0, window=1, sms=SMS,
                        flat=True).regime == "flat"}
    for op, dtype, N in [("softmax", bf16, 255), ("log_softmax", f16, 1023), ("softmax", bf16, 33),
                         ("softmax", f32, 63), ("log_softmax", f32, 199), ("softmax_backward", bf16, 127),
                         ("log_softmax_backward", f16, 129), ("softmax_backward", f32, 63), ("softmax", bf16, 127),
                         ("log_softmax", bf16, 129), ("softmax_backward", bf16, 33), ("log_softmax_backward", bf16, 199)]:
        assert (op, dtype, N) in picked
        assert P.plan(many, N, dtype, op, vec=False, window=1, sms=SMS).regime != "flat"  # no word: not flat
        R = P.flat_rows(op, dtype, N)
        assert P.plan(R * SMS - 1, N, dtype, op, vec=False, window=1, sms=SMS, flat=True).regime != "flat"
    for op, dtype, N in [("softmax", f32, 129),
                         ("softmax", f32, 1023), ("softmax_backward", bf16, 31), ("log_softmax_backward", bf16, 257),
                         ("log_softmax_backward", f32, 33), ("softmax_backward", f32, 127), ("softmax", bf16, 1000), ("softmax", f32, 100)]:
        assert (op, dtype, N) not in picked
    assert all(N % P.vec_width(dtype) and N <= P.FLAT_MAX_N for _, dtype, N in picked)
    assert P.plan(many, 255, bf16, "softmax", window=1, sms=SMS, flat=True, out_dtype=f32).regime != "flat"
    with pytest.raises(P.Unsupported, match="too long"):
        P.plan(1000, P.FLAT_MAX_N + 1, torch.bfloat16, "softmax", vec=False, window=1, sms=SMS, regime="flat",
               flat=True)


def test_flat_from_pointers():
    """run.py's word that every tensor is one contiguous block of rows N apart starting on a 16-byte boundary."""
    al = E._alignment
    assert E._flat(al(4096, 0, 8192), 10, 63, (63,))
    assert E._flat(al(4096, 12288, 8192), 10, 63, (63, 63))
    assert not E._flat(al(4096, 0, 8192), 10, 63, (64,))  # sliced rows
    assert not E._flat(al(4098, 0, 8194), 10, 63, (63,))  # a contiguous view that starts off a boundary
    assert not E._flat(al(4096, 12290, 8192), 10, 63, (63, 63))  # dy off a boundary
    assert not E._flat(al(4096, 0, 8192), 10, 63, (0,))  # expanded rows
    assert E._flat(al(4096, 0, 8192), 1, 63, (100,))  # one row: its stride does not matter


def test_warp_rules():
    f32, bf16 = torch.float32, torch.bfloat16
    assert P.warp_config("softmax", f32, 4, 128) == (5, 1, 2)  # 32 lanes x 1 float4, 2 rows: 32 B in flight
    assert P.warp_config("softmax", bf16, 8, 128) == (4, 1, 2)  # 16 lanes x 8 bf16, 2 rows
    assert P.warp_config("log_softmax", bf16, 8, 128) == (4, 1, 4)  # 16-bit log-softmax: 4 rows, 64 B
    assert P.warp_config("log_softmax", f32, 4, 256) == (5, 2, 1)
    assert P.warp_config("softmax_backward", f32, 4, 128) == (5, 1, 2)
    assert P.warp_config("softmax", f32, 4, 1024) == (5, 8, 1)
    assert P.warp_config("softmax", f32, 4, 4) == (0, 1, 2)
    # the CTA: 128 threads (4 lane groups of 32 x 2 rows), 256 for the 16-bit log-softmax forward (16 of 16 x 4)
    for op, dtype, block, rows in (("softmax", f32, 128, 8), ("log_softmax", bf16, 256, 64),
                                   ("log_softmax_backward", bf16, 128, 16)):
        (launch,) = P.plan(1 << 20, 128, dtype, op).launches
        assert (launch.block, launch.per, launch.grid) == ((block,), (1, rows, 0), (1 << 20) // rows)
    assert P.warp_config("softmax", f32, 1, 1) == (0, 1, 4)
    # the scalar forward on 32 lanes: the row's accesses over the lanes exactly, one row per lane group
    assert P.warp_config("softmax", bf16, 1, 129) == (5, 5, 1)
    assert P.warp_config("log_softmax", f32, 1, 33) == (5, 2, 1)
    assert P.warp_config("softmax_backward", f32, 1, 129) == (5, 8, 1)  # powers of two
    assert P.warp_max_n("softmax", f32, 4) == 1024 and P.warp_max_n("softmax", bf16, 8) == 1024
    assert P.warp_max_n("softmax_backward", f32, 4) == 512 and P.warp_max_n("softmax_backward", bf16, 8) == 1024
    for op in P.ENGINE_OPS:
        for dtype in opdefs.GPU_DTYPES:
            for W in (1, P.vec_width(dtype)):
                for N in range(1, P.warp_max_n(op, dtype, W) + 1, 7):
                    lg, slots, rpt = P.warp_config(op, dtype, W, N)
                    assert (1 << lg) * slots * W >= N
                    assert slots == 1 or lg == 5  # the kernel's TPR is the compile-time 32 when SLOTS > 1
                    assert 1 <= rpt <= P.MAX_RPT


def test_short_unaligned_rows_take_the_scalar_warp_kernel():
    """plan.scalar_short_rows: forward rows of 33..256 elements that the window would read go scalar (W = 1) in the
    warp regime; the backward, aligned rows, rows of 32 or fewer, longer rows, the fused cast and forced regimes
    keep their path."""
    many = 1 << 20
    for dtype in opdefs.GPU_DTYPES:
        W = P.vec_width(dtype)
        for op in ("softmax", "log_softmax"):
            for N in (33, 127, 129, 255, 256 - W + 1):
                for vec, window in ((False, 1), (False, 2), (True, 1)):
                    p = P.plan(many, N if N % W else N + 1, dtype, op, vec=vec, window=window, sms=SMS)
                    assert (p.regime, p.W, p.window) == ("warp", 1, 0), (dtype, op, N, vec, window)
            assert P.plan(many, 8 * W, dtype, op, vec=True, sms=SMS).W == W  # aligned
            assert P.plan(many, 31, dtype, op, vec=False, window=1, sms=SMS).W == (W if W > 1 else 1)
            assert P.plan(many, 257, dtype, op, vec=False, window=1, sms=SMS).W == W
            assert P.plan(many, 127, dtype, op, vec=False, window=1, sms=SMS, regime="warp").W == W
            if dtype != torch.float32:
                p = P.plan(many, 127, dtype, op, vec=False, window=1, sms=SMS, out_dtype=torch.float32)
                assert (p.W, p.window) == (W, 1)
        assert P.plan(many, 127, dtype, "softmax_backward", vec=False, window=1, sms=SMS).W == W


def test_fp32_backward_wide_clusters():
    """plan.wide_slots: fp32 backward rows beyond 8 CTAs of smem_slots take 8 CTAs with more shared-memory slots
    (softmax up to 6, log-softmax up to 7: two CTAs an SM) before 16; few rows keep 16 CTAs; 16-bit data and rows 8
    CTAs hold at smem_slots are untouched."""
    f32, many = torch.float32, 1 << 12
    cap8 = P.PORTABLE_CLUSTER * P.row_capacity("softmax_backward", f32, 4)  # 147456

    def geometry(op, N, M=many, dtype=f32):
        (l,) = P.plan(M, N, dtype, op, sms=SMS).launches
        return l.cluster, int(l.kernel[:-1].split(",")[5])  # (CTAs a row, SSLOTS)

    for op in ("softmax_backward", "log_softmax_backward"):
        assert geometry(op, cap8) == (8, P.smem_slots(op, f32, 4))
        assert geometry(op, cap8 + 4) == (8, 6) and geometry(op, 163840) == (8, 6)
        assert geometry(op, 163840, M=16)[0] == 16  # few rows: the wider cluster
        assert geometry(op, 151936, dtype=torch.bfloat16)[1] <= P.smem_slots(op, torch.bfloat16, 8)
    assert geometry("softmax_backward", 163844)[0] == 16
    assert geometry("log_softmax_backward", 163844) == (8, 7)
    assert geometry("log_softmax_backward", 163844, M=64) == (8, 7)
    # the windows that realign (out rows, or dy, elsewhere than y's) stop at 6 slots: 7 with their static exchange
    # left one CTA an SM
    for window in (2, 3):
        (l,) = P.plan(many, 163840 - 3, f32, "log_softmax_backward", vec=False, window=window, sms=SMS).launches
        assert (l.cluster, l.kernel.split(",")[5]) == (8, "6"), l.kernel
        (l,) = P.plan(many, 163844, f32, "log_softmax_backward", vec=False, window=window, sms=SMS).launches
        assert l.cluster == 16 and l.kernel.endswith(f",16,{window}>"), l.kernel
    assert P.plan(many, 163844, f32, "log_softmax_backward", vec=False, window=1, sms=SMS).launches[0].cluster == 8
    # beyond 7 slots (one CTA an SM) 16 CTAs, whatever the rows
    for N in (180228, 200003, 262144, 262143):
        for M in (64, 4096):
            assert geometry("log_softmax_backward", N, M=M)[0] == 16


def test_block_rules():
    # forward, 16-byte path: 3 accesses per thread, whole warps
    assert P.block_threads("softmax", torch.bfloat16, 8, 4097 + 7) == (192, 3)  # 513 accesses: 6 warps, not 16
    assert P.block_threads("softmax", torch.bfloat16, 8, 1023 + 7) == (64, 3)  # 129 accesses
    assert P.block_threads("softmax", torch.bfloat16, 8, 12289 + 7) == (416, 4)  # 1537: beyond 512 x 3
    assert P.block_threads("softmax", torch.float32, 4, 12289 + 3) == (416, 8)  # 3073: beyond 512 x 4
    assert P.block_threads("softmax", torch.float32, 4, 4096) == (352, 3)
    assert P.block_threads("softmax", torch.float32, 4, 8192) == (512, 4)
    # backward: half the registers, whole warps (the scalar path: pairs of warps)
    assert P.block_threads("softmax_backward", torch.bfloat16, 8, 4097 + 7) == (288, 2)  # 514 accesses
    assert P.block_threads("log_softmax_backward", torch.bfloat16, 8, 1023 + 7) == (96, 2)  # 129 accesses
    assert P.block_threads("softmax_backward", torch.bfloat16, 1, 1000) == (128, 8)
    assert P.block_threads("softmax", torch.float32, 1, 1000) == (128, 16)
    for op in P.ENGINE_OPS:
        for dtype in opdefs.GPU_DTYPES:
            W = P.vec_width(dtype)
            for N in (P.warp_max_n(op, dtype, W) + W, 4096, 8192, P.ROW_MAX_THREADS * P.reg_slots(op, dtype, W) * W):
                threads, slots = P.block_threads(op, dtype, W, N)
                low = P.VEC_ROW_MIN_THREADS
                assert low <= threads <= P.ROW_MAX_THREADS and threads % 32 == 0 and threads * slots * W >= N


@pytest.mark.parametrize("dtype", opdefs.GPU_DTYPES)
@pytest.mark.parametrize("op", list(P.ENGINE_OPS))
def test_group_rules(op, dtype, monkeypatch):
    """plan.group_form: rows beyond the widest cluster take groups of G CTAs (as few as hold the row, one an SM at
    most) where M x G fills the chip's CTA slots (GROUP_CTAS_PER_SM an SM); fewer rows, the scalar path, out rows or
    dy starting elsewhere (P 2, 3), the fused cast and cross-entropy keep the split. Each CTA holds its share
    (softmax.cu's CH) and its slots are those the share fills; a second launch, a CTA a row, writes what a group's
    CTAs abandoned; the workspace is the ticket and, a row, an arrival word, G pairs and G ranks; Plan.at moves a group plan as plan() makes it. run._fitted_plan takes the split where the device does not
    hold twice G CTAs at once, or cannot tell. All of it only where GROUP_AUTOMATIC (on unless
    ONLINESOFTMAX_GROUPS=0): the split otherwise, the group regime when forced."""
    W = P.vec_width(dtype)
    N = P.max_cluster(op, dtype) * P.row_capacity(op, dtype, W) + 3 * W
    G = P.group_config(op, dtype, W, N)[0]
    rows = -(-P.GROUP_CTAS_PER_SM * SMS // G)
    monkeypatch.setattr(P, "GROUP_AUTOMATIC", False)
    assert P.plan(4096, N, dtype, op, sms=SMS).regime == "split"
    assert P.plan(4096, N, dtype, op, sms=SMS, regime="group").regime == "group"
    monkeypatch.setattr(P, "GROUP_AUTOMATIC", True)
    for window, vec in ((0, True), (1, False)):
        p = P.plan(rows, N, dtype, op, vec=vec, window=window, sms=SMS)
        Nc = N + (W - 1 if window else 0)
        assert p.regime == "group" and p.parts == P.group_config(op, dtype, W, Nc)[0] <= SMS, p
        l, fix = p.launches
        assert l.grid == rows * p.parts and l.block == (P.GROUP_THREADS,) and l.cluster == 1 and l.sig == "group"
        assert (fix.grid, fix.block, fix.cluster, fix.sig) == (rows, (P.GROUP_FIX_THREADS,), 1, "fix")
        assert p.wait == P.GROUP_WAIT_NS > 0
        o, dt, w, threads, slots, sslots, pw = (int(a) for a in l.kernel[l.kernel.index("<") + 1:-1].split(","))
        assert fix.kernel == l.kernel.split("<")[0] + f"_fix<{o},{dt},{w},{pw}>"
        assert (w, threads, slots, pw) == (W, P.GROUP_THREADS, P.reg_slots(op, dtype, W), window)
        share = -(-(-(-Nc // W)) // p.parts)
        assert share <= threads * (slots + sslots) and sslots == max(0, -(-share // threads) - slots)
        words = 2 + 2 * p.parts + 2 * ((p.parts + 1) // 2)  # the arrival word, G pairs, G abandoned ranks
        assert l.smem == P.smem_bytes(op, W, threads, sslots) and p.workspace == 2 + words * rows
        assert P.plan(rows - 1, N, dtype, op, vec=vec, window=window, sms=SMS).regime == "split"
        big = P.plan(5 * P.stable_rows(SMS), N, dtype, op, vec=vec, window=window, sms=SMS)
        assert big.at(P.stable_rows(SMS) + 7) == P.plan(P.stable_rows(SMS) + 7, N, dtype, op, vec=vec,
                                                        window=window, sms=SMS)
    assert P.plan(4096, N, dtype, op, vec=False, sms=SMS).regime == "split"  # the scalar path
    for window in (2, 3) if opdefs.OPS[op].backward else (2,):
        assert P.plan(4096, N, dtype, op, vec=False, window=window, sms=SMS).regime == "split"
    if op == "softmax":
        assert P.plan(4096, N, dtype, op, sms=SMS, split_form=False).regime == "split"
    huge = (SMS + 1) * P.GROUP_THREADS * (P.reg_slots(op, dtype, W) + P.smem_slots(op, dtype, W)) * W
    assert P.plan(4096, huge, dtype, op, sms=SMS).regime == "split"  # more than one CTA an SM a row
    with pytest.raises(P.Unsupported):
        P.plan(4096, huge, dtype, op, sms=SMS, regime="group")
    # the device's count of resident CTAs against twice G
    for ctas, regime in ((2 * G, "group"), (2 * G - 1, "split"), (None, "split")):
        monkeypatch.setattr(E, "_plans", BoundedCache(E.PLAN_CACHE))
        monkeypatch.setattr(E, "kernel", lambda *a, c=ctas: SimpleNamespace(fits=True, resident=1, resident_ctas=c))
        assert E._fitted_plan(4096, N, dtype, op, True, 1, 1, "rows", SMS, None, 0, "split").regime == regime


def test_split_rules():
    parts, chunk = P.split_parts(1, 262144, 4, SMS)
    assert parts * chunk * 4 >= 262144 and parts >= 64
    parts, chunk = P.split_parts(32, 131072, 8, SMS)
    assert 32 * parts >= 2 * SMS and chunk % P.SPLIT_THREADS == 0
    assert P.split_parts(3, 1, 4, SMS)[0] == 1
    assert P.split_parts(3, 700, 1, SMS, min_parts=2)[0] >= 2
    p = P.plan(1, 262144 + 1, torch.float32, "softmax", vec=False, sms=SMS)  # few rows on the scalar path
    assert p.regime == "split" and p.workspace == 2 * p.parts
    assert [l.sig for l in p.launches] == ["stats", "apply"]


def test_strided_rules():
    f32, bf16 = torch.float32, torch.bfloat16
    # backward over dim 0 of 8192 x 8192 fp32: 128-byte row pieces (8 lanes of float4), 64 rows of threads; the
    # strips (2 MB each with y and dy) pass the L2 budget at any grid: one CTA per SM
    lanes, rows, strips, cap = P.strided_tile("softmax_backward", f32, 4, 1, 8192, 8192, SMS)
    assert (lanes, rows, strips, cap) == (8, 64, 256, SMS) and lanes * 4 * 4 == P.STRIDED_PIECE
    assert P.plan(1, 8192, f32, "softmax_backward", inner=8192, layout="strided", sms=SMS,
                  regime="strided").launches[0].grid == cap
    # channels C = 1000 forward: 128 KB strips, as many CTAs as the budget holds (up to 2 per SM)
    lanes, rows, strips, cap = P.strided_tile("softmax", f32, 4, 8, 1000, 4096, SMS)
    assert lanes == 8 and cap == P.STRIDED_L2_BUDGET // (1000 * 128) <= P.STRIDED_CTAS_PER_SM * SMS
    # 16-bit data: 128-byte pieces are 8 lanes of 8 elements, or 64 lanes of one; one element an access on an odd
    # width halves the lanes until the strips give half the SMs a CTA (dim 0 of 4097 x 1001: 126 strips of 8)
    assert P.strided_tile("softmax", bf16, 8, 1, 8192, 8192, SMS)[:3] == (8, 64, 128)
    assert P.strided_tile("softmax", bf16, 1, 64, 4097, 1001, SMS)[0] == 64
    for dtype in (f32, bf16):
        assert P.strided_tile("softmax", dtype, 1, 1, 4097, 1001, SMS)[:3] == (8, 64, 126)
    # the grid of 16-bit 16-byte accesses: one CTA an SM (their launch bound), where the rest hold two
    assert P.strided_tile("softmax", bf16, 8, 64, 250, 4096, SMS)[3] == SMS
    assert P.strided_tile("softmax", f32, 1, 64, 1000, 4095, SMS)[3] > SMS
    assert P.strided_tile("softmax", f32, 4, 64, 250, 4096, SMS)[3] == 2 * SMS
    # short columns: lanes across inner instead of idle rows
    lanes, rows, strips, cap = P.strided_tile("softmax", f32, 4, 64, 8, 4096, SMS)
    assert rows == 8 and lanes == 64 and lanes * rows <= P.STRIDED_THREADS
    p = P.plan(4, 300, bf16, "softmax_backward", inner=24, layout="strided", sms=SMS)  # N > 256: not chan
    assert p.regime == "strided" and p.W == 8 and p.items == 4 * p.strips
    assert P.plan(4, 300, bf16, "softmax", inner=20, layout="strided", sms=SMS).W == 1


def test_bands_rules():
    f32, bf16 = torch.float32, torch.bfloat16
    # dim 0 of 8192 x 8192: 128-byte row pieces (8 lanes of 16 bytes), 32 rows of threads, 14 accesses a thread
    # forward in registers (56 of data) and up to 24 in shared memory (96 KB a CTA), 7 + 12 backward (y and dy): the
    # fewest bands that hold N (7 / 14 of at most 1216 / 608 rows), shared evenly (23 / 12 slots)
    assert P.bands_config("softmax", f32, 4, 8192, 8192) == (8, 32, 14, 23, 256, 7)
    assert P.bands_config("softmax_backward", bf16, 8, 8192, 8192) == (8, 32, 7, 12, 128, 14)
    # even bands: 2048 rows in two of 1024 (not 1216 and 832), 1000 in one; a band's slots in shared memory
    assert P.bands_config("softmax", bf16, 8, 2048, 8192)[2:] == (14, 18, 128, 2)
    assert P.bands_config("softmax", f32, 4, 1000, 4096)[3:] == (18, 128, 1)
    assert P.bands_smem("softmax", 24) == P.bands_smem("softmax_backward", 12) == 96 * 1024
    # one element an access (an odd width): 32 fp32 / 64 16-bit lanes, 16 / 8 accesses in registers, none in shared
    # memory (cp.async copies 16 bytes)
    assert P.bands_config("softmax", f32, 1, 4097, 1001) == (32, 8, 16, 0, 32, 33)
    assert P.bands_config("log_softmax_backward", bf16, 1, 4097, 1001) == (64, 4, 8, 0, 16, 129)
    # narrow columns: as many lanes as the columns need, the rest of the CTA down N
    assert P.bands_config("softmax", f32, 1, 5, 1)[:4] == (1, 256, 16, 0)
    p = P.plan(8, 2000, f32, "softmax", inner=4096, layout="strided", regime="bands", sms=SMS)
    (l, fix), G = p.launches, p.parts
    assert p.regime == "bands" and p.W == 4 and G == 2 and p.chunk == 1024 and p.items == 8 * p.strips
    assert (l.sig, fix.sig) == ("bands", "bandsfix") and l.block == fix.block == (8, 32)
    assert l.grid == p.items * G and fix.grid == p.items and l.kernel == "fwd_bands<0,0,4,14>"
    assert l.smem == fix.smem == P.bands_smem("softmax", 18)  # bands_fix stages an abandoned band as its CTA did
    # the workspace: the ticket and the arrival words (zeroed), then per strip G x cols pairs and G ranks
    words, head = P.bands_workspace(p.items, G, 32)
    assert head == 2 + p.items + p.items % 2 and words == head + p.items * (2 * G * 32 + 2 * ((G + 1) // 2))
    assert p.workspace == words and p.at(3).workspace == P.bands_workspace(3 * p.strips, G, 32)[0]
    assert p.at(3).launches[0].grid == 3 * p.strips * G
    # a group must fit half of what the SMs hold at once (the occupancy query checks it again at run time)
    longest = P.BANDS_CTAS_PER_SM * SMS // 2 * 1216  # bands of 32 rows of threads x (14 + 24) accesses
    assert P.plan(1, longest, f32, "softmax", inner=64, layout="strided", regime="bands", sms=SMS).parts * 2 \
        == P.BANDS_CTAS_PER_SM * SMS
    with pytest.raises(P.Unsupported, match="bands"):
        P.plan(1, longest + 1, f32, "softmax", inner=64, layout="strided", regime="bands", sms=SMS)
    # the automatic plans, on the 16-byte path: where the strided strips leave half the SMs idle and a strip has more
    # than two bands, both ways; the backward where they overflow the L2 budget at one CTA an SM (fp32: N above about
    # 1000 at 132 strips or more) or four times (16-bit: dim 0 of 8192^2, not 67 MB in flight); not the forward of
    # many strips, one element an access, 16-bit C = 1000, or strips of one or two bands
    auto = lambda M, N, inner, dtype=f32, op="softmax_backward", vec=True: P.plan(  # noqa: E731
        M, N, dtype, op, inner=inner, layout="strided", sms=SMS, vec=vec).regime
    assert auto(1, 8192, 8192) == auto(4, 2000, 4096) == auto(1, 16384, 4096, op="log_softmax_backward") == "bands"
    assert auto(1, 8192, 8192, bf16) == auto(1, 8192, 8192, torch.float16, "log_softmax_backward") == "bands"
    assert auto(4, 2000, 4096, bf16) == auto(1, 2048, 8192, bf16) == auto(1, 8192, 8192, bf16, "softmax") == "strided"
    assert auto(8, 1000, 4096) == auto(4, 1900, 4096) == "bands"  # 34 / 64 MB in flight: more than the budget
    assert auto(1, 1000, 4096) == auto(8, 1000, 4096, bf16) == "strided"  # 33 MB: within it
    assert auto(1, 4097, 1001) == "period"  # one element an access on the strided kernel: test_period_rules
    assert auto(1, 8192, 8192, op="softmax") == "columns"
    # few strips: 24 of 5 bands, 6 of 58 (the forward too), 32 of 2 (not), 16 of 1 (not), 64 of 2 forward (not); and
    # not where a strided CTA's strip holds less than BANDS_FEW_STRIPS_BYTES of input (3 and 4 bands, 94 and 62.5 KB),
    # at 128 KB (dim 0 of 2048^2 bf16) it does
    assert auto(3, 3000, 512, bf16) == auto(3, 70000, 40, bf16, "softmax") == auto(3, 70000, 40) == "bands"
    assert auto(8, 1000, 256, bf16) == auto(2, 500, 256) == auto(1, 2048, 2048, op="softmax") == "strided"
    assert auto(4, 3000, 16) == auto(3, 2000, 72) == auto(3, 2000, 72, bf16) == "strided"
    assert auto(1, 2048, 2048, bf16) == auto(3, 4500, 64) == "bands"
    assert auto(8, 90000, 64) == "strided"  # 149 bands of 608 rows: more than half of what the SMs hold
    assert registry.get("cuda.softmax_bands").algo_bytes(64, 1000, 4) == opdefs.OPS["softmax"].ideal_bytes(
        64, 1000, 4)


def test_period_rules():
    """The period regime: automatic for one slab (dim 0) of PERIOD_MIN_BYTES or more whose inner is not whole 16-byte
    vectors, inner >= 64, every op and dtype; not for smaller slabs (measured slower: 1025 x 1001), several slabs
    ((16, 300, 45, 45)), whole vectors (W > 1: the strided, columns or bands kernels), unaligned pointers, narrow
    inner or short columns (chan). Forced, it takes any of these whose slabs start on 16 bytes and refuses the rest
    with the reason. Its geometry: g = V / gcd(inner, V) rows a period, chunks of at most 512 threads, about one
    stats CTA an SM."""
    f32, bf16 = torch.float32, torch.bfloat16
    auto = lambda M, N, inner, dtype=f32, op="softmax", vec=True: P.plan(  # noqa: E731
        M, N, dtype, op, inner=inner, layout="strided", sms=SMS, vec=vec).regime
    for op in opdefs.OPS:
        if opdefs.OPS[op].code >= 0:
            assert auto(1, 4097, 1001, op=op) == auto(1, 2049, 3001, bf16, op) == auto(1, 60000, 70, bf16, op) \
                == "period"
    assert auto(16, 300, 2025) == auto(1, 4097, 1001, vec=False) == auto(1, 30000, 63) == "strided"
    floor = P.PERIOD_MIN_BYTES // 4  # fp32 elements of the smallest slab it takes
    assert auto(1, floor // 1001 + 1, 1001) == "period" and auto(1, floor // 1001, 1001) == "strided"
    assert auto(1, 1025, 1001) == auto(1, 1025, 1001, bf16) == auto(1, 999, 70, bf16) == "strided"
    assert "period" not in {auto(1, 4097, 1000), auto(1, 4097, 1000, bf16, "softmax_backward")}  # whole vectors
    assert auto(1, 200, 1001) == "chan"
    forced = lambda M, N, inner, dtype=f32, vec=True: P.plan(  # noqa: E731
        M, N, dtype, "softmax_backward", inner=inner, layout="strided", sms=SMS, vec=vec, regime="period")
    assert forced(16, 300, 2025).regime == forced(3, 40, 100, bf16).regime == forced(1, 999, 70).regime == "period"
    for args, why in (((3, 301, 2025, bf16), "slabs"), ((1, 4097, 63), "inner >= 64"),
                      ((1, 4097, 1001, f32, False), "aligned: False"), ((1, 1 << 22, 1001), "2\\^31")):
        with pytest.raises(P.Unsupported, match=why):
            forced(*args)
    assert P.period_geometry(f32, 4097, 1001) == (4, 1001, 512, 2, 1001, 1025)
    assert P.period_geometry(bf16, 2049, 3001) == (8, 3001, 512, 6, 3001, 257)
    assert P.period_geometry(bf16, 999, 70) == (4, 35, 64, 1, 70, 250)
    assert P.period_geometry(f32, 300, 5003) == (4, 5003, 512, 10, 2048, 75)
    p = P.plan(1, 4097, f32, "softmax", inner=1001, layout="strided", sms=SMS)
    assert (p.parts, p.chunk) == (65, 16) and p.launches[0].grid == p.parts * p.strips <= SMS  # 1025 periods
    assert len(p.launches) == 1 and p.launches[0].block == (512,)
    # every CTA one item: its 16 periods kept from the stats to the apply, after the stats' T x V pairs
    assert p.keep == 16 and p.launches[0].smem == 8 * 512 * 4 + 16 * 512 * 16
    b = P.plan(1, 4097, f32, "softmax_backward", inner=1001, layout="strided", sms=SMS)
    assert b.keep == 12 and b.launches[0].smem == 8 * 512 * 4 + 12 * 512 * 16 * 2 <= P.PERIOD_SMEM  # y, dy: 12 of 16
    h = P.plan(1, 8193, bf16, "softmax_backward", inner=1001, layout="strided", sms=SMS)  # 16-bit: pairs of 8 slots
    assert h.keep == 12 and h.launches[0].smem == 8 * 512 * 8 + 12 * 512 * 16 * 2 <= P.PERIOD_SMEM  # 12 of 16
    f = P.plan(1, 12289, bf16, "softmax", inner=1001, layout="strided", sms=SMS)
    assert f.keep == 24 and f.launches[0].smem == 8 * 512 * 8 + 24 * 512 * 16 <= P.PERIOD_SMEM  # 24 of 24: 224 KB
    q = forced(16, 300, 2025).at(1000)  # more slabs: the same bands, the workspace of 1000, a CTA an SM at most
    assert 1000 * q.parts * q.strips > SMS and q.launches[0].grid == SMS
    assert forced(16, 300, 2025).keep == 0 and q.launches[0].smem == 8 * 512 * 4  # CTAs of several items keep nothing
    assert q.workspace == P.period_workspace(f32, 1000, 300, 2025, q.parts)


@pytest.mark.parametrize("shape, dim, dtype, regime, bwd_regime", AUTOMATIC_PLANS, ids=case_id)
def test_automatic_plans_without_a_gpu(monkeypatch, shape, dim, dtype, regime, bwd_regime):
    """tests/plan_cases.py's plans, from run's own planning of CPU tensors (strides, alignment, the rules) with the
    device's queries stubbed at 132 SMs: every group of CTAs taken as resident and every cluster as fitting, so the
    fallbacks that the GPU's occupancy decides are test_gpu_production.py's to check; the backward's dy in its own
    strides, as there."""
    monkeypatch.setattr(P, "GROUP_AUTOMATIC", True)
    stub_device(monkeypatch, SMS)
    monkeypatch.setattr(E, "_group_runs", lambda p, device: True)
    monkeypatch.setattr(E, "_one_round", lambda p, narrower, device: p)
    monkeypatch.setattr(E, "kernel", lambda *a: SimpleNamespace(fits=True))
    monkeypatch.setattr(E, "_plans", BoundedCache(E.PLAN_CACHE))
    x = torch.empty(shape, dtype=dtype)
    out = torch.empty_like(x)
    for op in ("softmax", "log_softmax"):
        got = (E._plan_call(op, (x,), out, dim, None)[0].regime,
               E._plan_call(op + "_backward", (out, torch.empty_like(x)), torch.empty_like(x), dim, None)[0].regime)
        assert got == (regime, bwd_regime), (shape, dim, dtype, op)


def test_sanitizer_driver_covers_every_regime():
    """benchmarks/sanitize_driver.py (compute-sanitizer's workload) forces every variant on its regime's cases: each
    regime has cases (bands had none, and the driver stopped at its first bands variant), and the bands cases
    include a strip of several bands, so the group's exchange runs under the sanitizer."""
    import importlib.util
    from pathlib import Path
    path = Path(__file__).resolve().parents[1] / "benchmarks" / "sanitize_driver.py"
    spec = importlib.util.spec_from_file_location("sanitize_driver", path)
    driver = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(driver)
    for name in V.VARIANT_NAMES:
        op, regime = registry.get(name).op, name.rsplit("_", 1)[1]
        assert regime in P.REGIMES
        for dtype in opdefs.GPU_DTYPES:
            assert driver.regime_cases(op, regime, dtype), (name, dtype)
    for op in ("softmax", "softmax_backward"):
        cases = driver.regime_cases(op, "bands", torch.float32)
        assert max(P.bands_config(op, torch.float32, 1, N, 1)[5] for _, N in cases) > 1, (op, cases)


def test_columns_rules():
    # softmax over dim 0 of 8192 x 8192 fp32 (the brief's case): 128-byte row pieces (8 lanes of float4), 64 rows
    # of threads x (4 in registers + 12 in smem), a band of 1024 rows per CTA, a cluster of 8 per strip
    p = P.plan(1, 8192, torch.float32, "softmax", inner=8192, layout="strided", sms=SMS)
    (l,) = p.launches
    assert p.regime == "columns" and l.block == (8, 64) and l.cluster == 8 and l.smem == 96 * 1024
    assert p.strips == 8192 // 32 and l.grid == p.items == p.strips
    assert registry.get("cuda.softmax_columns").algo_bytes(8192, 8192, 4) == opdefs.OPS["softmax"].ideal_bytes(
        8192, 8192, 4)
    # short columns: lanes across inner instead of idle threads down N
    assert P.columns_config("softmax", torch.float32, 4, 8, 4096) == (32, 1, 0)
    # the automatic plan takes it only where the band needs shared memory with 128-byte pieces; elsewhere the
    # strided kernel or bands (test_bands_rules: C = 1000 fits registers; 16-bit dim 0 of 8192^2 would take 64-byte
    # pieces; one element an access), as beyond a cluster of 8 and backward
    assert P.columns_preferred(torch.float32, 4, P.columns_config("softmax", torch.float32, 4, 8192, 8192))
    for dtype, N, inner in ((torch.float32, 1000, 4096), (torch.bfloat16, 1000, 4096), (torch.bfloat16, 8192, 8192),
                            (torch.float32, 4097, 1001)):
        W = P.vec_width(dtype) if inner % P.vec_width(dtype) == 0 else 1
        assert P.columns_config("softmax", dtype, W, N, inner) is not None
        assert P.plan(8, N, dtype, "softmax", vec=W > 1, inner=inner, layout="strided", sms=SMS).regime == "strided"
    assert P.plan(1, 1 << 17, torch.float32, "softmax", inner=64, layout="strided", sms=SMS).regime == \
        "bands"  # beyond a cluster of 8, 2 strips: 108 bands each (test_bands_rules)
    assert P.plan(1, 8192, torch.bfloat16, "softmax_backward", inner=64, layout="strided", sms=SMS).regime == \
        "bands"  # one strip: 14 bands' CTAs where the strided kernel has one
    for dtype in opdefs.GPU_DTYPES:  # every dtype reaches N = 8192 with 64-byte pieces at least
        lanes, c, _ = P.columns_config("log_softmax", dtype, P.vec_width(dtype), 8192, 8192)
        assert lanes * 16 >= 64 and c <= P.PORTABLE_CLUSTER


def test_chan_rules():
    # the channel softmax, (16, 19, 512, 1024) over dim 1: a thread per 4-byte access of inner (two bf16
    # columns), the 19 rows in 20 registers' worth, 256 threads a CTA, no cluster, no shared memory
    bf16, f32 = torch.bfloat16, torch.float32
    p = P.plan(16, 19, bf16, "softmax", inner=512 * 1024, layout="strided", sms=SMS)
    (l,) = p.launches
    assert p.regime == "chan" and p.W == 2 and l.kernel == "fwd_chan<0,2,2,20,1>"
    assert l.block == (P.CHAN_THREADS,) and l.cluster == 1 and l.smem == 0
    assert p.strips == 512 * 512 and p.items == 16 * p.strips and l.grid == p.items // P.CHAN_THREADS
    assert p.at(3).launches[0].grid == 3 * p.strips // P.CHAN_THREADS
    # one element an access: fp32, unaligned data, odd inner
    assert P.plan(16, 19, f32, "softmax", inner=4096, layout="strided", sms=SMS).kernels == ("fwd_chan<0,0,1,20,1>",)
    assert P.plan(16, 19, bf16, "softmax", vec=False, inner=4096, layout="strided", sms=SMS).W == 1
    assert P.plan(16, 19, bf16, "softmax", inner=4095, layout="strided", sms=SMS).W == 1
    # backward alike; CAP is N rounded up to 4 up to 32 rows; then G = 2, 4, 8 threads a column, a band of N / G
    # rows each (rounded up to 4; at most 20 up to G = 8), 256 / G columns a CTA (the ADE20K-style C = 150: 8 bands
    # of 20); 257 rows and more, or 2^31 elements a slice: the columns / strided kernels
    assert P.plan(2, 21, f32, "log_softmax_backward", inner=100, layout="strided", sms=SMS).kernels == \
        ("bwd_chan<3,0,1,24,1>",)
    assert [P.chan_config(f32, n, 64, True) for n in (1, 4, 5, 32, 33, 40, 41, 64, 81, 150, 161, 256)] == \
        [(1, 4, 1), (1, 4, 1), (1, 8, 1), (1, 32, 1), (1, 20, 2), (1, 20, 2), (1, 12, 4), (1, 16, 4), (1, 12, 8),
         (1, 20, 8), (1, 24, 8), (1, 32, 8)]
    assert P.chan_config(f32, 257, 64, True) is None and P.chan_config(f32, 16, 1 << 27, True) is None
    p = P.plan(8, 150, bf16, "softmax_backward", inner=256 * 256, layout="strided", sms=SMS)
    (l,) = p.launches
    assert p.regime == "chan" and l.kernel == "bwd_chan<2,2,2,20,8>" and l.block == (P.CHAN_THREADS,)
    assert l.grid == 8 * 256 * 128 // (P.CHAN_THREADS // 8)
    assert P.plan(2, 257, f32, "softmax", inner=4096, layout="strided", sms=SMS).regime == "strided"
    assert P.plan(2, 19, f32, "softmax", inner=4096, layout="strided", sms=SMS, regime="strided").regime == "strided"
    with pytest.raises(P.Unsupported, match="chan"):
        P.plan(2, 300, f32, "softmax", inner=64, layout="strided", sms=SMS, regime="chan")
    for op in P.ENGINE_OPS:
        assert registry.get(f"cuda.{op}_chan").algo_bytes(64, 32, 2) == opdefs.OPS[op].ideal_bytes(64, 32, 2)


def test_forced_regimes_refuse_with_reasons(monkeypatch):
    f32 = torch.float32
    with pytest.raises(P.Unsupported, match="warp"):
        P.plan(4, 2048, f32, "softmax", regime="warp")
    # a geometry forced as benchmarks/tune_rows.py does, too small for the row: refused, not run on part of it
    with monkeypatch.context() as m:
        m.setattr(P, "cluster_config", lambda *a, **k: (2, 512, 5))
        assert P.plan(4, 2 * 512 * 9 * 4, f32, "softmax_backward", regime="cluster").launches[0].cluster == 2
        with pytest.raises(P.Unsupported, match="hold"):
            P.plan(4, 2 * 512 * 9 * 4 + 4, f32, "softmax_backward", regime="cluster")
        m.setattr(P, "block_threads", lambda *a, **k: (128, 4))
        with pytest.raises(P.Unsupported, match="hold"):
            P.plan(4, 128 * 4 * 4 + 4, f32, "softmax", regime="block")
    p = P.plan(4, 4097, f32, "softmax_backward", vec=False, regime="cluster")  # the scalar path: registers only
    assert (p.W, p.launches[0].cluster, p.launches[0].smem) == (1, 2, 0)
    with pytest.raises(P.Unsupported, match="CTAs per row"):
        P.plan(4, 16 * P.ROW_MAX_THREADS * P.reg_slots("softmax_backward", f32, 1) + 1, f32, "softmax_backward",
               vec=False, regime="cluster")
    with pytest.raises(P.Unsupported, match="backward only"):
        P.plan(4, 4097, f32, "softmax", vec=False, regime="cluster")
    with pytest.raises(P.Unsupported, match="fit one CTA"):
        P.plan(4, 40000, f32, "softmax", regime="block")
    assert P.plan(4, 8, f32, "softmax", regime="cluster").launches[0].cluster == 2  # forced: at least 2
    assert P.plan(4, 700, f32, "softmax", regime="split").parts >= 2


# ---- layouts (pure Python) ------------------------------------------------------------------------------


def test_row_layout_detection():
    assert E._row_layout((4, 5, 6), (30, 6, 1), 2) == (20, 6, 6)
    assert E._row_layout((4, 5, 6), (60, 12, 1), 2) == (20, 6, 12)  # padded rows: one row stride
    assert E._row_layout((4, 5, 6), (70, 12, 1), 2) is None  # leading dims do not collapse
    assert E._row_layout((4, 6), (1, 4), 1) is None  # transposed: the dim has stride 4
    assert E._row_layout((4, 1), (1, 4), 1) == (4, 1, 1)  # N = 1: its stride is irrelevant
    assert E._row_layout((5, 96), (0, 1), 1) == (5, 96, 0)  # expanded rows
    assert E._row_layout((7,), (1,), 0) == (1, 7, 7)
    assert E._row_layout((4, 5, 6), (30, 6, 1), 1) is None
    assert E._is_contiguous((4, 5, 6), (30, 6, 1)) and not E._is_contiguous((4, 6, 5), (30, 1, 6))
    assert E._is_contiguous((1, 5), (99, 1))


# ---- the registry variants ------------------------------------------------------------------------------


def test_variants_registered():
    names = [v.name for v in registry.variants(backend="cuda") if v.name in V.VARIANT_NAMES]
    assert len(names) == len(V.VARIANT_NAMES) == 38  # 4 ops x 9 regimes, and columns for the 2 forward ops
    for op in P.ENGINE_OPS:
        for regime in P.REGIMES:
            if regime == "columns" and opdefs.OPS[op].backward:
                continue
            if regime == "period":  # a non-last dim only: no variant on rows (test_gpu_production forces it)
                assert f"cuda.{op}_period" not in V.VARIANT_NAMES
                continue
            v = registry.get(f"cuda.{op}_{regime}")
            assert v.op == op and v.device == "cuda" and v.backend == "cuda"
            assert set(v.dtypes) == set(opdefs.GPU_DTYPES)


def test_variant_supports_and_bytes():
    f32, bf16 = torch.float32, torch.bfloat16
    assert registry.get("cuda.softmax_warp").supports(8, 1024, f32) is None
    assert "too long" in registry.get("cuda.softmax_warp").supports(8, 1025, f32)
    assert registry.get("cuda.softmax_cluster").supports(8, 1001, f32) is None  # odd N: the window path
    assert registry.get("cuda.softmax_cluster").supports(8, 262144, bf16) is None
    assert registry.get("cuda.softmax_backward_cluster").supports(2, 262144, f32) is None  # C = 16
    assert "fit one CTA" in registry.get("cuda.softmax_block").supports(8, 40000, f32)
    for op in P.ENGINE_OPS:
        ideal = opdefs.OPS[op].ideal_bytes(64, 4096, 2)
        for regime in ("warp", "block", "cluster", "group"):
            assert registry.get(f"cuda.{op}_{regime}").algo_bytes(64, 4096, 2) == ideal
        for regime in ("split", "strided"):
            assert registry.get(f"cuda.{op}_{regime}").algo_bytes(64, 4096, 2) > ideal


def test_variant_resources_without_gpu():
    for name, M, N in [("cuda.softmax_warp", 4096, 128), ("cuda.log_softmax_block", 64, 8192),
                       ("cuda.softmax_cluster", 64, 131072), ("cuda.softmax_backward_split", 1, 262144),
                       ("cuda.log_softmax_backward_strided", 8, 300)]:
        r = registry.get(name).resources(M, N, torch.bfloat16)
        assert r["registers"] > 0 and r["spill_stores"] == 0 and r["stack"] == 0, (name, r)
    r = registry.get("cuda.softmax_split").resources(1, 262144, torch.float32)
    assert set(r["per_kernel"]) == {"fwd_split_stats<0,4>", "fwd_split_apply<0,0,4>"}


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU path")
def test_no_gpu_is_unavailable():
    x = torch.zeros(2, 8)
    assert "GPU" in registry.get("cuda.softmax_warp").available()
    with pytest.raises(Unavailable):
        E.forward(x, torch.empty_like(x), 1, False)


def _sass(name: str) -> list[str]:
    """The opcodes (predicates dropped) of kernel `name`'s own function in its compiled module (cuobjdump -sass, the
    copy Triton ships; the module holds the source's plain kernels too)."""
    import pathlib
    import re
    import subprocess

    from fakes import cuobjdump

    cu = cuobjdump()
    mod = K.module(name, ARCH)
    path = pathlib.Path(os.environ.get("TMPDIR", "/tmp")) / f"sass_{os.getpid()}.cubin"
    path.write_bytes(mod.cubin)
    try:
        out = subprocess.run([str(cu), "-sass", str(path)], capture_output=True, text=True, check=True).stdout
    finally:
        path.unlink()
    mangled = mod.resources(name)["mangled"]
    ops, mine = [], False
    for line in out.splitlines():
        if "Function : " in line:
            mine = line.split("Function : ")[1].strip() == mangled
        elif mine:
            m = re.search(r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)", line)
            if m:
                ops.append(m.group(1))
    assert ops, f"no SASS for {name} ({mangled})"
    return ops


def test_cross_entropy_reads_what_the_kernel_before_wrote_after_the_grid_wait():
    """ce_row and ce_loss are programmatic launches: each may start while the kernel before it (ce_targets, ce_row)
    still runs, and reads what that one writes (the reduction's scale; the rows' losses) only after
    griddepcontrol.wait (ACQBULK). A plain read through a const __restrict__ pointer compiles to ld.global.nc, data
    read-only for the kernel's whole life, which ptxas may move above the wait: it did so with ce_row's scale in
    every instantiation, and under load on the H200 a call's gradient took the scale of the call before
    (h200-pytest-gpu-60daf5a-6be09dc.txt). ce_row: before the wait only the rows' 16-byte accesses (and their
    cp.async) and the 64-bit target, the scale a coherent load after it; ce_loss: no non-coherent load at all."""
    plans = [P.cross_entropy_plan(67, 50257, torch.bfloat16, vec=False, window=1, sms=SMS),  # window, smem slots
             P.cross_entropy_plan(33, 50257, torch.float32, vec=False, window=1, sms=SMS),  # window, a cluster of 8
             P.cross_entropy_plan(67, 32000, torch.bfloat16, sms=SMS)]  # aligned
    for name in sorted({l.kernel for p in plans for l in p.launches}):
        ops = _sass(name)
        wait = ops.index("ACQBULK")
        early = [op for op in ops[:wait] if op.startswith("LDG") and not op.startswith(("LDGDEPBAR", "LDGSTS"))]
        assert all(".128" in op or op == "LDG.E.64.CONSTANT" for op in early), (name, early)
        assert "LDG.E.STRONG.GPU" in ops[wait:], name
    for dt in P.DT_CODE.values():
        ops = _sass(f"ce_loss<{dt}>")
        loads = [i for i, op in enumerate(ops) if op.startswith("LDG")]
        assert loads and min(loads) > ops.index("ACQBULK"), dt
        assert not [ops[i] for i in loads if "CONSTANT" in ops[i]], (dt, [ops[i] for i in loads])

"""The ops under concurrent use on a GPU (marker gpu; skipped without CUDA). Issue 10: two threads calling
log_softmax on one GPU got wrong answers (the split regime's workspace was shared per stream).

Eight threads call the public ops at once, with fresh random inputs every call (a fully masked row, an outlier
row and N(0, 3) rows), over every regime of the CUDA backend -- warp, block, cluster, split, columns, strided, the
scalar and the 16-byte paths, a non-contiguous input -- forward and backward through autograd, in three modes:
all threads on one stream (the reported failure), each thread on its own stream, threads on two devices (needs
two GPUs; torch's current device stays 0, so the ops must switch). Every output is then compared bit for bit
with the same call run alone, and the first call of each case and mode with the float64 reference. The Triton
backend runs the same way on its three regimes. A torch.compile(mode="reduce-overhead") model (CUDA graph
trees) runs forward and backward through the regimes that allocate per call (split workspace, contiguous copy).

ONLINESOFTMAX_EVIDENCE=<dir> writes concurrency.json there: calls and wrong results per case and mode.
"""

import contextlib
import json
import os
import threading

import pytest
import torch

pytestmark = pytest.mark.gpu

if not torch.cuda.is_available():
    pytest.skip("no CUDA GPU", allow_module_level=True)

import onlinesoftmax as osm  # noqa: E402
from onlinesoftmax.harness.check import compare_to_reference  # noqa: E402
from onlinesoftmax.engines.cuda import plan as P  # noqa: E402
from onlinesoftmax.engines.cuda import run as E  # noqa: E402
from onlinesoftmax.engines.cuda import compiled as K  # noqa: E402

THREADS = 8
# per thread, mode and job: 8 x (32 x 37 jobs + 2 x 3 group jobs, FEWER) = 9520 CUDA calls per mode, 19040 on one GPU
# (fewer for a short run on a lent GPU: ONLINESOFTMAX_STORM_ITERS)
ITERS = int(os.environ.get("ONLINESOFTMAX_STORM_ITERS", 32))
F32, BF16 = torch.float32, torch.bfloat16

# (name, shape, dtype, dim, regime the CUDA plan must pick, view) -- view "t": the transpose of a contiguous
# tensor (non-contiguous, made contiguous per call); forward cases run both softmax and log_softmax by thread
CASES = [
    ("warp16B", (64, 1000), F32, -1, "warp", None),
    ("warp1", (37, 255), BF16, -1, "warp", None),
    ("block16B", (256, 4096), BF16, -1, "block", None),
    ("block1", (64, 3001), F32, -1, "block", None),
    ("cluster16B", (4, 65536), F32, -1, "cluster", None),
    ("cluster16B_bf16", (8, 131072), BF16, -1, "cluster", None),
    ("split", (4, 300007), F32, -1, "split", None),  # beyond a cluster of 8 (fp32: 278528 elements)
    ("split_long", (2, 1000003), F32, -1, "split", None),
    ("group", (30, 300007), F32, -1, "group", None),  # rows enough for groups of 9 CTAs to fill the chip
    ("strided1", (8, 300, 33), F32, 1, "strided", None),  # N > 256: past chan; one element an access
    ("columns16B", (2, 3000, 64), BF16, 1, "columns", None),  # bands that need shared memory
    ("chan", (4, 19, 128), BF16, 1, "chan", None),
    ("chan_bands", (4, 150, 64), F32, 1, "chan", None),  # 8 threads a column, merged through shared memory
    ("transposed", (300, 64), F32, -1, "warp", "t"),
    ("strided16B", (16, 3000, 8), F32, 1, "strided", None),
    ("bands16B", (2, 70000, 8), F32, 1, "bands", None),  # strided until the bands regime took it (session 82 saw)
    ("strided1_long", (2, 70001, 3), BF16, 1, "strided", None),
]
# backward through autograd: (name, shape, dtype, dim, regime of the backward plan)
BACKWARD = [
    ("bwd_warp", (64, 500), F32, -1, "warp"),
    ("bwd_split", (4, 300007), F32, -1, "split"),
    ("bwd_group", (16, 300007), F32, -1, "group"),
    ("bwd_strided", (8, 300, 33), F32, 1, "strided"),
    ("bwd_chan_bands", (4, 150, 64), BF16, 1, "chan"),
    ("bwd_cluster", (4, 65536), BF16, -1, "cluster"),
]
TRITON = [("triton_rows", (64, 1000), F32), ("triton_online", (512, 40000), BF16), ("triton_split", (4, 100003), F32)]
# jobs that run fewer than ITERS times a thread: the group cases' tensors are 19-36 MB (the rule takes groups only
# where they fill the chip), and the storm keeps every call's inputs and outputs for the comparison after it
# (at ITERS they took the 80 GB of an H100: session 68)
FEWER = {"group": 2, "group_log": 2, "bwd_group_log": 2}

_evidence: dict = {}


@pytest.fixture(autouse=True)
def _groups(monkeypatch):
    """Automatic plans take the group regime where it applies (plan.GROUP_AUTOMATIC, off by default): the storm's
    group cases. Their shapes are this module's own, so their cached plans stay its own."""
    monkeypatch.setattr(P, "GROUP_AUTOMATIC", True)


def _input(shape, dtype, dim, view, device, gen):
    """Fresh N(0, 3) data with a fully masked line and an outlier line along `dim`."""
    x = torch.randn(shape, device=device, generator=gen, dtype=torch.float32) * 3
    x = x.movedim(dim, -1)
    x[(0,) * (x.dim() - 1)] = float("-inf")
    if x.shape[0] > 1:
        x[(1,) + (0,) * (x.dim() - 2)] *= 1e4
    x = x.movedim(-1, dim).to(dtype)
    if view == "t":
        x = x.t().contiguous().t()
    return x


def _forward_fn(log, dim, backend):
    op = osm.log_softmax if log else osm.softmax
    return lambda x, dy: (op(x, dim, backend=backend),)


def _backward_fn(log, dim, backend):
    op = osm.log_softmax if log else osm.softmax

    def fn(x, dy):
        x = x.detach().requires_grad_()
        y = op(x, dim, backend=backend)
        (dx,) = torch.autograd.grad(y, x, dy)
        return y.detach(), dx

    return fn


def _storm(jobs, devices, own_streams):
    """jobs: [(name, fn, shape, dtype, dim, view)]. THREADS threads, thread i on devices[i % len(devices)], each
    running every job ITERS times in an interleaved order, on a stream of its own or on the device's default
    stream; torch's current device is never set, so it stays 0 in every thread (set_stream would switch it).
    Returns [(name, fn, dim, x, dy, outs)]."""
    done, errors, lock = [], [], threading.Lock()
    start = threading.Barrier(THREADS)

    def worker(i):
        try:
            device = devices[i % len(devices)]
            gen = torch.Generator(device=device)
            gen.manual_seed(1000 + i)
            ctx = torch.cuda.stream(torch.cuda.Stream(device)) if own_streams else contextlib.nullcontext()
            mine = []
            start.wait()
            with ctx:
                for it in range(ITERS):
                    for j in range(len(jobs)):
                        name, fn, shape, dtype, dim, view = jobs[(j + i + it) % len(jobs)]
                        if it >= FEWER.get(name, ITERS):
                            continue
                        x = _input(shape, dtype, dim, view, device, gen)
                        dy = torch.randn(x.shape, device=device, generator=gen).to(dtype)
                        mine.append((name, fn, dim, x, dy, fn(x, dy)))
            torch.cuda.synchronize(device)
            with lock:
                done.extend(mine)
        except BaseException as e:  # noqa: BLE001 - reported by the main thread
            errors.append(e)

    ts = [threading.Thread(target=worker, args=(i,)) for i in range(THREADS)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    if errors:
        raise errors[0]
    return done


def _differs(a, b) -> torch.Tensor:
    """A 0-d bool on a's device: whether a and b differ (shape, or any element but NaN against NaN); no sync."""
    if a.shape != b.shape:
        return torch.ones((), dtype=torch.bool, device=a.device)
    return ~((a == b) | (a.isnan() & b.isnan())).all()


def _check_reference(name, dim, x, dy, outs, log):
    """The float64 answer (rows along `dim`), rounded to the dtype, within the harness's tolerance: None, or what
    is wrong."""
    last = lambda t: t.movedim(dim, -1).float().cpu()  # noqa: E731
    if len(outs) == 1:
        op = "log_softmax" if log else "softmax"
        got, ins = outs[0], (last(x),)
    else:
        op = "log_softmax_backward" if log else "softmax_backward"
        got, ins = outs[1], (last(outs[0]), last(dy))
    rep = compare_to_reference(op, ins, last(got), x.dtype)
    return None if rep.ok else f"{name}: {rep.message}"


def _run_mode(mode, jobs, devices, own_streams):
    done = _storm(jobs, devices, own_streams)
    torch.cuda.synchronize()
    wrong, calls, checked, off, differs = {}, {}, set(), [], []
    for name, fn, dim, x, dy, outs in done:
        calls[name] = calls.get(name, 0) + 1
        with torch.cuda.device(x.device):  # each call alone, one after the other: queued, compared on the device
            alone = fn(x, dy)
            differs.append((name, torch.stack([_differs(a, b) for a, b in zip(outs, alone)]).any()))
        if name not in checked:
            checked.add(name)
            bad = _check_reference(name, dim, x, dy, outs, log=name.endswith("_log"))
            if bad:
                off.append(bad)
    torch.cuda.synchronize()  # one wait for all the comparisons (one a call: 10 s for 560 calls on the H200)
    for name, d in differs:
        if d.item():
            wrong[name] = wrong.get(name, 0) + 1
    _evidence[mode] = {"calls": calls, "wrong": wrong, "total_calls": sum(calls.values()),
                       "total_wrong": sum(wrong.values()), "reference_failures": off}
    assert not wrong, f"{mode}: wrong results (compared with the same call alone): {wrong} of {calls}; {off}"
    assert not off, f"{mode}: first calls off the float64 reference: {off}"
    return sum(calls.values())


def _cuda_jobs():
    jobs = []
    for name, shape, dtype, dim, regime, view in CASES:
        x = _input(shape, dtype, dim, view, "cuda:0", None)
        assert E.plan_for("softmax", x, dim=dim).regime == regime, name
        for log in (False, True):
            jobs.append((name + ("_log" if log else ""), _forward_fn(log, dim, "cuda"), shape, dtype, dim, view))
    for name, shape, dtype, dim, regime in BACKWARD:
        x = _input(shape, dtype, dim, None, "cuda:0", None)
        assert E.plan_for("log_softmax_backward", x, x, dim=dim).regime == regime, name
        jobs.append((name + "_log", _backward_fn(True, dim, "cuda"), shape, dtype, dim, None))
    return jobs


@pytest.mark.parametrize("own_streams", [False, True], ids=["one_stream", "own_streams"])
def test_threads_on_one_device_match_the_call_alone(own_streams):
    n = _run_mode("cuda_one_device_" + ("own_streams" if own_streams else "one_stream"), _cuda_jobs(), ["cuda:0"],
                  own_streams)
    assert n >= THREADS * ITERS * 15


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two GPUs")
def test_threads_on_two_devices_match_the_call_alone():
    assert torch.cuda.current_device() == 0
    _run_mode("cuda_two_devices", _cuda_jobs(), ["cuda:0", "cuda:1"], own_streams=False)


def test_triton_threads_match_the_call_alone():
    pytest.importorskip("triton")
    from onlinesoftmax.engines.triton import softmax as K

    jobs = []
    for name, shape, dtype in TRITON:
        assert K.pick_regime(*shape, dtype, False, K.sm_count(torch.device("cuda"))) == name.split("_")[1], name
        jobs.append((name, _forward_fn(False, -1, "triton"), shape, dtype, -1, None))
        jobs.append((name + "_bwd_log", _backward_fn(True, -1, "triton"), shape, dtype, -1, None))
    devices = ["cuda:0", "cuda:1"] if torch.cuda.device_count() > 1 else ["cuda:0"]
    _run_mode("triton", jobs, devices, own_streams=False)


@pytest.mark.parametrize("case", ["split", "transposed", "chan"])
def test_reduce_overhead_forward_and_backward(case):
    """torch.compile(mode="reduce-overhead") records CUDA graphs (graph trees): every tensor our ops allocate
    inside must be freed or returned (the cached workspace of be1e6c1 failed here)."""
    torch._dynamo.reset()
    shape, dim, view = {"split": ((4, 300007), -1, None), "transposed": ((300, 64), -1, "t"),
                        "chan": ((8, 64, 33), 1, None)}[case]  # a non-last dim: 4 threads a column
    if case == "split":  # the workspace's regime, both ways (64 x 4097 had taken block and cluster plans)
        probe = torch.empty(shape, device="cuda")
        assert E.plan_for("log_softmax", probe, dim=dim).regime == "split"
        assert E.plan_for("log_softmax_backward", probe, probe, dim=dim).regime == "split"
    w = torch.rand(shape[-1], device="cuda") + 0.5  # positive: a masked line stays -inf

    def f(x):
        return (osm.log_softmax(x * w, dim) * 0.5).exp().sum(dim)

    g = torch.compile(f, mode="reduce-overhead", fullgraph=True)
    for step in range(4):
        torch.compiler.cudagraph_mark_step_begin()
        x = _input(shape, F32, dim, view, "cuda", None).requires_grad_()
        xr = x.detach().clone().requires_grad_()
        out = g(x)
        out.sum().backward()
        # the reference: the same fp32 product, then float64 (ours differs only by its fp32 softmax)
        ref = (torch.log_softmax((xr * w).double(), dim) * 0.5).exp().sum(dim)
        ref.sum().backward()
        finite = torch.isfinite(ref)  # masked lines: ours 0 with zero gradient, torch's NaN
        assert finite.sum() == finite.numel() - 1 and out[~finite].item() == 0
        torch.testing.assert_close(out.double()[finite], ref[finite], rtol=1e-5, atol=1e-6)
        live = torch.isfinite(xr.grad).all(dim, keepdim=True).expand_as(xr)
        torch.testing.assert_close(x.grad[live], xr.grad[live], rtol=1e-4, atol=1e-6)
        assert (x.grad[~live] == 0).all() and (~live).any()


@pytest.mark.parametrize("N,dtype,log", [(32000, BF16, True), (4097, F32, False), (20011, F32, True),
                                         (1000, torch.float16, False), (1023, BF16, False), (127, torch.float16, True)])
def test_new_row_counts_reuse_one_entry_correctly(N, dtype, log):
    """Rows of one length at many row counts: every M >= stable_rows runs through one cached entry moved to M
    (Plan.at; two around flat_from where the flat regime takes the rows from there on, 1023 and 127 here), the
    few-row Ms through their own; the first rows and the last 64 (a grid too small leaves them unwritten: outputs
    are NaN-poisoned first) against the float64 reference, forward and backward."""
    sms = K.sms(0)
    lo = P.stable_rows(sms)
    name = "log_softmax" if log else "softmax"
    flat = [t for t in (P.flat_from(name, dtype, N, sms), P.flat_from(name + "_backward", dtype, N, sms)) if t]
    assert bool(flat) == (N in (1023, 127))
    gen = torch.Generator(device="cuda").manual_seed(N)
    op = osm.log_softmax if log else osm.softmax
    for M in (1, 3, lo - 1, lo, lo + 1, 2 * lo + 5, lo + 17) + tuple(m for t in flat for m in (t - 1, t, t + 3)):
        x = _input((M, N), dtype, -1, None, "cuda", gen)
        dy = torch.randn(x.shape, device="cuda", generator=gen).to(dtype)
        y, dx = torch.full_like(x, float("nan")), torch.full_like(x, float("nan"))
        E.forward(x, y, 1, log)
        E.backward(y, dy, dx, 1, log)
        rows = sorted(({0, 1} | set(range(max(0, M - 64), M))) & set(range(M)))
        r = torch.tensor(rows, device="cuda")
        for bad in (_check_reference(f"M={M}", -1, x[r], dy[r], (y[r],), log),
                    _check_reference(f"M={M} backward", -1, x[r], dy[r], (y[r], dx[r]), log)):
            assert bad is None, bad
    bits = {2: torch.int16, 4: torch.int32}[dtype.itemsize]  # NaN rows: compare bits, as NaN != NaN
    assert torch.equal(op(x, -1).view(bits), y.view(bits))  # the public op on the same entry: the same kernel
    assert sum(k[1] == N and k[-1] == 0 for k in E._fwd_rows._d) == 1  # one entry serves every M >= lo


@pytest.mark.parametrize("log", [False, True], ids=["softmax", "log_softmax"])
def test_group_kernels_on_streams_of_their_own_all_complete(log):
    """Eight group kernels at once, each on a stream of its own (the softmax backward of 8 rows of 1000003 fp32: 55
    CTAs a row in fp32, 440 a kernel, more than the chip's slots for all of them): each can hold CTAs of a partly
    started group while the others hold the remaining slots. The waits are bounded (a CTA abandons its share to
    grp_fix after plan.GROUP_WAIT_NS): every kernel completes, within a deadline, over several rounds, and every
    dx matches float64. (Without the bound this could hang: the deadline fails the test, the process then may hang.)"""
    import time

    gen = torch.Generator(device="cuda").manual_seed(21)
    M, N, K, rounds = 8, 1000003, 8, 4
    x = torch.randn(M, N, device="cuda", generator=gen) * 3
    y = (torch.log_softmax if log else torch.softmax)(x, -1)
    cases = [(y, torch.randn(M, N, device="cuda", generator=gen)) for _ in range(K)]
    assert E.plan_for("log_softmax_backward" if log else "softmax_backward", y, cases[0][1]).regime == "group"
    E.backward(y, cases[0][1], torch.empty_like(y), 1, log)  # compiled and planned before the streams
    torch.cuda.synchronize()
    streams = [torch.cuda.Stream() for _ in range(K)]
    for r in range(rounds):
        outs, events = [], []
        for s, (yy, dy) in zip(streams, cases):
            dx = torch.full_like(yy, float("nan"))
            s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s):
                E.backward(yy, dy, dx, 1, log)
                events.append(torch.cuda.Event())
                events[-1].record(s)
            outs.append(dx)
        deadline = time.monotonic() + 60
        while not all(e.query() for e in events):
            assert time.monotonic() < deadline, f"round {r}: group kernels on {K} streams still running after 60 s"
            time.sleep(0.01)
        for (yy, dy), dx in zip(cases, outs):
            rep = compare_to_reference("log_softmax_backward" if log else "softmax_backward", (yy, dy), dx,
                                       torch.float32, -1)
            assert rep.ok, f"round {r}: {rep.message}"


def test_write_evidence():
    out = os.environ.get("ONLINESOFTMAX_EVIDENCE")
    if not out or not _evidence:
        pytest.skip("set ONLINESOFTMAX_EVIDENCE=<dir> (after the concurrency tests) to record their counts")
    total = sum(m["total_calls"] for m in _evidence.values())
    wrong = sum(m["total_wrong"] for m in _evidence.values())
    info = {"gpu": torch.cuda.get_device_name(0), "gpus": torch.cuda.device_count(), "torch": torch.__version__,
            "threads": THREADS, "iters": ITERS, "total_calls": total, "total_wrong": wrong, "modes": _evidence}
    with open(os.path.join(out, "concurrency.json"), "w") as fh:
        json.dump(info, fh, indent=1)
    assert wrong == 0 and total >= 10000

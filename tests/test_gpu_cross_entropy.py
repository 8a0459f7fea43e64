"""The cross-entropy kernels on the GPU (pytest -m gpu tests/test_gpu_cross_entropy.py): the CUDA row kernel (ce_row)
and both Triton kernels, every dtype, the options, in place, unaligned rows, few rows, loss only, linear CE and
torch.compile, against the float64 reference on adversarial logits. The vocab-parallel op on two GPUs with NCCL:
benchmarks/vocab_parallel_nccl.py (torchrun)."""

import os

import numpy as np
import pytest
import torch

pytestmark = pytest.mark.gpu

if not torch.cuda.is_available():  # skip the module whole: no dozens of skipped items on CPU
    pytest.skip("needs a CUDA GPU (torch.cuda.is_available() is False)", allow_module_level=True)
if os.environ.get("TRITON_INTERPRET") == "1":
    pytest.skip("TRITON_INTERPRET=1: these are the compiled kernels' tests", allow_module_level=True)

import onlinesoftmax as osm  # noqa: E402
from onlinesoftmax import reference  # noqa: E402
from onlinesoftmax.engines.cuda import run as cuda_run  # noqa: E402
from onlinesoftmax.engines.triton import cross_entropy as triton_ce  # noqa: E402
from onlinesoftmax.engines.triton import cross_entropy_rules as R  # noqa: E402

TOL = {torch.float32: 2e-5, torch.bfloat16: 2e-2, torch.float16: 4e-3}


def _inputs(kind, M, V, dtype, gen):
    x = torch.randn(M, V, generator=gen, dtype=torch.float64) * 3
    t = torch.randint(0, V, (M,), generator=gen)
    if kind == "huge":
        x = torch.where(torch.rand(M, V, generator=gen) < 0.5, -1e4, 1e4)
    elif kind == "equal":
        x = torch.full((M, V), 3.0, dtype=torch.float64)
    elif kind == "argmin":
        t = x.argmin(1)
    elif kind == "ignored":
        t[:] = -100
    t[1::5] = -100
    return x.to(dtype).cuda(), t.cuda()


def _triton_loss_only(monkeypatch):
    """The Triton launcher refuses a gradient: the backend "cuda" test fails if its gradient pass fell back."""
    launch = triton_ce.cross_entropy

    def no_grad(*args, grad=None, **kw):
        assert grad is None, "the gradient pass went to the Triton kernel, not ce_row"
        return launch(*args, **kw)

    monkeypatch.setattr(triton_ce, "cross_entropy", no_grad)


OPTIONS = (dict(), dict(label_smoothing=0.1, z_loss=1e-4, reduction="sum"),
           dict(label_smoothing=0.1, z_loss=1e-4, softcap=30.0, reduction="sum"))


@pytest.mark.parametrize("V", (1000, 32000, 50257, 128256))
@pytest.mark.parametrize("dtype", (torch.float32, torch.bfloat16, torch.float16))
@pytest.mark.parametrize("kind", ("random", "huge", "equal", "argmin", "ignored"))
@pytest.mark.parametrize("backend", ("cuda", "triton"))
def test_against_float64(V, dtype, kind, backend, monkeypatch):
    gen = torch.Generator().manual_seed(V + len(kind))
    x, t = _inputs(kind, 67, V, dtype, gen)
    if backend == "cuda":
        _triton_loss_only(monkeypatch)
    for kw in OPTIONS[:2] if backend == "cuda" else OPTIONS[::2]:  # softcap: Triton kernels only
        xg = x.clone().requires_grad_()
        loss = osm.cross_entropy(xg, t, backend=backend, **kw)
        loss.backward()
        want_loss, want_grad = reference.cross_entropy(x, t, **kw)
        got = float(loss.detach())
        if np.isnan(want_loss):
            assert np.isnan(got)
        elif abs(float(want_loss)) > torch.finfo(dtype).max:  # the loss comes in the logits' dtype, as torch's
            assert got == float(torch.tensor(float(want_loss)).to(dtype))
        else:
            # (the "huge" kind's +-1e4 logits had a bound 100 times wider in 16 bits, which a loss of 0 passed in
            # bf16: its loss, about 1e4 a row, rounds to 16 bits with an error of 2^-9 of itself, within TOL)
            assert abs(got - float(want_loss)) <= TOL[dtype] * max(1.0, abs(float(want_loss)))
        # the gradient without the loss's scale: p = exp(x - m) / d in fp32, then one rounding to the dtype (the
        # scale made rtol 2 and atol 0.1 in 16 bits, which an all-zero gradient passed); a gradient of zeros must fail
        # (softcap saturates at +-1e4: tanh' is 0 in float64 too, so that gradient is exactly 0, and checked as such)
        atol, rtol = TOL[dtype] * 5e-2, TOL[dtype]
        if kind == "ignored" or (kind == "huge" and "softcap" in kw):
            assert not want_grad.any()
        else:
            assert not np.allclose(0.0, want_grad, atol=atol, rtol=rtol)
        np.testing.assert_allclose(xg.grad.double().cpu().numpy(), want_grad, atol=atol, rtol=rtol)


def test_split_forced_small_and_inplace(monkeypatch):
    """The Triton split kernel with many segments per row, and the gradient written over the logits (the default
    backend would take the CUDA row kernel here)."""
    monkeypatch.setattr(R, "SPLIT_CHUNK", 256)
    monkeypatch.setattr(R, "SPLIT_SEG_BYTES", 1024)
    gen = torch.Generator().manual_seed(1)
    x, t = _inputs("random", 300, 40000, torch.float32, gen)
    want_loss, want_grad = reference.cross_entropy(x, t, label_smoothing=0.05)
    xg = x.clone().requires_grad_()
    assert R.pick_regime(40000) == "split"
    loss = osm.cross_entropy(xg, t, label_smoothing=0.05, inplace_grad=True, backend="triton")
    assert abs(float(loss) - float(want_loss)) < 1e-5 * abs(float(want_loss))
    np.testing.assert_allclose(xg.detach().double().cpu().numpy(), want_grad, atol=1e-7, rtol=1e-4)
    loss.backward(torch.tensor(2.0, device="cuda"))
    np.testing.assert_allclose(xg.grad.double().cpu().numpy(), 2 * want_grad, atol=2e-7, rtol=1e-4)


def test_loss_only_and_compile():
    gen = torch.Generator().manual_seed(2)
    x, t = _inputs("random", 64, 50257, torch.bfloat16, gen)
    want_loss, want_grad = reference.cross_entropy(x, t, reduction="none")
    got = osm.cross_entropy(x, t, reduction="none")  # no grad: the stats kernel alone
    np.testing.assert_allclose(got.double().cpu().numpy(), want_loss, rtol=2e-2, atol=2e-2)
    f = torch.compile(lambda a, b: osm.cross_entropy(a, b, z_loss=1e-4), fullgraph=True)
    xg = x.clone().requires_grad_()
    f(xg, t).backward()
    _, want_grad = reference.cross_entropy(x, t, z_loss=1e-4)
    np.testing.assert_allclose(xg.grad.double().cpu().numpy(), want_grad, atol=1e-4, rtol=2e-2)


def test_linear_cross_entropy_gpu():
    gen = torch.Generator(device="cuda").manual_seed(3)
    h = (torch.randn(1000, 256, device="cuda", generator=gen) * 0.5).to(torch.bfloat16).requires_grad_()
    w = (torch.randn(50257, 256, device="cuda", generator=gen) * 0.05).to(torch.bfloat16).requires_grad_()
    t = torch.randint(0, 50257, (1000,), device="cuda", generator=gen)
    loss = osm.linear_cross_entropy(h, w, t, chunk_tokens=256)
    loss.backward()
    hd, wd = h.detach().double().requires_grad_(), w.detach().double().requires_grad_()
    want = torch.nn.functional.cross_entropy(hd @ wd.t(), t)
    want.backward()
    assert abs(float(loss) - float(want)) < 2e-2
    assert float((h.grad.double() - hd.grad).abs().max()) < 1e-3 * float(hd.grad.abs().max()) * 20
    assert float((w.grad.double() - wd.grad).abs().max()) < 1e-3 * float(wd.grad.abs().max()) * 20


@pytest.mark.parametrize("M,V", ((67, 1000), (67, 32000), (2, 32000), (67, 50257), (3, 128256), (40, 128256),
                                 (9, 256000)))
@pytest.mark.parametrize("dtype", (torch.float32, torch.bfloat16, torch.float16))
@pytest.mark.parametrize("layout", ("contiguous", "offset", "inplace"))
def test_cuda_row_kernel(M, V, dtype, layout):
    """ce_row directly, outputs poisoned with NaN: one CTA, clusters (few rows: wider ones), rows starting off a
    16-byte boundary (a view x[:, 1:]: the window path, realigned stores), the gradient over the logits;
    label smoothing and z-loss, a row per five ignored, one target out of range (reads nothing outside the row)."""
    gen = torch.Generator().manual_seed(M * V)
    x, t = _inputs("random", M, V, dtype, gen)
    if layout == "offset":
        wide = torch.randn(M, V + 1, generator=gen).to(dtype).cuda()
        wide[:, 1:] = x
        x = wide[:, 1:]
    opts = dict(ignore_index=-100, label_smoothing=0.1, z_loss=1e-4)
    want_loss, want_grad = reference.cross_entropy(x, t, reduction="sum", **opts)
    want_rows, _ = reference.cross_entropy(x, t, reduction="none", **opts)
    want_lse = torch.logsumexp(x.double(), 1).cpu().numpy()  # before "inplace" overwrites x
    bad = t.clone()
    bad[0] = V + 7  # out of range: its loss and gradient are NaN (the op raises TargetError), nothing else changes
    grad = x if layout == "inplace" else torch.full_like(x, float("nan"), memory_format=torch.contiguous_format)
    loss = torch.full((M,), float("nan"), device="cuda")
    # row 0's loss and gradient must come out NaN: poisoned with a finite value there, so that NaN is written
    loss[0] = 7.0
    if layout != "inplace":  # in place, row 0 holds its logits
        grad[0] = 7.0
    lse = torch.full((M,), float("nan"), device="cuda")
    scale = torch.ones(4, device="cuda")
    assert cuda_run.cross_entropy(x, bad, grad, loss, lse, scale, *opts.values())
    torch.cuda.synchronize()
    g = grad.double().cpu().numpy()
    tol = TOL[dtype]
    rows = slice(1, None)  # row 0 has the bad target
    np.testing.assert_allclose(g[rows], want_grad[rows], atol=tol * 5e-2, rtol=tol)
    assert np.isnan(g[0]).all()
    assert np.isnan(float(loss[0]))
    np.testing.assert_allclose(loss.double().cpu().numpy()[rows], want_rows[rows], rtol=tol, atol=tol)
    np.testing.assert_allclose(lse.double().cpu().numpy(), want_lse, rtol=1e-5)


@pytest.mark.parametrize("dtype", (torch.float32, torch.bfloat16))
def test_cuda_row_kernel_targets_at_cta_edges(dtype):
    """A cluster's CTA that stores the target's out access rewrites it with the target term. On the window path with
    out rows of their own (x[:, 1:] into a contiguous gradient: 16-byte stores realigned from two input accesses),
    that CTA is not always the one whose input access holds the target: targets on and around every CTA boundary of
    a cluster's row, a row at each offset, the gradient against float64 (a wrong owner's rewrite races the store)."""
    from onlinesoftmax.engines.cuda import plan as P

    V = 128256
    W = P.vec_width(dtype)
    p = P.cross_entropy_plan(64, V, dtype, vec=False, window=2)
    c = p.launches[0].cluster
    assert p.window == 2 and c > 1, p
    chunk = ((V + 2 * W - 2) // W + c - 1) // c * W  # a CTA's accesses, in elements (row_body's CH)
    targets = [k * chunk + d for k in range(1, c) for d in range(-2 * W, 2 * W)]
    targets *= -(-64 // len(targets))  # at least the 64 rows planned for
    M = len(targets)
    p = P.cross_entropy_plan(M, V, dtype, vec=False, window=2)
    assert p.launches[0].cluster == c, (p, c)
    gen = torch.Generator().manual_seed(V + M)
    x = torch.randn(M, V + 1, generator=gen, dtype=torch.float64).mul(3).to(dtype).cuda()[:, 1:]
    t = torch.tensor(targets, device="cuda")
    want_loss, want_grad = reference.cross_entropy(x, t, reduction="sum")
    grad = torch.full((M, V), float("nan"), dtype=dtype, device="cuda")
    loss, lse = (torch.full((M,), float("nan"), device="cuda") for _ in range(2))
    for _ in range(5):  # a race shows in some runs
        grad.fill_(float("nan"))
        assert cuda_run.cross_entropy(x, t, grad, loss, lse, torch.ones(4, device="cuda"), -100, 0.0, 0.0)
        torch.cuda.synchronize()
        g = grad.double().cpu().numpy()
        np.testing.assert_allclose(g, want_grad, atol=TOL[dtype] * 5e-2, rtol=TOL[dtype])


@pytest.mark.parametrize("M,V,dtype", ((3001, 1000, torch.float32), (4099, 32000, torch.bfloat16),
                                       (37, 128256, torch.bfloat16), (5, 50257, torch.float16)))
def test_programmatic_launches(M, V, dtype):
    """The op's forward on the CUDA kernels: ce_targets, then ce_row launched programmatically right after it (it
    may start while ce_targets runs and waits for its scale), then ce_loss the same way after ce_row (it waits for
    ce_row's grid before summing); one CTA a row and clusters. 20 runs, the total and the rows poisoned with NaN
    before each: the float64 mean loss each time, with the same bits (a fixed order), and the rows' losses."""
    x, t = _inputs("random", M, V, dtype, torch.Generator().manual_seed(M + V))
    want, _ = reference.cross_entropy(x, t)
    want_rows, _ = reference.cross_entropy(x, t, reduction="none")
    grad, lse = torch.empty_like(x), torch.empty(M, device="cuda")
    totals = []
    for _ in range(20):
        total = torch.full((), float("nan"), dtype=dtype, device="cuda")
        rows = torch.full((M,), float("nan"), device="cuda")
        info = cuda_run.cross_entropy_targets(t, V, -100, True)
        assert cuda_run.cross_entropy(x, t, grad, rows, lse, info, -100, 0.0, 0.0, after_targets=True)
        cuda_run.cross_entropy_loss(rows, info, total, True, after_rows=True)
        totals.append(total)
    got = torch.stack(totals).double().cpu().numpy()
    assert (got == got[0]).all(), got
    np.testing.assert_allclose(got[0], float(want), rtol=max(TOL[dtype], 1e-5))
    np.testing.assert_allclose(rows.double().cpu().numpy(), want_rows, rtol=TOL[dtype], atol=TOL[dtype])


def test_cuda_kernel_fallback():
    """Rows longer than a cluster holds launch nothing and say so; the op then runs the Triton kernels."""
    M, V = 3, 600000
    x, t = _inputs("random", M, V, torch.bfloat16, torch.Generator().manual_seed(5))
    grad = torch.empty_like(x)
    out = torch.empty(M, device="cuda")
    assert not cuda_run.cross_entropy(x, t, grad, out, out.clone(), torch.ones(4, device="cuda"), -100, 0.0, 0.0)
    xg = x.clone().requires_grad_()
    osm.cross_entropy(xg, t).backward()
    want_loss, want_grad = reference.cross_entropy(x, t)
    np.testing.assert_allclose(xg.grad.double().cpu().numpy(), want_grad, atol=1e-3 * 5e-2, rtol=2e-2)


@pytest.mark.parametrize("backend", ("cuda", "triton"))
@pytest.mark.parametrize("dtype", (torch.float32, torch.bfloat16))
def test_grad_output_per_row_and_scalar(backend, dtype):
    """reduction="none" with one grad_output per row (1 on some rows: left as they are), and a scalar one: the
    backward's scaling, 16-byte rows and rows of odd length (scalar accesses)."""
    gen = torch.Generator().manual_seed(7)
    for V in (32000, 32001):
        x, t = _inputs("random", 33, V, dtype, gen)
        w = torch.rand(33, generator=gen).to(dtype).cuda()
        w[::4] = 1.0
        xg = x.clone().requires_grad_()
        osm.cross_entropy(xg, t, reduction="none", backend=backend).backward(w)
        _, want = reference.cross_entropy(x, t, reduction="none")
        np.testing.assert_allclose(xg.grad.double().cpu().numpy(), want * w.double().cpu().numpy()[:, None],
                                   atol=TOL[dtype] * 5e-2, rtol=TOL[dtype] * 2)
        xg = x.clone().requires_grad_()
        (osm.cross_entropy(xg, t, backend=backend) * 0.25).backward()
        _, want = reference.cross_entropy(x, t)
        np.testing.assert_allclose(xg.grad.double().cpu().numpy(), want * 0.25, atol=TOL[dtype] * 5e-2,
                                   rtol=TOL[dtype] * 2)


@pytest.mark.parametrize("backend", ("cuda", "triton"))
def test_target_out_of_range_raises(backend):
    """Without a gradient the forward raises; with one, backend "cuda" returns a NaN loss without waiting for the
    check and its backward raises where the GPU has got past the check (here: the loss was read), before any
    gradient reaches .grad; Triton raises in the forward."""
    from onlinesoftmax.ops.cross_entropy import TargetError

    x, t = _inputs("random", 40, 32000, torch.bfloat16, torch.Generator().manual_seed(9))
    t[3] = 32000
    with pytest.raises(TargetError, match="target 32000 out of range"):
        osm.cross_entropy(x, t, backend=backend)
    xg = x.clone().requires_grad_()
    if backend == "triton":
        with pytest.raises(TargetError, match="target 32000 out of range"):
            osm.cross_entropy(xg, t, backend=backend)
        return
    loss = osm.cross_entropy(xg, t, backend=backend)
    assert torch.isnan(loss)
    with pytest.raises(TargetError, match="target 32000 out of range"):
        loss.backward()
    assert xg.grad is None


def test_target_out_of_range_deferred(monkeypatch):
    """A backward that finds the target check not yet written by the GPU does not wait: the gradient reaches .grad
    with the bad target's row NaN (every other row right), and the next cross_entropy call on the device raises the
    TargetError, saying it comes from an earlier call; the call after that runs."""
    from onlinesoftmax.ops import cross_entropy as ce
    from onlinesoftmax.ops.cross_entropy import TargetError

    x, t = _inputs("random", 40, 32000, torch.bfloat16, torch.Generator().manual_seed(10))
    good = t.clone()
    t[3] = 32000
    xg = x.clone().requires_grad_()
    loss = osm.cross_entropy(xg, t)
    monkeypatch.setattr(ce.Slot, "passed", lambda self: False)  # as if the GPU were still behind the check
    loss.backward()
    monkeypatch.undo()
    g = xg.grad.double().cpu().numpy()
    assert np.isnan(g[3]).all() and np.isfinite(np.delete(g, 3, axis=0)).all()
    _, want = reference.cross_entropy(x, good)  # the same counted rows: the same scale
    rows = [r for r in range(40) if r != 3]
    np.testing.assert_allclose(g[rows], want[rows], atol=TOL[torch.bfloat16] * 5e-2, rtol=TOL[torch.bfloat16] * 2)
    with pytest.raises(TargetError, match="target 32000 out of range.*earlier cross_entropy call"):
        osm.cross_entropy(x.clone().requires_grad_(), good)
    osm.cross_entropy(x.clone().requires_grad_(), good).backward()


@pytest.mark.parametrize("own_streams", (False, True))
def test_threads_match_the_call_alone(own_streams):
    """Eight threads call cross_entropy forward + backward at once (one stream, or a stream each), 12 times each,
    on fresh inputs of their own (three layouts of the prepared step, each reduction, return_lse): every loss, lse
    and gradient equals, bit for bit, the same call made alone beforehand. One thread's targets are out of range on
    its last call: the TargetError reaches that thread only (in its backward or, deferred, its next call), and the
    others' results stay exact. The slot pool and the deferred checks are shared by the threads; their usual paths
    take no lock."""
    import threading

    from onlinesoftmax.ops.cross_entropy import TargetError

    shapes = ((64, 32000, torch.bfloat16, "mean"), (33, 50257, torch.float32, "sum"), (8, 4097, torch.bfloat16,
                                                                                       "none"))
    threads, iters = 8, 12
    gen = torch.Generator().manual_seed(11)
    calls = [[_inputs("random", *shapes[(i + k) % 3][:3], gen) + (shapes[(i + k) % 3][3],) for k in range(iters)]
             for i in range(threads)]
    bad = (threads - 1, iters - 1)  # this thread's last call has a target out of range
    calls[bad[0]][bad[1]][1][2] = 10 ** 6

    def run(x, t, reduction):
        xg = x.clone().requires_grad_()
        loss, lse = osm.cross_entropy(xg, t, reduction=reduction, return_lse=True)
        loss.sum().backward() if reduction == "none" else loss.backward()
        return loss.detach(), lse, xg.grad

    alone = [[run(*c) if (i, k) != bad else None for k, c in enumerate(row)] for i, row in enumerate(calls)]
    torch.cuda.synchronize()
    got, raised, errors = {}, {}, []
    start = threading.Barrier(threads)

    def worker(i):
        try:
            stream = torch.cuda.Stream() if own_streams else torch.cuda.current_stream()
            start.wait()
            with torch.cuda.stream(stream):
                for k, c in enumerate(calls[i]):
                    try:
                        got[i, k] = run(*c)
                    except TargetError as e:
                        raised[i, k] = str(e)
                if i == bad[0] and (i, bad[1]) not in raised:  # deferred: this thread's next call raises it
                    stream.synchronize()  # the flag written by then (an unwritten one would stay deferred)
                    try:
                        run(*calls[i][0])
                    except TargetError as e:
                        raised[i, "next"] = str(e)
            stream.synchronize()
        except BaseException as e:  # noqa: BLE001 - reported by the main thread
            errors.append((i, repr(e)))

    ts = [threading.Thread(target=worker, args=(i,)) for i in range(threads)]
    for th in ts:
        th.start()
    for th in ts:
        th.join()
    assert not errors, errors
    assert list(raised) in ([bad], [(bad[0], "next")]), raised
    assert "out of range" in next(iter(raised.values()))
    for i in range(threads):
        for k in range(iters):
            if (i, k) == bad:
                continue
            for what, a, b in zip(("loss", "lse", "grad"), got[i, k], alone[i][k]):
                assert torch.equal(a, b), f"thread {i} call {k}: {what} differs from the call alone"


def test_reduction_none_loss_is_its_own_tensor():
    """reduction "none" in fp32 (where the rows' losses need no cast): the loss is a tensor of its own, not a view of
    the op's buffer, so it can be masked in place before the backward (eager), and torch.compile's custom op, which
    refuses outputs that share storage, returns it beside lse."""
    x, t = _inputs("random", 24, 32000, torch.float32, torch.Generator().manual_seed(12))
    mask = (torch.arange(24, device="cuda") % 3 != 0).float()
    xg = x.clone().requires_grad_()
    loss, lse = osm.cross_entropy(xg, t, reduction="none", return_lse=True)
    assert loss.untyped_storage().data_ptr() != lse.untyped_storage().data_ptr()
    loss *= mask
    loss.sum().backward()
    want, dwant = reference.cross_entropy(x, t, reduction="none")
    m = mask.cpu().numpy().astype(np.float64)
    np.testing.assert_allclose(loss.detach().double().cpu().numpy(), want * m, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(xg.grad.double().cpu().numpy(), dwant * m[:, None], rtol=1e-4, atol=1e-7)
    torch._dynamo.reset()
    compiled = torch.compile(lambda a, b: osm.cross_entropy(a, b, reduction="none", return_lse=True), fullgraph=True)
    xc = x.clone().requires_grad_()
    closs, clse = compiled(xc, t)
    closs.sum().backward()
    np.testing.assert_allclose(closs.detach().double().cpu().numpy(), want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(xc.grad.double().cpu().numpy(), dwant, rtol=1e-4, atol=1e-7)

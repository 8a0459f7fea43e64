"""cross_entropy and linear_cross_entropy on CPU (the reference path): against F.cross_entropy and the float64
specification (reference.cross_entropy) on adversarial logits, every option, the errors, torch.compile."""

from types import SimpleNamespace

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import onlinesoftmax as osm
from onlinesoftmax import reference
from onlinesoftmax.errors import ArgumentTypeError, OnlineSoftmaxError
from onlinesoftmax.ops import cross_entropy as ce

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")


def adversarial(kind, M, V, gen, dtype=torch.float64):
    """Logits and targets: 'random', 'huge' (+-1e4), 'equal' (all-equal rows), 'argmin' (the target at the
    row's minimum), 'ignored' (every row ignore_index), 'some_ignored'."""
    x = torch.randn(M, V, generator=gen, dtype=torch.float64) * 3
    t = torch.randint(0, V, (M,), generator=gen)
    if kind == "huge":
        x = torch.where(torch.rand(M, V, generator=gen) < 0.5, -1e4, 1e4) + x
    elif kind == "equal":
        x = torch.full((M, V), 7.5, dtype=torch.float64)
    elif kind == "argmin":
        t = x.argmin(1)
    elif kind == "ignored":
        t = torch.full((M,), -100)
    elif kind == "some_ignored":
        t[::2] = -100
    return x.to(dtype), t


KINDS = ("random", "huge", "equal", "argmin", "ignored", "some_ignored")
OPTIONS = [dict(), dict(label_smoothing=0.1), dict(z_loss=1e-3), dict(softcap=20.0),
           dict(label_smoothing=0.2, z_loss=1e-2, softcap=5.0, ignore_index=3)]


def _run(fn, x, t, **kw):
    x = x.clone().requires_grad_()
    loss = fn(x, t, **kw)
    loss.sum().backward()
    return loss.detach(), x.grad


def _close(got, want, rtol, atol=None):
    got, want = np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64)
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=rtol, atol=rtol if atol is None else atol, equal_nan=True)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("reduction", ("mean", "sum", "none"))
@pytest.mark.parametrize("opts", range(len(OPTIONS)))
def test_float64_against_reference(kind, reduction, opts, seed):
    gen = torch.Generator().manual_seed(seed)
    x, t = adversarial(kind, 6, 13, gen)
    kw = dict(OPTIONS[opts], reduction=reduction)
    t = torch.where(t == -100, kw.get("ignore_index", -100), t)
    loss, grad = _run(osm.cross_entropy, x, t, **kw)
    want_loss, want_grad = reference.cross_entropy(x, t, **kw)
    _close(loss, want_loss, 1e-9, 1e-9 * max(1.0, float(x.abs().max())) * (x.shape[0] if reduction == "sum" else 1))
    _close(grad, want_grad, 1e-12)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("dtype", (torch.float32, torch.float64))
@pytest.mark.parametrize("reduction", ("mean", "sum", "none"))
def test_matches_torch(kind, dtype, reduction, seed):
    """Identical in meaning to F.cross_entropy, NaN for an all-ignored mean included, with zero gradient."""
    gen = torch.Generator().manual_seed(seed)
    x, t = adversarial(kind, 5, 17, gen, dtype)
    for ls in (0.0, 0.15):
        kw = dict(reduction=reduction, label_smoothing=ls)
        loss, grad = _run(osm.cross_entropy, x, t, **kw)
        want_loss, want_grad = _run(F.cross_entropy, x, t, **kw)
        assert loss.dtype == want_loss.dtype and loss.shape == want_loss.shape
        # fp32 against fp32: both round x - lse at |x|'s ulp (6e-4 at 1e4), once a row (so a sum of rows: once each);
        # relative to the loss, not to the largest loss of the batch (that let a loss 25x off pass)
        tol = 1e-12 if dtype == torch.float64 else 2e-5 * max(1.0, float(x.abs().max()) * 1e-2)
        _close(loss, want_loss, tol, tol * (x.shape[0] if reduction == "sum" else 1))
        _close(grad, want_grad, tol)


def test_all_ignored_mean_is_nan_with_zero_gradient():
    x = torch.randn(4, 9, requires_grad=True)
    t = torch.full((4,), -100)
    loss = osm.cross_entropy(x, t)
    loss.backward()
    assert torch.isnan(loss) and torch.isnan(F.cross_entropy(x, t))
    assert torch.equal(x.grad, torch.zeros_like(x))
    assert osm.cross_entropy(x.detach(), t, reduction="sum") == 0


def test_one_dim_logits_and_bf16():
    x = torch.randn(11, dtype=torch.float64)
    t = torch.tensor(4)
    assert torch.allclose(osm.cross_entropy(x, t), F.cross_entropy(x, t))
    assert osm.cross_entropy(x, t, reduction="none").shape == ()
    xb = torch.randn(3, 50).to(torch.bfloat16)
    tb = torch.tensor([0, 49, 7])
    got = osm.cross_entropy(xb, tb)
    assert got.dtype == torch.bfloat16
    assert abs(float(got) - float(F.cross_entropy(xb.float(), tb))) < 0.02


def test_return_lse_and_grad_output_scaling(seed):
    gen = torch.Generator().manual_seed(seed)
    x, t = adversarial("some_ignored", 5, 8, gen)
    loss, lse = osm.cross_entropy(x, t, return_lse=True, reduction="none")
    assert torch.allclose(lse, torch.logsumexp(x, 1))
    # a grad_output other than 1, per row for "none", a scalar for "mean"
    f64 = torch.float64
    for reduction, go in (("none", torch.arange(5, dtype=f64)), ("mean", torch.tensor(2.5, dtype=f64))):
        a, b = x.clone().requires_grad_(), x.clone().requires_grad_()
        osm.cross_entropy(a, t, reduction=reduction).backward(go)
        F.cross_entropy(b, t, reduction=reduction).backward(go)
        assert torch.allclose(a.grad, b.grad)


def test_inplace_grad():
    x = torch.randn(4, 10, dtype=torch.float64)
    t = torch.tensor([1, 2, -100, 9])
    want, want_grad = _run(F.cross_entropy, x, t)
    leaf = x.clone().requires_grad_()
    loss = osm.cross_entropy(leaf, t, inplace_grad=True)
    assert torch.allclose(loss, want)
    assert torch.allclose(leaf.detach(), want_grad)  # the logits now hold the gradient
    loss.backward()
    assert torch.allclose(leaf.grad, want_grad)


@pytest.mark.parametrize("bad, err, match", [
    (dict(target=torch.tensor([0, 5, 1])), IndexError, "target 5 out of range"),
    (dict(target=torch.tensor([0, -1, 1])), IndexError, "target -1 out of range"),
    (dict(target=torch.tensor([0.0, 1.0, 1.0])), OnlineSoftmaxError, "integer dtype"),
    (dict(target=torch.tensor([0, 1])), OnlineSoftmaxError, "does not match"),
    (dict(logits=torch.randn(3, 5).to(torch.int32)), OnlineSoftmaxError, "not supported"),
    (dict(logits=torch.randn(3, 5, 2)), OnlineSoftmaxError, r"\(N, V\)"),
    (dict(logits=[1.0]), ArgumentTypeError, "torch.Tensor"),
    (dict(reduction="avg"), OnlineSoftmaxError, "reduction"),
    (dict(label_smoothing=1.5), OnlineSoftmaxError, "label_smoothing"),
    (dict(softcap=0.0), OnlineSoftmaxError, "softcap"),
    (dict(z_loss=-1.0), OnlineSoftmaxError, "z_loss"),
    (dict(ignore_index=1.5), ArgumentTypeError, "ignore_index"),
    (dict(backend="cuda"), OnlineSoftmaxError, "needs a CUDA tensor"),
    (dict(backend="cudnn"), OnlineSoftmaxError, "unknown backend"),
])
def test_errors(bad, err, match):
    kw = dict(logits=torch.randn(3, 5), target=torch.tensor([0, 4, -100]))
    kw.update(bad)
    with pytest.raises(err, match=match):
        osm.cross_entropy(kw.pop("logits"), kw.pop("target"), **kw)


def test_torch_compile_cpu():
    """torch.compile(fullgraph=True) traces through the custom op, forward and backward."""
    x = torch.randn(6, 12, dtype=torch.float64)
    t = torch.tensor([0, 11, -100, 3, 3, 5])

    def f(x, t):
        return osm.cross_entropy(x, t, label_smoothing=0.1, z_loss=1e-3, softcap=4.0)

    compiled = torch.compile(f, fullgraph=True, backend="aot_eager")
    loss, grad = _run(compiled, x, t)
    want_loss, want_grad = reference.cross_entropy(x, t, label_smoothing=0.1, z_loss=1e-3, softcap=4.0)
    _close(loss, want_loss, 1e-12)
    _close(grad, want_grad, 1e-12)
    torch.library.opcheck(ce.cross_entropy_op, (x, t, -100, 0.1, 0.0, 0.0, "mean", "reference", True))


@pytest.mark.parametrize("reduction", ("mean", "sum"))
def test_linear_cross_entropy(reduction, seed):
    gen = torch.Generator().manual_seed(seed)
    h = torch.randn(37, 8, generator=gen, dtype=torch.float64)
    w = torch.randn(29, 8, generator=gen, dtype=torch.float64)
    t = torch.randint(0, 29, (37,), generator=gen)
    t[::5] = -100
    kw = dict(reduction=reduction, label_smoothing=0.1, z_loss=1e-3, softcap=6.0)
    a_h, a_w = h.clone().requires_grad_(), w.clone().requires_grad_()
    loss = osm.linear_cross_entropy(a_h, a_w, t, chunk_tokens=10, **kw)
    (loss * 3).backward()
    # against the float64 specification (the package's cross_entropy shares the row formulas: a softcap
    # derivative off by 10% had passed): the logits' gradient G gives dh = G w and dw = G^T h
    want_loss, g = reference.cross_entropy(h @ w.t(), t, **kw)
    g = torch.from_numpy(g)
    torch.testing.assert_close(loss, torch.tensor(float(want_loss), dtype=loss.dtype), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(a_h.grad, 3 * g @ w, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(a_w.grad, 3 * g.t() @ h, rtol=1e-10, atol=1e-12)


def test_linear_cross_entropy_errors():
    h, w, t = torch.randn(4, 8), torch.randn(10, 8), torch.tensor([1, 2, 3, 4])
    with pytest.raises(OnlineSoftmaxError, match="'mean' or 'sum'"):
        osm.linear_cross_entropy(h, w, t, reduction="none")
    with pytest.raises(OnlineSoftmaxError, match="does not match"):
        osm.linear_cross_entropy(h, torch.randn(10, 7), t)
    with pytest.raises(IndexError, match="out of range"):
        osm.linear_cross_entropy(h, w, torch.tensor([1, 2, 3, 10]))
    assert ce.linear_chunk(128256, 2, 8192) == 1024


def test_a_second_backward_says_why():
    """The gradient is made in the forward and handed over once: a second backward (retain_graph) raises the
    package's error, not an AttributeError."""
    x = torch.randn(4, 10, requires_grad=True)
    loss = osm.cross_entropy(x, torch.randint(0, 10, (4,)))
    loss.backward(retain_graph=True)
    with pytest.raises(OnlineSoftmaxError, match="second backward"):
        loss.backward()


def test_target_check_slots_cross_threads(monkeypatch):
    """The target check's pinned buffers and events are taken in the forward's thread and given back in done(),
    which the backward may run on autograd's device thread: one pool per device, shared by every thread, kept to
    SLOTS_KEPT."""
    import threading

    from onlinesoftmax.ops import cross_entropy as ce

    monkeypatch.setattr(ce, "_slots", {})
    given = [object() for _ in range(ce.SLOTS_KEPT + 6)]
    worker = threading.Thread(target=lambda: [ce._give_slot(3, s) for s in given])
    worker.start()
    worker.join()
    assert len(ce._slots[3]) == ce.SLOTS_KEPT
    assert ce._take_slot(3) is given[ce.SLOTS_KEPT - 1]  # from the pool the other thread filled: no allocation
    assert 3 not in ce._slots or len(ce._slots[3]) == ce.SLOTS_KEPT - 1


def _slot(mapped: bool, passed: bool):
    """A Slot as TargetCheck leaves it with its kernel queued (mapped: armed, the flag still the sentinel; else an
    event not yet passed, recorded behind a copy), or after the kernel wrote it (passed)."""
    from onlinesoftmax.ops import cross_entropy as ce

    class Event:
        done = passed

        def query(self):
            return self.done

    slot = ce.Slot.__new__(ce.Slot)
    slot.view = np.array([0.5, 2.0, 0.0 if passed else ce.Slot.SENTINEL], dtype=np.float32)
    slot.mapped = slot.polled = mapped
    slot.event = Event()
    return slot


@pytest.mark.parametrize("mapped", (True, False))
def test_target_check_dropped_before_done_keeps_its_buffer_until_written(monkeypatch, mapped):
    """A check dropped before done() (a loss never backpropagated) gives its pinned buffer back to the pool only
    once it has been written: until then its kernel may still write it. Mapped: the CUDA kernel writes the flag
    last over a sentinel the host armed; else an event is recorded behind a copy."""
    from onlinesoftmax.ops import cross_entropy as ce

    slot, spare = _slot(mapped, passed=False), ("spare",)
    monkeypatch.setattr(ce, "_slots", {3: [spare]})
    monkeypatch.setattr(ce, "_orphans", [])
    check = ce.TargetCheck.__new__(ce.TargetCheck)  # as __init__ leaves it, its kernel queued
    check.device, check.slot = 3, slot
    del check
    assert ce._orphans == [(3, slot)]
    assert ce._take_slot(3) is spare  # the orphan has not been written: it stays out of the pool
    assert ce._orphans == [(3, slot)]
    if mapped:
        slot.view[2] = 0.0
    else:
        slot.event.done = True
    assert ce._take_slot(3) is slot and ce._orphans == []


def test_target_check_arms_its_slot_only_at_the_launch(monkeypatch):
    """TargetCheck(start=False) takes a slot but leaves it unarmed: an error before the launch (an allocation out of
    memory) drops a check whose slot passes and goes back to the pool, where an armed one, with no kernel behind it,
    would never pass. arm() arms it and gives its address (0 where the kernel does not write it itself)."""
    from types import SimpleNamespace

    from onlinesoftmax.ops import cross_entropy as ce

    slot = _slot(True, passed=True)
    slot.host = torch.zeros(3)
    monkeypatch.setattr(ce, "_slots", {3: [slot]})
    monkeypatch.setattr(ce, "_orphans", [])
    target = SimpleNamespace(is_cuda=True, get_device=lambda: 3)  # what __init__ reads of a CUDA target
    check = ce.TargetCheck(target, 32000, -100, "mean", "cuda", start=False)
    assert check.slot is slot and check.direct and slot.passed()
    del check  # dropped before its launch
    assert ce._take_slot(3) is slot and ce._orphans == []
    ce._give_slot(3, slot)
    check = ce.TargetCheck(target, 32000, -100, "mean", "cuda", start=False)
    assert check.arm() == slot.host.data_ptr() and not slot.passed()
    check.direct = False
    assert check.arm() == 0
    check.slot = None  # armed with no kernel behind it: not left to the pool


def test_target_check_waits_for_the_flag_over_the_sentinel():
    """A mapped slot's wait polls the flag until the kernel replaced the sentinel (here another thread, late) and
    returns it; an armed slot reads as not passed."""
    import threading

    from onlinesoftmax.ops import cross_entropy as ce

    slot = _slot(True, passed=True)
    slot.arm()
    assert not slot.passed()
    writer = threading.Timer(0.05, lambda: slot.view.__setitem__(2, 1.0))
    writer.start()
    assert slot.wait() == 1.0 and slot.passed()
    writer.join()


def test_masked_logit_without_smoothing_is_finite():
    """A -inf logit (a masked vocabulary entry) with label_smoothing = 0: torch's loss is finite; the smoothing
    term must not turn it into 0 * -inf = NaN (the reference and the reference backend)."""
    x = torch.tensor([[0.0, 1.0, float("-inf")]], dtype=torch.float64)
    t = torch.tensor([1])
    want = float(F.cross_entropy(x, t))
    got, _ = reference.cross_entropy(x, t)
    assert abs(float(got) - want) < 1e-12
    assert abs(float(osm.cross_entropy(x, t, backend="reference")) - want) < 1e-12


def test_deferred_checks_raise_once_written(monkeypatch):
    """settle_deferred raises, in the thread that made the call, for a deferred check the GPU has written with its
    flag set, keeps the unwritten ones for later, and gives the written ones' slots back; a clean one raises
    nothing, and another thread's call raises none of them."""
    from onlinesoftmax.ops import cross_entropy as ce

    import threading

    def check(target, passed, bad):
        c = ce.TargetCheck.__new__(ce.TargetCheck)
        c.target, c.V, c.ignore_index, c.device = torch.tensor(target), 10, -100, 3
        c.thread = threading.get_ident()  # as __init__ records it: the forward's thread
        c.slot = _slot(True, passed=passed)
        c.slot.view[2] = (1.0 if bad else 0.0) if passed else ce.Slot.SENTINEL
        return c

    monkeypatch.setattr(ce, "_slots", {})
    monkeypatch.setattr(ce, "_deferred", {})
    clean, late, wrong = check([1, 2], True, False), check([3, 12], False, True), check([4, 11], False, True)
    # settled on autograd's worker thread, as the backward does: kept for the forward's thread all the same
    worker = threading.Thread(target=lambda: [c.settle() for c in (clean, late, wrong)])
    worker.start()
    worker.join()
    mine = (3, threading.get_ident())
    assert ce._deferred[mine] == [late, wrong] and len(ce._slots[3]) == 1  # clean: settled at once, slot back
    wrong.slot.view[2] = 1.0  # the GPU writes its flag: a bad target
    other = threading.Thread(target=ce.settle_deferred, args=(3,))  # another thread's call: not its error
    other.start()
    other.join()
    assert ce._deferred[mine] == [late, wrong]
    with pytest.raises(ce.TargetError, match="target 11 out of range.*earlier cross_entropy call on cuda:3"):
        ce.settle_deferred(3)
    assert ce._deferred[mine] == [late]
    late.slot.view[2] = 1.0
    with pytest.raises(ce.TargetError, match="target 12"):
        ce.settle_deferred(3)
    ce.settle_deferred(3)
    assert mine not in ce._deferred and len(ce._slots[3]) == 3  # the thread's empty list dropped


def test_a_check_dropped_at_shutdown_is_quiet(monkeypatch):
    """At interpreter shutdown the module's globals are None: a check still holding its slot (a deferred one never
    settled) is dropped without an exception from __del__ (at 438e27c every such check printed one)."""
    import sys

    from onlinesoftmax.ops import cross_entropy as ce

    seen = []
    monkeypatch.setattr(sys, "unraisablehook", seen.append)
    monkeypatch.setattr(ce, "_orphans", None)
    check = ce.TargetCheck.__new__(ce.TargetCheck)
    check.device, check.slot = 3, _slot(True, passed=False)
    del check
    assert seen == []


def test_a_flag_without_a_bad_value_left_still_raises(monkeypatch):
    """A deferred check whose flag is set but whose target tensor no longer holds the bad value (refilled in place
    since the call) raises all the same, saying which one is not known."""
    from onlinesoftmax.ops import cross_entropy as ce

    monkeypatch.setattr(ce, "_slots", {})
    check = ce.TargetCheck.__new__(ce.TargetCheck)
    check.target, check.V, check.ignore_index, check.device = torch.tensor([1, 2]), 10, -100, 3
    check.slot = _slot(True, passed=True)
    check.slot.view[2] = 1.0
    with pytest.raises(ce.TargetError, match="target tensor has changed since"):
        check.done()


def test_a_deferred_check_settled_elsewhere_is_dropped(monkeypatch):
    """A deferred check already done() by another path (its slot given back) is dropped by settle_deferred, not
    asked for its slot (an AttributeError inside the lock left the thread's list for good at 9555668)."""
    import threading

    from onlinesoftmax.ops import cross_entropy as ce

    check = ce.TargetCheck.__new__(ce.TargetCheck)
    check.slot = None
    monkeypatch.setattr(ce, "_deferred", {(3, threading.get_ident()): [check]})
    ce.settle_deferred(3)
    assert ce._deferred == {}


def test_a_polled_wait_probes_the_stream(monkeypatch):
    """Polling a flag that never comes does not spin forever: the stream is probed every PROBE_S, and an idle
    stream (the kernel finished) with the flag unwritten raises; a failing probe (a dead context, a capture)
    raises its own error."""
    from onlinesoftmax.ops import cross_entropy as ce

    slot = _slot(True, passed=False)
    slot.device = 0
    monkeypatch.setattr(ce.Slot, "PROBE_S", 0.01)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device: SimpleNamespace(query=lambda: True))
    with pytest.raises(OnlineSoftmaxError, match="finished without writing its flag"):
        slot.wait()

    def dead():
        raise RuntimeError("CUDA error: device-side assert triggered")
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device: SimpleNamespace(query=dead))
    with pytest.raises(RuntimeError, match="device-side assert"):
        slot.wait()

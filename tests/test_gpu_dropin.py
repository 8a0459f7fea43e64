"""onlinesoftmax.enable() on a GPU (marker gpu; skipped without CUDA): torch's own softmax entry points run our
kernels, forward and backward, for every dtype; a small GPT-style model gives the same loss and gradients with and
without routing (fp32, bf16 autocast), and our kernels provably ran (ops.forward / _backward counted, by backend;
and the masked-row difference: torch NaN, ours 0 / -inf with zero gradient)."""

import collections
import math

import pytest
import torch
import torch.nn.functional as F

pytestmark = pytest.mark.gpu

if not torch.cuda.is_available():
    pytest.skip("no CUDA GPU", allow_module_level=True)

import onlinesoftmax as osm  # noqa: E402
from onlinesoftmax.harness.check import compare_to_reference  # noqa: E402
from onlinesoftmax.ops import softmax as ops  # noqa: E402

NEG_INF = float("-inf")
# ours against torch's kernel, both accumulating in fp32 (fp64) and rounding once: a few ulps of the output dtype,
# relative to the largest |value| (log_softmax and the gradients round like their largest term)
RTOL = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1.6e-2, torch.float64: 1e-12}


def _close(got, want):
    r = RTOL[want.dtype]
    finite = want[torch.isfinite(want)]
    scale = max(1.0, finite.abs().max().item()) if finite.numel() else 1.0
    torch.testing.assert_close(got, want, rtol=r, atol=r * scale)


def _float64(x, dy, y, dx, dim, log):
    """y against float64 from x and dx against float64 from (y, dy), by the checker's rules (harness/check.py):
    each element within a few ulps of its own value, dx by error_bounds' per-element bound. (_close's tolerance of
    the tensor's largest value let a zero pass for most softmax elements.)"""
    op = "log_softmax" if log else "softmax"
    rep = compare_to_reference(op, (x,), y, y.dtype, dim)
    assert rep.ok, f"{op}: {rep.message}"
    rep = compare_to_reference(op + "_backward", (y, dy), dx, dx.dtype, dim)
    assert rep.ok, f"{op} backward: {rep.message}"


@pytest.fixture(autouse=True)
def routing_off():
    osm.disable()
    yield
    osm.disable()


@pytest.fixture
def calls(monkeypatch):
    """(forward | backward, backend) -> how many times ops ran it: what the routed aten kernels called."""
    seen = collections.Counter()

    def counting(kind, fn):
        def wrapped(*args):
            seen[kind, args[-1]] += 1
            return fn(*args)

        return wrapped

    monkeypatch.setattr(ops, "forward", counting("forward", ops.forward))
    monkeypatch.setattr(ops, "backward", counting("backward", ops.backward))
    return seen


ENTRY_POINTS = {
    "torch": lambda t, log: (torch.log_softmax if log else torch.softmax)(t, 1),
    "F": lambda t, log: (F.log_softmax if log else F.softmax)(t, dim=1),
    "Tensor": lambda t, log: t.log_softmax(1) if log else t.softmax(1),
    "nn": lambda t, log: (torch.nn.LogSoftmax if log else torch.nn.Softmax)(dim=1)(t),
}


def _run(entry, x, log, dy):
    t = x.clone().requires_grad_()
    y = ENTRY_POINTS[entry](t, log)
    (dx,) = torch.autograd.grad(y, t, dy)
    return y, dx


@pytest.mark.parametrize("entry", list(ENTRY_POINTS))
@pytest.mark.parametrize("log", [False, True])
@pytest.mark.parametrize("dtype", list(RTOL), ids=str)
def test_every_entry_point_runs_ours_forward_and_backward(calls, entry, log, dtype):
    g = torch.Generator(device="cuda").manual_seed(0)
    x = (torch.randn(6, 1001, device="cuda", generator=g) * 3).to(dtype)
    x[0] = NEG_INF  # fully masked: where ours and torch's differ
    x[1, :500] = NEG_INF  # partly masked: the same in both
    dy = torch.randn(6, 1001, device="cuda", generator=g).to(dtype)
    y_torch, dx_torch = _run(entry, x, log, dy)
    assert not calls
    with osm.enabled():
        y, dx = _run(entry, x, log, dy)
    backend = "reference" if dtype == torch.float64 else ops._gpu_backend()  # float64: torch ops on the GPU
    assert calls == {("forward", backend): 1, ("backward", backend): 1}
    assert (y.dtype, y.shape, y.stride()) == (y_torch.dtype, y_torch.shape, y_torch.stride())
    assert y_torch[0].isnan().all() and dx_torch[0].isnan().all()
    assert (y[0] == (NEG_INF if log else 0.0)).all() and (dx[0] == 0).all()
    _float64(x[1:], dy[1:], y[1:], dx[1:], 1, log)
    assert _run(entry, x, log, dy)[0][0].isnan().all()  # routing off again: torch's kernel


@pytest.mark.parametrize("log", [False, True])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
def test_16_bit_in_fp32_out(calls, log, dtype):
    """F.softmax(x16, dim, dtype=torch.float32): torch's half_to_float kernel (or a cast first) becomes a cast and
    our fp32 kernel; the backward's fp32 gradient comes back in 16 bits."""
    g = torch.Generator(device="cuda").manual_seed(1)
    x = (torch.randn(4, 300, device="cuda", generator=g) * 3).to(dtype)
    x[0] = NEG_INF
    dy = torch.randn(4, 300, device="cuda", generator=g)
    fn = F.log_softmax if log else F.softmax

    def run():
        t = x.clone().requires_grad_()
        y = fn(t, -1, dtype=torch.float32)
        (dx,) = torch.autograd.grad(y, t, dy)
        return y, dx

    y_torch, dx_torch = run()
    with osm.enabled():
        y, dx = run()
    # half_to_float (fp16) reaches ops as softmax(x16, dtype=float32): the fused cast ("cuda_f32"); a cast first
    # (torch's bf16 path) as an fp32 softmax
    ours = {ops._gpu_backend(), "cuda_f32"}
    assert sum(calls.values()) == 2 and {k for k, _ in calls} == {"forward", "backward"}
    assert {b for _, b in calls} <= ours, calls
    if dtype == torch.float16:  # torch's half_to_float: our fused cast
        assert ("forward", "cuda_f32") in calls, calls
    assert (y.dtype, dx.dtype) == (y_torch.dtype, dx_torch.dtype) == (torch.float32, dtype)
    assert (y[0] == (NEG_INF if log else 0.0)).all() and (dx[0] == 0).all()
    _float64(x[1:], dy[1:], y[1:], dx[1:], 1, log)


def test_0d_empty_and_layouts_as_torch(calls):
    g = torch.Generator(device="cuda").manual_seed(2)
    inputs = [
        torch.tensor(1.5, device="cuda"),
        torch.empty(0, 5, device="cuda"),
        torch.empty(3, 0, device="cuda", dtype=torch.bfloat16),
        torch.randn(8, 6, device="cuda", generator=g).t(),
        torch.randn(4, 5, 6, device="cuda", generator=g).permute(2, 0, 1),
        torch.randn(4, 5, 6, device="cuda", generator=g, dtype=torch.float64)[:, ::2],
        torch.randn(1, 7, device="cuda", generator=g).t(),  # a size-1 dim with a stride of 7
    ]
    cases = [(x, dim, fn) for x in inputs for dim in range(-max(x.dim(), 1), max(x.dim(), 1))
             for fn in (torch.softmax, torch.log_softmax)]

    def run(x, dim, fn):
        t = x.clone().requires_grad_()
        y = fn(t, dim)
        dy = torch.randn(y.shape, device="cuda", generator=torch.Generator(device="cuda").manual_seed(3)).to(y.dtype)
        (dx,) = torch.autograd.grad(y, t, dy)
        return y, dx

    want = [run(*c) for c in cases]
    assert not calls
    with osm.enabled():
        got = [run(*c) for c in cases]
    # each case with elements went through ours, forward and backward (0-d and empty ones may as well)
    routed = sum(1 for x, _, _ in cases if x.numel())
    assert sum(n for (kind, _), n in calls.items() if kind == "forward") >= routed, calls
    assert sum(n for (kind, _), n in calls.items() if kind == "backward") >= routed, calls
    for (x, dim, fn), (y_t, dx_t), (y, dx) in zip(cases, want, got):
        for a, b in ((y, y_t), (dx, dx_t)):
            assert (a.dtype, a.shape, a.stride()) == (b.dtype, b.shape, b.stride()), (x.shape, x.stride(), dim, fn)
            _close(a, b)


class TinyGPT(torch.nn.Module):
    """Token + position embeddings, one pre-norm block (causal self-attention with torch.softmax over the scores,
    an MLP), an LM head with F.log_softmax and F.nll_loss. Odd sizes: T = 37 keys, a vocabulary of 101."""

    def __init__(self, vocab=101, T=37, d=64, heads=4):
        super().__init__()
        self.heads = heads
        self.tok = torch.nn.Embedding(vocab, d)
        self.pos = torch.nn.Embedding(T, d)
        self.ln1, self.ln2, self.lnf = torch.nn.LayerNorm(d), torch.nn.LayerNorm(d), torch.nn.LayerNorm(d)
        self.qkv = torch.nn.Linear(d, 3 * d)
        self.proj = torch.nn.Linear(d, d)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(d, 4 * d), torch.nn.GELU(), torch.nn.Linear(4 * d, d))
        self.head = torch.nn.Linear(d, vocab)

    def forward(self, idx, targets):
        B, T = idx.shape
        h = self.tok(idx) + self.pos(torch.arange(T, device=idx.device))
        q, k, v = self.qkv(self.ln1(h)).view(B, T, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
        causal = torch.ones(T, T, dtype=torch.bool, device=idx.device).triu(1)
        att = torch.softmax(scores.masked_fill(causal, NEG_INF), dim=-1)
        h = h + self.proj((att @ v).transpose(1, 2).reshape(B, T, -1))
        h = h + self.mlp(self.ln2(h))
        logp = F.log_softmax(self.head(self.lnf(h)), dim=-1)
        return F.nll_loss(logp.reshape(B * T, -1), targets.reshape(-1))


def _train_step(model, idx, targets, autocast):
    model.zero_grad(set_to_none=True)
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=autocast):
        loss = model(idx, targets)
    loss.backward()
    return loss.item(), {n: p.grad.float().clone() for n, p in model.named_parameters()}


# Tolerances (loss: relative; gradients: max |difference| / max |gradient| per parameter).
# fp32: our kernels and torch's round each softmax / log_softmax output to within ~2 fp32 ulps (2.4e-7) of the
#   exact value; one block propagates that with a modest gain, so the loss agrees to ~1e-6 and the gradients to
#   ~1e-5 of their scale: 1e-5 and 1e-4 leave a margin of ~10, while a wrong mask, a missing row or a wrong
#   gradient formula moves them by 1e-2..1.
# bf16 autocast: softmax and log_softmax still run in fp32 (autocast's fp32 list), but their results and gradients
#   meet bf16 matmuls: an fp32 ulp of difference flips a bf16 rounding (1 bf16 ulp = 2^-8 = 3.9e-3 relative) with a
#   probability of ~2^-15 per element, a handful of elements of the (3, 4, 37, 37) attention; 1e-3 (loss) and 2e-2
#   (gradients) bound a few such flips with room, and the same bugs still exceed them.
TOLERANCES = {"fp32": (1e-5, 1e-4), "bf16-autocast": (1e-3, 2e-2)}


@pytest.mark.parametrize("precision", list(TOLERANCES))
def test_gpt_style_training_step_matches_torch(calls, precision):
    torch.manual_seed(0)
    model = TinyGPT().cuda()
    idx = torch.randint(0, 101, (3, 37), device="cuda")
    targets = torch.randint(0, 101, (3, 37), device="cuda")
    autocast = precision == "bf16-autocast"
    loss_torch, grads_torch = _train_step(model, idx, targets, autocast)
    assert not calls
    with osm.enabled():
        loss, grads = _train_step(model, idx, targets, autocast)
    backend = ops._gpu_backend()
    # one attention softmax and one log_softmax, each forward and backward: all of them ours
    assert calls == {("forward", backend): 2, ("backward", backend): 2}, calls
    loss_tol, grad_tol = TOLERANCES[precision]
    assert math.isfinite(loss) and abs(loss - loss_torch) <= loss_tol * abs(loss_torch), (loss, loss_torch)
    assert grads.keys() == grads_torch.keys()
    for name, g in grads.items():
        err = ((g - grads_torch[name]).abs().max() / grads_torch[name].abs().max()).item()
        assert err <= grad_tol, (name, err)

"""The checker must catch what is wrong: known-wrong softmaxes, unwritten outputs, bad NaNs."""

import dataclasses

import numpy as np
import pytest
import torch

from onlinesoftmax import registry, state
from onlinesoftmax.harness.check import (TOLERANCE, check_variant, compare, compare_to_reference, error_bounds,
                                          serial_rtol)
from onlinesoftmax.reference import reference


def _variant(name, fn):
    def run(inputs, out):
        x = inputs[0].numpy()
        with np.errstate(all="ignore"):
            out.numpy()[...] = fn(x)

    return registry.Variant(name=name, op="softmax", backend="numpy", rung="wrong", seed_ref="-",
                            summary="known wrong", run=run, algo_bytes=lambda M, N, s: 0)


def no_max_shift(x):
    e = np.exp(x)
    return e / e.sum(-1, keepdims=True)


def skips_last_element(x):
    y = np.empty_like(x)
    st = state.of_values(x[:, :-1])
    y[:, :-1] = state.probabilities(x[:, :-1], st)
    return y  # last column never written: the NaN poison stays


def no_inf_guard(x):
    m = x.max(-1, keepdims=True)
    e = np.exp(x - m)
    return e / e.sum(-1, keepdims=True)


def correct(x):
    return state.probabilities(x, state.of_values(x))


def test_chained_row_sum_is_held_to_its_bound():
    """A row summed term after term (Variant.serial_rows: the CPU baseline rung, fp32) rounds N - 1 times in a
    chain: at 1 x 65539 of U[-10, 40] it misses TOLERANCE's rtol for some seeds (the H200's cuda.safe_k1 did:
    2.33e-5) and stays within serial_rtol for all; the same sum off by twice that bound fails."""
    import onlinesoftmax.ladder.cpu  # noqa: F401  (registers cpu.baseline)

    N, chain = 65539, registry.get("cpu.baseline")
    assert chain.serial_rows
    flagged = [check_variant(chain, 1, N, torch.float32, "uniform", s) for s in range(8)]
    assert all(r.ok for r in flagged), [r.message for r in flagged if not r.ok]
    tree = dataclasses.replace(chain, serial_rows=False)
    assert not all(check_variant(tree, 1, N, torch.float32, "uniform", s).ok for s in range(8))  # the case has teeth

    def off_run(inputs, out):
        chain.run(inputs, out)
        out.mul_(1 + 2 * serial_rtol(N, torch.float32))

    assert not check_variant(dataclasses.replace(chain, run=off_run), 1, N, torch.float32, "uniform", 0).ok


@pytest.mark.parametrize("fn, kind", [
    (no_max_shift, "offset"),        # exp(100) overflows fp32: inf / inf
    (no_max_shift, "huge"),          # exp(3e38) = inf
    (skips_last_element, "normal"),
    (no_inf_guard, "masked"),        # -inf - (-inf) = nan on fully masked rows
])
def test_known_wrong_variants_fail(fn, kind, seed):
    v = _variant(fn.__name__, fn)
    report = check_variant(v, 4, 300, torch.float32, kind, seed)
    assert not report.ok, report.message
    assert report.n_bad > 0 and report.bad


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["float32", "bfloat16"])
@pytest.mark.parametrize("N", [300, 4097, 262147])
def test_known_wrong_softmax_backward_fails(N, dtype, seed):
    """dx = y * (dy - c) is about 1/N of dy: an error scale of the row's max |dy| had passed an all-zero dx (and
    one without the c term) from a few thousand elements on; the right answer, rounded to the dtype, passes."""
    g = torch.Generator().manual_seed(seed)
    y = torch.softmax(torch.randn(2, N, generator=g) * 2, -1).to(dtype)
    dy = (torch.randn(2, N, generator=g) + 1).to(dtype)  # c = sum y * dy near 1: leaving it out is visible
    ref = reference("softmax_backward", (y, dy))
    scale, _ = error_bounds("softmax_backward", (y, dy), ref, dtype)
    y64, dy64 = y.double(), dy.double()
    for wrong in (torch.zeros_like(y), (y64 * dy64).to(dtype)):
        assert not compare(wrong, ref, dtype, scale).ok
    right = y64 * (dy64 - (y64 * dy64).sum(-1, keepdim=True))
    assert compare(right.to(dtype), ref, dtype, scale).ok
    # the one-call form gives the same verdicts, and checks against the reference it is handed
    assert compare_to_reference("softmax_backward", (y, dy), right.to(dtype), dtype).ok
    assert not compare_to_reference("softmax_backward", (y, dy), torch.zeros_like(y), dtype).ok
    assert not compare_to_reference("softmax_backward", (y, dy), right.to(dtype), dtype, ref=-ref).ok


@pytest.mark.parametrize("op", ["softmax_backward", "log_softmax_backward"])
def test_error_bounds_along_a_non_last_dim(op, seed):
    """error_bounds' scale over dim 1 of a (B, C, H) tensor is its last-dim scale of the rows moved last, moved
    back; along that dim an all-zero dx and one with dy's sum left out fail in bf16, the rounded right answer
    passes."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(3, 4097, 5, generator=g) * 2
    log = op.startswith("log")
    y = (torch.log_softmax if log else torch.softmax)(x, 1).to(torch.bfloat16)
    dy = (torch.randn(x.shape, generator=g) + 1).to(torch.bfloat16)
    y64, dy64 = y.double(), dy.double()
    right = dy64 - y64.exp() * dy64.sum(1, keepdim=True) if log else y64 * (dy64 - (y64 * dy64).sum(1, keepdim=True))
    ref = right.numpy()
    scale, _ = error_bounds(op, (y, dy), ref, torch.bfloat16, dim=1)
    last, _ = error_bounds(op, (y.movedim(1, -1), dy.movedim(1, -1)), np.moveaxis(ref, 1, -1), torch.bfloat16)
    np.testing.assert_array_equal(np.broadcast_to(scale, ref.shape),
                                  np.moveaxis(np.broadcast_to(last, np.moveaxis(ref, 1, -1).shape), -1, 1))
    wrong = (dy64 if log else y64 * dy64).to(torch.bfloat16)  # the sum term left out
    for bad in (torch.zeros_like(y), wrong):
        assert not compare(bad, ref, torch.bfloat16, scale).ok
    assert compare(right.to(torch.bfloat16), ref, torch.bfloat16, scale).ok


@pytest.mark.parametrize("kind", ["normal", "offset", "masked", "nan", "one_finite", "huge"])
def test_correct_variant_passes(kind, seed):
    assert check_variant(_variant("correct", correct), 4, 300, torch.float32, kind, seed).ok


def test_unwritten_output_is_caught(seed):
    v = registry.Variant(name="lazy", op="softmax", backend="numpy", rung="-", seed_ref="-",
                         summary="writes nothing", run=lambda inputs, out: None,
                         algo_bytes=lambda M, N, s: 0)
    report = check_variant(v, 3, 10, torch.float32, "normal", seed)
    assert not report.ok and report.n_bad == 30


def test_compare_rules():
    ref = np.array([0.5, np.nan, np.inf, -np.inf, 1e-3])
    assert compare(torch.tensor(ref), ref, torch.float64).ok
    for i, wrong in [(0, 0.5001), (1, 0.0), (2, np.nan), (3, np.inf), (4, np.nan)]:
        got = ref.copy()
        got[i] = wrong
        rep = compare(torch.tensor(got), ref, torch.float64)
        assert not rep.ok and rep.bad[0][0] == (i,), (i, rep.message)
    nan_where_finite = np.array([0.5, 0.5])
    assert not compare(torch.tensor([0.5, np.nan]), nan_where_finite, torch.float64).ok


def test_tolerance_is_per_dtype():
    ref = np.array([0.25])
    assert compare(torch.tensor([0.25 * (1 + 5e-3)], dtype=torch.bfloat16), ref, torch.bfloat16).ok
    assert not compare(torch.tensor([0.25 * (1 + 5e-3)]), ref, torch.float32).ok


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_small_probabilities_written_as_zero_fail(dtype, seed):
    """Rows whose probabilities are mostly tiny (N = 4096 of x * 8): a softmax, or its backward, written as 0
    wherever the answer is below TOLERANCE's atol passed with that atol as the floor (asserted: the case has teeth)
    and fails with error_bounds'; the rounded right answer passes."""
    g = torch.Generator().manual_seed(seed)
    x = (torch.randn(4, 4096, generator=g, dtype=torch.float64) * 8).to(dtype)
    dy = torch.randn(4, 4096, generator=g).to(dtype)
    atol = TOLERANCE[dtype][1]
    for op, inputs in (("softmax", (x,)), ("softmax_backward", (torch.softmax(x.double(), -1).to(dtype), dy))):
        ref = reference(op, inputs)
        right = torch.from_numpy(ref).to(dtype)
        wrong = torch.where(right.double().abs() < atol, 0.0, right.double()).to(dtype)
        assert (wrong != right).sum() > 100, op
        assert compare(wrong, ref, dtype, error_bounds(op, inputs, ref, dtype)[0]).ok, op  # TOLERANCE's atol: passed
        assert not compare_to_reference(op, inputs, wrong, dtype).ok, op
        assert compare_to_reference(op, inputs, right, dtype).ok, op

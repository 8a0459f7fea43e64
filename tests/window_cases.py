"""The Triton kernels' windows (softmax_rules.rows_window, chunk_window) on padded rows, in place and off a vector: one
check, run by the interpreter's tests on CPU tensors and by the GPU's tests at real sizes."""

import torch

from onlinesoftmax import reference
from onlinesoftmax.harness.check import compare_to_reference


def record_windows(monkeypatch, K, every: bool = True, regime: str = "rows") -> list:
    """Records the V of every launch of `regime`'s kernel the launchers K make from now on, in order (1: no window),
    with the rows kernel's windows on for every N and size (softmax_rules.ROWS_WINDOW_MIN_N,
    ROWS_WINDOW_TAIL_MIN_BYTES, ROWS_UNITS) or, every=False, where the rules put them (the online and split kernels take them
    wherever they can, chunk_window); every call planned (no ready launch, which would pass no record, nor one an
    earlier test left ready: tests/test_triton_launch.py and test_gpu_triton.py's ready-launch test take the windows
    through it)."""
    if every:  # rows of whole vectors too (rules.rows_unit, whose rows need no window: N = 1000)
        monkeypatch.setattr(K.rules, "ROWS_WINDOW_MIN_N", 1)
        monkeypatch.setattr(K.rules, "ROWS_WINDOW_TAIL_MIN_BYTES", 0)
        monkeypatch.setattr(K.rules, "ROWS_UNITS", False)
    monkeypatch.setattr(K, "_make_ready", lambda *a: None)
    K._READY.clear()  # its native entries with it
    monkeypatch.setattr(K, "_READY", K.BoundedCache(K.READY_CACHE, K._drop_native))
    seen = []
    launch = K._launch_on
    mine = getattr(K, f"{regime}_kernel")
    monkeypatch.setattr(K, "_launch_on", lambda dev, kernel, grid, args, meta, key: (
        seen.append(meta["V"]) if kernel is mine else None, launch(dev, kernel, grid, args, meta, key))[1])
    return seen


def expected_windows(M: int, N: int, stride: int, V: int, regime: str = "rows") -> list:
    """A windowed launch, and in the rows regime the last row's scalar one where its window would pass the tensor's
    end (the online and split kernels read nothing outside a row)."""
    return [V, 1] if regime == "rows" and ((M - 1) * stride + N) % V else [V]


def check_padded_and_in_place(K, windows: list, M: int, N: int, width: int, dtype: torch.dtype, backward: bool,
                              device: str, seed: int = 5, regime: str = "rows") -> None:
    """Windows over padded rows (a 16-byte aligned view of (M, width)) read the padding, which holds NaN and +-inf,
    and must neither use it nor write it; in place (out is x, or dy); a view whose pointer is off 16 bytes keeps the
    scalar rows. Against float64, the outputs poisoned with NaN."""
    g = torch.Generator().manual_seed(seed)
    V = 16 // dtype.itemsize

    def padded(t):
        wide = torch.full((M, width), float("nan"), dtype=dtype)
        wide[::2, N:] = float("inf")
        wide[1::2, N + 1:] = float("-inf")
        wide[:, :N] = t
        wide = wide.to(device)
        return wide, wide[:, :N]

    def run(ins, out, log):
        (K.softmax_backward(*ins, out, log=log, regime=regime) if backward else
         K.softmax_forward(*ins, out, log=log, regime=regime))
        return out

    x = (torch.randn(M, N, generator=g) * 3).to(dtype)
    for log in (False, True):
        op = ("log_softmax" if log else "softmax") + ("_backward" if backward else "")
        if backward:
            y = torch.from_numpy(reference.log_softmax(x) if log else reference.softmax(x)).to(dtype)
            ins = (y, torch.randn(M, N, generator=g).to(dtype))
        else:
            ins = (x,)
        ref = reference.reference(op, ins)
        wides, views = zip(*(padded(t) for t in ins))
        out_wide, out = padded(torch.full((M, N), float("nan"), dtype=dtype))
        before = out_wide.clone()
        windows.clear()
        run(views, out, log)
        assert windows == expected_windows(M, N, width, V, regime), (op, windows)
        report = compare_to_reference(op, ins, out.cpu(), dtype, ref=ref)
        assert report.ok, (op, "padded", report.message)
        torch.testing.assert_close(out_wide[:, N:], before[:, N:], equal_nan=True)  # the padding untouched
        for w, t in zip(wides, ins):
            torch.testing.assert_close(w[:, :N].cpu(), t, equal_nan=True)  # the inputs untouched
        own = tuple(t.to(device, copy=True) for t in ins)  # in place: out is the last input
        windows.clear()
        run(own, own[-1], log)
        assert windows == expected_windows(M, N, N, V, regime), (op, windows)
        report = compare_to_reference(op, ins, own[-1].cpu(), dtype, ref=ref)
        assert report.ok, (op, "in place", report.message)
        off = tuple(torch.cat([t.new_zeros(1), t.flatten()]).to(device)[1:].view(M, N) for t in ins)  # 2 or 4 bytes
        windows.clear()
        report = compare_to_reference(op, ins, run(off, torch.full_like(off[0], float("nan")), log).cpu(), dtype,
                                      ref=ref)
        assert windows == [1] and report.ok, (op, "off a vector", windows, report.message)

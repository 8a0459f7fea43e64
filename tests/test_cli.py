"""The CLI: its commands work without a GPU, and bad input gives one `error:` line on stderr and exit 2."""

import csv
import os
import sys

import pytest
import torch

from onlinesoftmax.cli import main
from onlinesoftmax.harness import results


def run(capsys, *argv):
    code = main(list(argv))
    return code, capsys.readouterr().out


def run_bad(capsys, *argv):
    """A command that must fail on its input: exit 2, and stderr is exactly one `error:` line (returned)."""
    try:
        code = main(list(argv))
    except SystemExit as exc:  # argparse
        code = exc.code
    out, err = capsys.readouterr()
    assert code == 2, (out, err)
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    return lines[0]


def bench_csv(path, **extra):
    """A small CPU-bench-like results CSV (one timed softmax row)."""
    row = dict(op="softmax", variant="cpu.baseline", backend="numpy", rung="r", M=4, N=8, dtype="float32",
               time_ms=1.0, gbps_ideal=1.0, copy_gbps=10.0, device="cpu", commit="abc", group="g", **extra)
    return results.write_csv([row], path)


def test_list_shows_every_backend(capsys):
    code, out = run(capsys, "list")
    assert code == 0
    for name in ("cpu.baseline", "cpu.online_blocked", "cpu.tree_sum"):
        assert name in out


def test_check_passes_the_cpu_ladder(capsys):
    code, out = run(capsys, "check", "--backend", "numpy", "--shape", "3x7", "--shape", "2x1", "--seed", "5")
    assert code == 0, out
    assert "PASS" in out and "FAIL" not in out


def test_check_folds_what_cannot_run_here_into_a_line_per_reason(capsys):
    code, out = run(capsys, "check", "--variant", "cpu.baseline,torch.*", "--shape", "2x3", "--seed", "5")
    assert code == 0, out
    line = next(l for l in out.splitlines() if l.startswith("not checked here"))
    assert line.startswith("not checked here, 4 variants (torch.*): baseline")
    assert "torch.softmax" not in out  # no table row per variant that did not run


def test_bench_writes_results_and_plot(tmp_path, capsys):
    csv_path = tmp_path / "r.csv"
    code, out = run(capsys, "bench", "--cpu", "--shape", "64x256", "--out", str(csv_path))
    assert code == 0, out
    assert "timing CPU ladder, 64 x 256 fp32" in out  # progress that shows in a log, not only in a terminal
    rows = list(csv.DictReader(csv_path.open()))
    assert {r["variant"] for r in rows} >= {"cpu.baseline", "cpu.cached_1pass"}
    assert all(r["ok"] == "True" and float(r["gbps_ideal"]) > 0 and r["torch"] for r in rows)
    # the copy ceiling: the median of its rounds, with their range; % copy divides by the median
    r = rows[0]
    assert float(r["copy_min"]) <= float(r["copy_gbps"]) <= float(r["copy_max"])
    assert float(r["pct_copy"]) == pytest.approx(100 * float(r["gbps_ideal"]) / float(r["copy_gbps"]), rel=1e-4)
    assert "cpu x86_64 (unknown)" not in r["device"] and "cores)" in r["device"]
    code, out = run(capsys, "plot", str(csv_path))
    assert code == 0 and (tmp_path / "r.png").stat().st_size > 1000
    code, out = run(capsys, "report", str(csv_path))
    assert code == 0 and "GB/s (range " in out  # the copy ceiling's range, in the table's heading


@pytest.mark.parametrize("stop", ["interrupt", "sigterm"])
def test_an_interrupted_timing_run_saves_what_it_measured(tmp_path, capsys, monkeypatch, stop):
    """Ctrl-C, or SIGTERM (a `timeout` around a long sweep), during the third measurement, and again during the
    closing copy round: the two rows measured before are written, with the copy ceiling and % copy, and the status is
    130; an interrupt before any row writes nothing."""
    import signal
    from onlinesoftmax.harness import runs

    calls, real = [], runs.measure

    def measure(*a, **k):
        calls.append(a[0].name)
        if len(calls) == 3:
            if stop == "sigterm":
                signal.raise_signal(signal.SIGTERM)
            raise KeyboardInterrupt
        return real(*a, **k)

    real_copy, copies = runs.copy_samples, []

    def copy_samples(*a):  # a second interrupt during the closing copy round: the rows stay
        copies.append(a)
        if len(copies) == 2 and calls:
            raise KeyboardInterrupt
        return real_copy(*a)

    monkeypatch.setattr(runs, "measure", measure)
    monkeypatch.setattr(runs, "copy_samples", copy_samples)
    before = signal.getsignal(signal.SIGTERM)
    csv_path = tmp_path / "r.csv"
    code, out = run(capsys, "bench", "--cpu", "--shape", "4x64", "--out", str(csv_path))
    assert code == 130 and "interrupted: 2 of " in out and "(2 rows)" in out, out
    rows = list(csv.DictReader(csv_path.open()))
    assert [r["variant"] for r in rows] == calls[:2]
    assert all(float(r["pct_copy"]) > 0 and r["ok"] == "True" for r in rows)
    assert signal.getsignal(signal.SIGTERM) == before  # the command's handler is not left behind
    calls.clear()
    copies.clear()
    calls.append("already two")
    calls.append("measured")
    code, out = run(capsys, "bench", "--cpu", "--shape", "4x64", "--out", str(tmp_path / "none.csv"))
    assert code == 130 and not (tmp_path / "none.csv").exists()


def test_interrupted_attention_runs_keep_their_rows(monkeypatch):
    """The attention ladder's and the attention sweep's measurements (harness level: their commands need a GPU):
    an interrupt in the second configuration keeps the first's row, marked interrupted; the ladder's relative
    columns are still computed over what was measured."""
    import torch

    from onlinesoftmax.harness import attention as ladder
    from onlinesoftmax.harness import attention_sweep as sweep
    from onlinesoftmax.harness import results as res

    monkeypatch.setattr(res, "environment", lambda device: {"device": "fake"})
    calls = []

    def stop_at_second(*a):
        calls.append(a)
        if len(calls) > len(sweep.IMPLS):  # the second configuration
            raise KeyboardInterrupt
        return (torch.zeros(2),) * 4, 10.0, 20.0

    monkeypatch.setattr(sweep, "configurations", lambda lengths, dims: [(1024, 64, False, False), (1024, 64, True, False)])
    monkeypatch.setattr(sweep, "_measure", stop_at_second)
    rows = sweep.sweep()
    assert rows.interrupted and len(rows) == 1 and rows[0]["ours_fwd"] == 10.0 and not rows[0]["causal"]

    calls.clear()
    monkeypatch.setattr(ladder, "candidates", lambda: [("cuda.attn_a0", "A0", None, None)])
    monkeypatch.setattr(ladder, "inputs", lambda *a: (torch.zeros(1),) * 3)

    def measured(call, q, k, v, causal, ours):
        calls.append(causal)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return {"time_ms": 2.0, "ok": True, "max_abs_err": 0.0}

    monkeypatch.setattr(ladder, "measure", measured)
    rows = ladder.attention_rows(shapes=[(1, 1, 128, 64)], causals=(False, True))
    assert rows.interrupted and len(rows) == 1 and rows[0]["time_ms"] == 2.0 and rows[0]["speedup_a0"] == 1.0


def test_a_second_run_keeps_the_first(tmp_path, capsys):
    """Results are never silently overwritten: the earlier file moves to a dated name, and the output says so."""
    path = bench_csv(tmp_path / "r.csv")
    first = path.read_text()
    code, out = run(capsys, "bench", "--cpu", "--shape", "2x64", "--out", str(path))
    assert code == 0 and "the file there before is now" in out
    [kept] = tmp_path.glob("r.*.csv")
    assert kept.read_text() == first and path.read_text() != first


def test_keep_previous_never_overwrites_a_kept_file(tmp_path):
    path = tmp_path / "r.csv"
    for i in range(3):
        path.write_text(str(i))
        os.utime(path, (0, 0))  # the same modification time, so the same dated name, each time
        results.keep_previous(path)
    assert sorted(p.read_text() for p in tmp_path.iterdir()) == ["0", "1", "2"]


def test_cpu_device_names_the_model(monkeypatch):
    monkeypatch.setattr(results, "cpu_model", lambda: "Some CPU 9000")
    assert results.device_name("cpu").startswith("cpu Some CPU 9000 (")


def test_plot_draws_a_line_per_variant_and_problem_size(tmp_path, monkeypatch):
    """The few-row shape (M = 32) is not joined to the M x N = 2^27 line of the same variant."""
    from onlinesoftmax.harness import plot

    drawn = []
    import matplotlib.axes

    monkeypatch.setattr(matplotlib.axes.Axes, "plot", lambda self, x, y, **kw: drawn.append((list(x), kw)))
    rows = [dict(op="softmax", variant=v, M=M, N=N, dtype="float32", time_ms=1.0, gbps_ideal=g, copy_gbps=100.0,
                 copy_min=90.0, copy_max=110.0, device="GPU", group="g")
            for v in ("a", "b") for M, N, g in ((1 << 20, 128, 50.0), (1 << 15, 4096, 60.0), (32, 131072, 20.0))]
    plot.plot(results.write_csv(rows, tmp_path / "s.csv"))
    assert sorted(x for x, _ in drawn) == [[128, 4096], [128, 4096], [131072], [131072]]
    assert {kw["linestyle"] for x, kw in drawn if len(x) == 1} == {"none"}


@pytest.mark.parametrize("argv, message", [
    (["check", "--shape", "0x16"], "empty problem"),
    (["check", "--shape", "2x3x4"], "2-D problem"),
    (["check", "--shape", "ax3"], "must be integers"),
    (["check", "--dtype", "int8"], "not supported"),
    (["check", "--variant", "cpu.nope"], "unknown variant"),
    (["check", "--kind", "nope"], "invalid choice"),
    (["plot", "no-such-file.csv"], "no such results file"),
    (["report", "README.md"], "not a results CSV"),
    (["report", "."], "is a directory"),
    (["plot", "tests"], "is a directory"),
    (["inspect", "--arch", "sm_banana"], "not a GPU architecture"),
    (["inspect", "--arch", "90"], "not a GPU architecture"),
    (["bench", "--out", "/nonexistent/dir/r.csv"], "does not exist"),
    ([], "required"),
])
def test_bad_input_is_one_error_line(capsys, argv, message):
    assert message in run_bad(capsys, *argv)


def test_plot_out_in_a_missing_directory(tmp_path, capsys):
    line = run_bad(capsys, "plot", str(bench_csv(tmp_path / "r.csv")), "--out", str(tmp_path / "no" / "x.png"))
    assert "does not exist" in line


def test_report_on_a_csv_without_rows(tmp_path, capsys):
    empty = tmp_path / "empty.csv"
    empty.write_text("")
    assert "is empty" in run_bad(capsys, "report", str(empty))
    header = tmp_path / "header.csv"
    header.write_text(",".join(results.FIELDS) + "\n")
    assert "without rows" in run_bad(capsys, "report", str(header))
    assert "without rows" in run_bad(capsys, "plot", str(header))


def test_report_on_a_binary_file(tmp_path, capsys):
    blob = tmp_path / "x.csv"
    blob.write_bytes(bytes(range(256)) * 4)
    assert "not a results CSV" in run_bad(capsys, "report", str(blob))


def test_report_targets_on_a_bench_csv(tmp_path, capsys):
    line = run_bad(capsys, "report", "--targets", str(bench_csv(tmp_path / "b.csv")))
    assert "no timed rows of api.cuda" in line and "onlinesoftmax sweep" in line


def test_help_defines_the_targets_and_the_arch(capsys):
    for argv, words in ((["report", "--help"], ("92%", "96%", "3 points", "4x torch", "issue 12")),
                        (["inspect", "--help"], ("compute capability", "sm_90"))):
        with pytest.raises(SystemExit):
            main(argv)
        out = " ".join(capsys.readouterr().out.split())
        assert all(w in out for w in words), out


def test_inspect_without_the_cuda_extra_names_its_pip_line(capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "cuda.core", None)  # as if the cuda extra were not installed
    assert "pip install 'onlinesoftmax[cuda]'" in run_bad(capsys, "inspect")


def test_inspect_refuses_an_arch_nvrtc_lacks(capsys):
    from onlinesoftmax.runtime import compile_unavailable

    if compile_unavailable():
        pytest.skip(compile_unavailable())
    line = run_bad(capsys, "inspect", "--arch", "sm_11")
    assert "this NVRTC compiles for" in line and "sm_90" in line


def test_plot_without_matplotlib_names_its_pip_line(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib raises ImportError
    assert "pip install 'onlinesoftmax[cli]'" in run_bad(capsys, "plot", str(bench_csv(tmp_path / "r.csv")))


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message shown without a GPU")
@pytest.mark.parametrize("command", ["ladder", "attention-ladder", "attention-sweep", "sweep", "extras"])
def test_gpu_commands_without_gpu_say_so(capsys, command):
    line = run_bad(capsys, command)
    assert "no CUDA GPU" in line and f"`{command}` needs one" in line


def test_extras_layout_filter_names_the_layouts(capsys):
    line = run_bad(capsys, "extras", "--layout", "no such layout")
    assert "no layout matches" in line and "channels, C = 19" in line


def test_build_native_failure_is_one_error_line(capsys, monkeypatch):
    """The extension builder's own failure (no compiler, no ninja, a compile error) as one line, not a traceback."""
    from onlinesoftmax.runtime import native

    def fail(verbose=False):
        raise RuntimeError("Ninja is required to load C++ extensions")

    monkeypatch.setattr(native, "build", fail)
    line = run_bad(capsys, "build-native")
    assert line.startswith("error: build-native: RuntimeError: Ninja is required"), line


def test_report_targets_names_the_misses(tmp_path, capsys):
    """A synthetic sweep: ours below 92% at N = 128, above at 4096; 3x torch at 32 x 131072 (a miss of 4x)."""
    def row(variant, M, N, ms, pct, queued=None):
        r = dict(op="softmax", variant=variant, M=M, N=N, dtype="float32", time_ms=ms, pct_copy=pct,
                 copy_gbps=4200.0, device="GPU", commit="abc", group=f"softmax {M}x{N}")
        if queued is not None:
            r["queued_ms"] = queued
        return r

    rows = [row("api.cuda.softmax", 1 << 20, 128, 1.0, 90.0), row("torch.softmax", 1 << 20, 128, 0.9, 99.0),
            row("api.cuda.softmax", 1 << 15, 4096, 1.0, 96.0), row("torch.softmax", 1 << 15, 4096, 2.0, 48.0),
            row("api.cuda.softmax", 32, 131072, 0.01, 40.0, 0.008),
            row("torch.softmax", 32, 131072, 0.03, 13.0, 0.04)]
    path = results.write_csv(rows, tmp_path / "s.csv")
    code, out = run(capsys, "report", "--targets", str(path))
    assert code == 0
    line = next(l for l in out.splitlines() if l.startswith("| softmax | float32"))
    assert "90% (128)" in line and "128 (90%)" in line and "4096 (" not in line
    assert "0.90 (1048576×128)" in line  # torch's time over ours: slower than torch there
    assert "32×131072: 3.0× (5.0×) ✗" in line


def test_sweep_shapes_from_row_lengths_or_mxn():
    """--n takes row lengths (M = 2^27 / N) or MxN shapes; without --n the few-row shapes join the powers of 2."""
    from onlinesoftmax.harness.suites import FEW_ROWS, SWEEP_N, sweep_groups

    groups = sweep_groups(("softmax",), ("float32",), [4096, (32, 131072)])
    assert [(g.M, g.N) for g in groups] == [(32768, 4096), (32, 131072)]
    shapes = [(g.M, g.N) for g in sweep_groups(("softmax",), ("float32",))]
    assert len(shapes) == len(SWEEP_N) + len(FEW_ROWS) and shapes[-len(FEW_ROWS):] == FEW_ROWS


def test_attention_sweep_report_and_plot_from_its_csv(tmp_path, capsys):
    """report and plot recognise an attention-sweep CSV by its columns: the table has ours over flash and cuDNN,
    an empty backend (efficient has no GQA kernel) reads as a dash, and a CSV of another kind is refused."""
    from onlinesoftmax.harness import attention_sweep as sweep

    rows = [dict(S=4096, D=128, causal=c, H=16, Hkv=hk, ours_fwd=460.0, ours_bwd=331.0, flash_fwd=341.0,
                 flash_bwd=289.0, cudnn_fwd=614.0, cudnn_bwd=508.0, efficient_fwd=166.0 if hk == 16 else "",
                 efficient_bwd="", max_abs_diff_O_vs_flash=0.002, device="GPU", commit="abc")
            for c in (False, True) for hk in (16, 4)]
    path = results.write_csv(rows, tmp_path / "a.csv", fields=sweep.FIELDS)
    code, out = run(capsys, "report", str(path))
    assert code == 0 and "| 4096 | 128 | no | 16/16 | 460 | 341 | 614 | 166 |" in out
    assert "1.35 / 0.75" in out and "| 16/4 | 460 | 341 | 614 | – |" in out
    pytest.importorskip("matplotlib")
    code, out = run(capsys, "plot", str(path), "--out", str(tmp_path / "a.png"))
    assert code == 0 and (tmp_path / "a.png").stat().st_size > 1000
    assert "not an attention sweep CSV" in run_bad(capsys, "report", "--attention", str(bench_csv(tmp_path / "b.csv")))


def test_extras_layouts_loop_on_cpu(monkeypatch):
    """The layouts benchmark's loop (harness/extras.py) on small CPU layouts: torch's rows are checked against
    float64 along the dim for all four ops and the sliced view, and ours (CUDA, Triton: no GPU here) are rows with
    a note, not a crash; a known-wrong implementation (softmax over the other dim) fails the same check."""
    from onlinesoftmax.harness import extras

    layouts = (("dim 0", (33, 7), 0, None), ("channels", (2, 5, 3, 4), 1, None), ("sliced", (6, 9), 1, (11, 2)))
    rows = extras.layout_rows(1000.0, layouts=layouts, dtypes=(torch.float32,), device="cpu")
    torch_rows = [r for r in rows if r["backend"] == "baseline"]
    assert len(torch_rows) == 3 * 4 and all(r["ok"] for r in torch_rows), torch_rows
    assert all(not r["ok"] and "error" in r["note"] for r in rows if r["backend"] != "baseline")
    monkeypatch.setattr(extras, "_layout_impls",
                        lambda op, dim: {"wrong": ("baseline", lambda x: torch.softmax(x, 1 - dim))})
    (bad,) = extras.layout_rows(1000.0, layouts=layouts[:1], dtypes=(torch.float32,), op_names=("softmax",),
                                device="cpu")
    assert not bad["ok"]


@pytest.mark.parametrize("bad", ["0", "-4", "3000", "32768", "x"])
def test_attention_sweep_refuses_lengths_that_do_not_divide_its_tokens(capsys, bad):
    assert "divides the sweep's 16384 tokens" in run_bad(capsys, "attention-sweep", "--s", bad)


def test_report_grid_and_targets_over_several_csvs(tmp_path, capsys):
    """A sweep writes one CSV per dtype: --grid and --targets read them together. Odd N are at M = 2^27 // N (not
    few-row shapes); 129 at 85% against 128's 95% is more than 3 points below its power-of-two neighbour (↓), and
    below the 92% target (✗); the backward's target is 96%."""
    def row(op, variant, dtype, N, ms, pct):
        return dict(op=op, variant=variant, M=(1 << 27) // N, N=N, dtype=dtype, time_ms=ms, pct_copy=pct,
                    copy_gbps=4200.0, device="GPU", commit="abc", group=f"{op} {N}")

    fwd = [row("softmax", "api.cuda.softmax", "float32", 128, 1.0, 95.0),
           row("softmax", "torch.softmax", "float32", 128, 2.0, 48.0),
           row("softmax", "api.cuda.softmax", "float32", 129, 1.1, 85.0),
           row("softmax", "torch.softmax", "float32", 129, 1.0, 90.0)]
    bwd = [row("softmax_backward", "api.cuda.softmax_backward", "bfloat16", 128, 1.0, 95.4)]
    paths = [results.write_csv(fwd, tmp_path / "f.csv"), results.write_csv(bwd, tmp_path / "b.csv")]
    code, out = run(capsys, "report", "--grid", *map(str, paths))
    assert code == 0
    assert "| N | float32 fwd | float32 bwd | bfloat16 fwd | bfloat16 bwd |" in out
    assert "| 128 | 95% (2.00×) | – | – | 95% ✗ |" in out  # 95.4 < 96 backward
    assert "| 129 | 85% (0.91×) ✗ ↓ | – | – | – |" in out
    code, out = run(capsys, "report", "--targets", *map(str, paths))
    line = next(l for l in out.splitlines() if l.startswith("| softmax | float32"))
    assert "129 (85% vs 95%)" in line and "0.91 (1040447×129)" in line and "few rows" not in line
    # a sweep of the Triton backend alone (`sweep --backend triton`): its rows, the same report
    triton = [dict(r, variant=r["variant"].replace("api.cuda", "api.triton")) for r in fwd]
    code, out = run(capsys, "report", "--grid", str(results.write_csv(triton, tmp_path / "t.csv")))
    assert code == 0 and "| 129 | 85% (0.91×) ✗ ↓ |" in out
    both = fwd + [dict(r, variant="api.triton.softmax", pct_copy=10.0, time_ms=9.0) for r in fwd[:1]]
    code, out = run(capsys, "report", "--grid", str(results.write_csv(both, tmp_path / "both.csv")))
    assert "| 128 | 95% (2.00×) |" in out  # both backends: the production one's rows


def test_report_targets_says_which_few_row_target_was_not_timed(tmp_path, capsys):
    """A sweep without 32 x 131072 (the public grid's sweeps before it joined FEW_ROWS) cannot show that 4x target:
    it is named as not timed, not dropped; and a grid of non-power-of-two N alone has no neighbour to compare."""
    rows = [dict(op="softmax", variant=v, M=M, N=N, dtype="float32", time_ms=ms, pct_copy=pct, copy_gbps=4200.0,
                 device="GPU", commit="abc", group=f"softmax {M}x{N}")
            for v, M, N, ms, pct in (("api.cuda.softmax", 1, 262144, 0.01, 5.0), ("torch.softmax", 1, 262144, 0.08, 1.0),
                                     ("api.cuda.softmax", (1 << 27) // 1000, 1000, 1.0, 95.0))]
    path = str(results.write_csv(rows, tmp_path / "s.csv"))
    code, out = run(capsys, "report", "--targets", path)
    assert code == 0 and "1×262144: 8.0×; 32×131072: not timed ✗" in out
    code, out = run(capsys, "report", "--grid", path)
    assert code == 0 and "| 1000 | 95% |" in out
    assert "not allowed with" in run_bad(capsys, "report", "--grid", "--targets", path)


def test_report_takes_a_rerun_over_the_run_it_replaces(tmp_path, capsys):
    """The same shape in two CSVs (a rerun given last): one row of it, the rerun's, in the grid and the targets."""
    def row(ms, pct):
        return [dict(op="softmax", variant="api.cuda.softmax", M=1 << 20, N=128, dtype="float32", time_ms=ms,
                     pct_copy=pct, copy_gbps=4200.0, device="GPU", commit="abc", group="softmax 128"),
                dict(op="softmax", variant="torch.softmax", M=1 << 20, N=128, dtype="float32", time_ms=1.0,
                     pct_copy=50.0, copy_gbps=4200.0, device="GPU", commit="abc", group="softmax 128")]
    first = str(results.write_csv(row(2.0, 50.0), tmp_path / "a.csv"))
    rerun = str(results.write_csv(row(0.5, 99.0), tmp_path / "b.csv"))
    code, out = run(capsys, "report", "--grid", first, rerun)
    assert "| 128 | 99% (2.00×) | – |" in out
    code, out = run(capsys, "report", "--targets", first, rerun)
    assert "| 99% (128) |" in out and "2.00 (1048576×128)" in out


def test_report_ab_compares_trees_against_the_first(tmp_path, capsys):
    """benchmarks/ab.sh's CSVs (ab-NAME.csv, the base first): % of copy side by side with a wrong output marked, each
    later tree's change against the base with long rows (M = 2^27 // N) and few rows apart, the cells that lost
    most first, and the long cells at target per tree (92% forward, 96% backward); one CSV alone is refused."""
    def rows(pcts, ok=True):
        return [dict(op=op, variant=f"api.cuda.{op}", M=M, N=N, dtype="float32", time_ms=1.0, pct_copy=pct,
                     ok=ok, copy_gbps=4200.0, device="GPU", commit="abc", group=f"{op} {M}x{N}")
                for (op, M, N), pct in zip((("softmax", 2048, 65536), ("softmax_backward", 1024, 131072),
                                            ("softmax", 32, 131072)), pcts)]
    base = str(results.write_csv(rows((91.0, 97.0, 40.0)), tmp_path / "ab-base.csv"))
    new = str(results.write_csv(rows((93.5, 95.0, 44.0)), tmp_path / "ab-new.csv"))
    bad = str(results.write_csv(rows((91.0, 97.0, 40.0), ok=False), tmp_path / "ab-bad.csv"))
    code, out = run(capsys, "report", "--ab", base, new, bad)
    assert code == 0
    assert "| op | dtype | M × N | base | new | bad |" in out
    assert "| softmax | float32 | 2048 × 65536 | 91.0 | 93.5 | 91.0 ! |" in out
    assert "**new against base**" in out and "**bad against base**" in out
    assert "- long rows (M × N = 2^27): 2 cells, median +0.2, mean +0.25, -2.0 to +2.5" in out
    assert out.index("-2.0: softmax_backward float32 1024 × 131072, 97.0 → 95.0") < out.index("+2.5: softmax")
    assert out.count("+2.5: softmax float32 2048 × 65536") == 1  # a cell among both the lost and gained: once
    assert "- few rows: 1 cells, median +4.0" in out
    # a wrong output is no change and no cell at target
    assert "- long rows (M × N = 2^27), a wrong output (left out): softmax float32 2048 × 65536" in out
    assert "right outputs only: base 1 of 2, new 1 of 2, bad 0 of 2" in out
    assert "two or more CSVs" in run_bad(capsys, "report", "--ab", base)
    other = tmp_path / "other"
    other.mkdir()
    twin = str(results.write_csv(rows((91.0, 97.0, 40.0)), other / "ab-base.csv"))
    assert "name the same tree" in run_bad(capsys, "report", "--ab", base, twin)


def test_report_ab_reads_the_backend_the_sweeps_timed(tmp_path, capsys):
    """ab.sh with BACKEND=triton: the CSVs hold api.triton rows, which --ab compares; CSVs of two backends of ours
    are refused, not mixed."""
    def rows(backend, pct):
        return [dict(op="softmax", variant=f"api.{backend}.softmax", M=1040447, N=129, dtype="float32", time_ms=1.0,
                     pct_copy=pct, ok=True, copy_gbps=4200.0, device="GPU", commit="abc", group="softmax")]
    base = str(results.write_csv(rows("triton", 35.0), tmp_path / "ab-base.csv"))
    window = str(results.write_csv(rows("triton", 80.0), tmp_path / "ab-window.csv"))
    code, out = run(capsys, "report", "--ab", base, window)
    assert code == 0 and "| softmax | float32 | 1040447 × 129 | 35.0 | 80.0 |" in out
    cuda = str(results.write_csv(rows("cuda", 95.0), tmp_path / "ab-cuda.csv"))
    assert "one backend of ours" in run_bad(capsys, "report", "--ab", base, cuda)


def test_gpu_activities_reads_the_gpu_work_of_a_profile(tmp_path):
    """harness.bench.gpu_activities (profile_once --timeline, cross_entropy.py's gpu_timeline): the kernels, copies
    and memsets of a profile's Chrome trace, in start order with their ends; host events and instants left out."""
    import json

    from onlinesoftmax.harness.bench import gpu_activities

    events = [dict(cat="kernel", name="bands_fix", ts=30.0, dur=4.0),
              dict(cat="cpu_op", name="aten::zero_", ts=1.0, dur=2.0),
              dict(cat="gpu_memset", name="Memset (Device)", ts=10.0, dur=1.5),
              dict(cat="kernel", name="spin_kernel", ts=0.0, dur=9.0),
              dict(cat="gpu_memcpy", name="Memcpy DtoD", ts=20.0, dur=2.0),
              dict(cat="kernel", name="no duration", ts=5.0)]

    class Profile:
        def export_chrome_trace(self, path):
            with open(path, "w") as f:
                json.dump({"traceEvents": events}, f)

    assert gpu_activities(Profile()) == [(0.0, 9.0, "spin_kernel"), (10.0, 11.5, "Memset (Device)"),
                                         (20.0, 22.0, "Memcpy DtoD"), (30.0, 34.0, "bands_fix")]

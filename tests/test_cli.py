"""The CLI: its commands work without a GPU, and bad input gives a message and exit 2, no traceback."""

import csv

import pytest
import torch

from onlinesoftmax.cli import main


def run(capsys, *argv):
    code = main(list(argv))
    return code, capsys.readouterr().out


def test_list_shows_every_backend(capsys):
    code, out = run(capsys, "list")
    assert code == 0
    for name in ("cpu.baseline", "cpu.online_blocked", "cpu.tree_sum"):
        assert name in out


def test_check_passes_the_cpu_ladder(capsys):
    code, out = run(capsys, "check", "--backend", "numpy", "--shape", "3x7", "--shape", "2x1", "--seed", "5")
    assert code == 0, out
    assert "PASS" in out and "FAIL" not in out


def test_bench_writes_results_and_plot(tmp_path, capsys):
    csv_path = tmp_path / "r.csv"
    code, out = run(capsys, "bench", "--cpu", "--shape", "64x256", "--out", str(csv_path))
    assert code == 0, out
    rows = list(csv.DictReader(csv_path.open()))
    assert {r["variant"] for r in rows} >= {"cpu.baseline", "cpu.cached_1pass"}
    assert all(r["ok"] == "True" and float(r["gbps_ideal"]) > 0 and r["torch"] for r in rows)
    code, out = run(capsys, "plot", str(csv_path))
    assert code == 0 and (tmp_path / "r.png").stat().st_size > 1000


@pytest.mark.parametrize("argv, message", [
    (["check", "--shape", "0x16"], "empty problem"),
    (["check", "--shape", "2x3x4"], "2-D problem"),
    (["check", "--shape", "ax3"], "must be integers"),
    (["check", "--dtype", "int8"], "not supported"),
    (["check", "--variant", "cpu.nope"], "unknown variant"),
    (["plot", "no-such-file.csv"], "no such results file"),
])
def test_bad_input_is_a_clear_error(capsys, argv, message):
    code, out = run(capsys, *argv)
    assert code == 2 and message in out and "Traceback" not in out


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message shown without a GPU")
@pytest.mark.parametrize("command", ["ladder", "sweep", "extras"])
def test_gpu_commands_without_gpu_say_so(capsys, command):
    code, out = run(capsys, command)
    assert code == 2 and "no CUDA GPU" in out and f"`{command}` needs one" in out


def test_report_targets_names_the_misses(tmp_path, capsys):
    """A synthetic sweep: ours below 92% at N = 128, above at 4096; 3x torch at 32 x 131072 (a miss of 4x)."""
    from onlinesoftmax.harness import results

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

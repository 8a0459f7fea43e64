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
def test_ladder_without_gpu_says_so(capsys):
    code, out = run(capsys, "ladder")
    assert code == 2 and "no CUDA GPU" in out

"""What pyproject.toml promises: a core install of numpy and torch, extras named in the errors, the supported
torch and Triton ranges holding for the environment the tests run in, and a fully pinned dev set."""

import os
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

import onlinesoftmax
from onlinesoftmax.install import EXTRAS, pip_line

tomllib = pytest.importorskip("tomllib")  # Python >= 3.11
Requirement = pytest.importorskip("packaging.requirements").Requirement

ROOT = Path(__file__).resolve().parents[1]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def python(code: str) -> subprocess.CompletedProcess:
    """Run `code` in a fresh interpreter that imports this same onlinesoftmax."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(Path(onlinesoftmax.__file__).parents[1])] + os.environ.get("PYTHONPATH", "").split(os.pathsep)))
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)


def _requirements(specs) -> dict:
    return {Requirement(s).name: Requirement(s) for s in specs}


def test_core_install_is_what_the_ops_need():
    assert set(_requirements(PROJECT["dependencies"])) == {"numpy", "torch"}


def test_the_extras_the_errors_name_are_the_extras_pyproject_defines():
    assert set(EXTRAS) == set(PROJECT["optional-dependencies"])
    assert pip_line("cuda") == "pip install 'onlinesoftmax[cuda]'"


@pytest.mark.parametrize("name, where", [("torch", "dependencies"), ("triton", "triton")])
def test_supported_range_holds_here(name, where):
    """The ranges pyproject states are the ones tested: this run's torch and Triton lie inside them."""
    specs = PROJECT["dependencies"] if where == "dependencies" else PROJECT["optional-dependencies"][where]
    req = _requirements(specs)[name]
    try:
        version = metadata.version(name)
    except metadata.PackageNotFoundError:
        pytest.skip(f"{name} is not installed here")
    assert req.specifier.contains(version, prereleases=True), (name, version, str(req.specifier))


def test_dev_set_pins_exact_versions_of_all_pyproject_names():
    """requirements-dev.txt pins exact versions, torch's CPU build among them, and nothing is left unpinned."""
    lines = [line for line in (ROOT / "requirements-dev.txt").read_text().splitlines()
             if line.strip() and not line.startswith("#")]
    pins = {Requirement(line).name.lower(): Requirement(line) for line in lines}
    assert all(len(r.specifier) == 1 and next(iter(r.specifier)).operator == "==" for r in pins.values()), lines
    assert str(pins["torch"].specifier).endswith("+cpu")
    # every requirement of the project and of its extras is in the pinned set
    wanted = {Requirement(s).name.lower() for s in PROJECT["dependencies"]}
    wanted |= {Requirement(s).name.lower() for specs in PROJECT["optional-dependencies"].values() for s in specs}
    assert wanted <= set(pins)


def test_import_needs_neither_the_cli_nor_a_gpu_extra():
    """With rich, matplotlib, triton and cuda.core unimportable, the package imports and its ops run on CPU."""
    code = ("import sys\n"
            "for m in ('rich', 'matplotlib', 'triton', 'cuda.core'): sys.modules[m] = None\n"
            "import torch, onlinesoftmax as osm\n"
            "y = osm.softmax(torch.tensor([[0.0, float('-inf')]]))\n"
            "assert y.tolist() == [[1.0, 0.0]], y\n"
            "assert not [m for m in sys.modules if m.startswith(('rich.', 'matplotlib.'))]\n")
    done = python(code)
    assert done.returncode == 0, done.stderr


def test_cli_without_rich_is_one_error_line_naming_the_extra():
    code = ("import sys\n"
            "sys.modules['rich'] = None\n"
            "from onlinesoftmax.cli import main\n"
            "sys.exit(main(['list']))\n")
    done = python(code)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.splitlines() == [done.stderr.strip()] and done.stderr.startswith("error: ")
    assert "pip install 'onlinesoftmax[cli]'" in done.stderr

"""The Triton softmax launcher's second way to launch (engines/triton/softmax.py `_Ready`): a shape launched before is
launched again without the plan or Triton's binder. Checked without a GPU: kernels compile for sm_90 with Triton's
driver stubbed (tests/fakes.py stub_triton_driver), in a process of its own, and what each launch hands the compiled
kernel's launcher is recorded; the ready launch must hand it what Triton's own launch (JITFunction.run) handed it for
the same call, and must not be taken where the plan or the kernel's specialisation would differ."""

import json
import os
import pathlib
import subprocess
import sys

import pytest

pytest.importorskip("triton")

HERE = pathlib.Path(__file__).parent

SCRIPT = r'''
import json, sys
sys.path.insert(0, sys.argv[1])
import fakes
import torch
handed = []
fakes.stub_triton_driver(handed)
from onlinesoftmax.engines.triton import softmax as K
from onlinesoftmax.engines.triton import softmax_rules as R

# occupancy is learnt from a CUDA device's properties; here a configuration counts as learnt once launched
K._learn_occupancy = lambda key, compiled, warps, device: key is not None and K.OCCUPANCY.setdefault(key, 1)
_empty = torch.empty
torch.empty = lambda *a, **kw: _empty(*a, **kw).fill_(-7)  # poisoned: a workspace that must be zeroed shows it
planned = []
plan = K.plan
K.plan = lambda *a, **kw: (planned.append(a[2]), plan(*a, **kw))[1]


def describe(t, names):
    """One handed value as JSON: the op's tensors by name, a workspace by what it must be, the launch metadata by its
    fields, the hooks by identity, anything else as it is."""
    if isinstance(t, torch.Tensor):
        name = names.get(t.data_ptr())
        return ["tensor", name] if name else ["workspace", str(t.dtype), t.numel(), bool((t == 0).all())]
    if type(t).__name__ == "LazyDict":
        return ["metadata", sorted((k, repr(v)) for k, v in t.get().items())]
    if type(t).__name__ == "HookChain":
        return ["hook", id(t)]
    return t if t is None or isinstance(t, (bool, int, float, str)) else repr(t)


def call(tag, fn, tensors):
    names = {t.data_ptr(): n for n, t in tensors.items()}
    before = len(handed), len(planned)
    fn()
    launches = [[describe(v, names) for v in h] for h in handed[before[0]:]]
    return {"tag": tag, "planned": len(planned) - before[1], "launches": launches}


def op(backward, log, regime, tensors):
    if backward:
        return lambda: K.softmax_backward(tensors["y"], tensors["dy"], tensors["out"], log=log, regime=regime)
    return lambda: K.softmax_forward(tensors["x"], tensors["out"], log=log, regime=regime)


def case(tag, backward, log, regime, M, N, offset=0, stride=None, dtype=torch.float32):
    stride = stride or N
    def view(k):  # rows of N at `stride`, starting `offset` elements into a buffer of their own
        return torch.randn(M * stride + offset + 8).to(dtype)[offset:offset + M * stride].view(M, stride)[:, :N]
    ins = {"y": view(0), "dy": view(1)} if backward else {"x": view(2)}
    tensors = {**ins, "out": view(3)}
    fn = op(backward, log, regime, tensors)
    return [call(f"{tag} #{i}", fn, tensors) for i in range(3)]


out = {}
out["rows"] = case("rows forward", False, False, None, 6, 40)
out["rows_log_bwd"] = case("rows log backward", True, True, None, 6, 40)
out["unaligned"] = case("rows forward, pointers 4 bytes off", False, False, None, 6, 40, offset=1)
out["strided"] = case("rows forward, row stride 48", False, False, None, 6, 40, stride=48)
out["split"] = case("split forward", False, False, "split", 2, 4096)
out["online_bwd"] = case("online backward", True, False, "online", 2, 4096)
out["bf16"] = case("rows forward bf16", False, False, None, 5, 33, dtype=torch.bfloat16)
tile = R.ROWS_TILE_BYTES
R.ROWS_TILE_BYTES = 64 * 4  # a knob set between calls: the next call plans again
out["knob"] = case("rows forward, ROWS_TILE_BYTES 256", False, False, None, 6, 40)
R.ROWS_TILE_BYTES = tile
out["knob_back"] = case("rows forward, the knob back", False, False, None, 6, 40)
out["ready"] = len(K._READY)
print(json.dumps(out))
'''


@pytest.fixture(scope="module")
def launches():
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE.parent / "src"), os.environ.get("PYTHONPATH", "")])}
    env.pop("TRITON_INTERPRET", None)
    run = subprocess.run([sys.executable, "-c", SCRIPT, str(HERE)], env=env, capture_output=True, text=True,
                         timeout=600)
    if run.returncode:
        pytest.fail(f"the stubbed-driver script failed:\n{run.stderr[-3000:]}")
    return json.loads(run.stdout.strip().splitlines()[-1])


CASES = ("rows", "rows_log_bwd", "unaligned", "strided", "split", "online_bwd", "bf16", "knob", "knob_back")


@pytest.mark.parametrize("case", CASES)
def test_ready_launch_hands_the_launcher_what_triton_did(launches, case):
    first, second, third = launches[case]
    assert first["planned"] == 1 and len(first["launches"]) == 1
    if case == "rows":  # the first rows configuration: its occupancy (which a rows grid may take) learnt at its launch
        assert second["planned"] == 1, "a grid planned before the occupancy was learnt was kept"
    if case == "split":  # a plan without an occupancy key (its grid takes none): ready from the first call
        assert second["planned"] == 0
    assert third["planned"] == 0, "the third call planned: the ready launch was not taken"
    assert first["launches"] == second["launches"] == third["launches"]


def test_ready_launch_carries_the_workspace_fresh(launches):
    (launch,) = launches["split"][2]["launches"]
    workspaces = [v for v in launch if isinstance(v, list) and v[0] == "workspace"]
    assert [w[1] for w in workspaces] == ["torch.float32", "torch.int32"]
    assert workspaces[1][3], "the split regime's counters must be zeroed on every call"


def test_ready_launch_is_per_specialisation(launches):
    # the same shape with unaligned pointers, another row stride or another knob compiles another kernel (the
    # stubbed launcher's function is the compiled kernel's name and hash), or plans another grid
    rows = launches["rows"][2]["launches"][0]
    for case in ("unaligned", "strided", "knob"):
        first = launches[case][0]
        assert first["planned"] == 1, f"{case}: a launch made ready for another case was taken"
        assert first["launches"][0] != rows, case
    assert launches["knob_back"][0]["planned"] == 1  # the knob set back: planned again, then ready
    assert launches["knob_back"][2]["launches"][0] == rows
    assert launches["ready"] == len(CASES) - 2  # the knob's cases are the rows case's shape

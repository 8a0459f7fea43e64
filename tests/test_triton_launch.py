"""The Triton softmax launcher's second way to launch (engines/triton/softmax.py `_Ready`): a shape planned twice is
launched again without the plan or Triton's binder. Checked without a GPU: kernels compile for sm_90 with Triton's
driver stubbed (tests/fakes.py stub_triton_driver), in a process of its own, and what each launch hands the compiled
kernel's launcher is recorded; the ready launch must hand it what Triton's own launch (JITFunction.run) handed it for
the same call, on the call's current stream, with fresh workspaces, and must not be taken where the plan or the
kernel's specialisation would differ."""

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
handed, stream = [], [7]
fakes.stub_triton_driver(handed, stream)
from onlinesoftmax.engines.triton import softmax as K
from onlinesoftmax.engines.triton import softmax_rules as R

_empty = torch.empty
torch.empty = lambda *a, **kw: _empty(*a, **kw).fill_(-7)  # poisoned: a workspace that must be zeroed shows it
# occupancy is learnt from a CUDA device's properties; here a configuration counts as learnt once launched
K._learn_occupancy = lambda key, compiled, warps, device: key is not None and K.OCCUPANCY.setdefault(key, 1)
planned = []
plan = K.plan
K.plan = lambda *a, **kw: (planned.append(a[2]), plan(*a, **kw))[1]
calls = [0]


def describe(i, t, names):
    # the i-th value a launcher was handed, as JSON: the op's tensors by name, a workspace by what it must be, the
    # stream as "current" where it is the one this call ran on, the launch metadata by its fields, the hooks by
    # identity, anything else as it is
    if isinstance(t, torch.Tensor):
        name = names.get(t.data_ptr())
        return ["tensor", name] if name else ["workspace", str(t.dtype), t.numel(), bool((t == 0).all())]
    if i == 3:
        return "current" if t == stream[0] else t
    if type(t).__name__ == "LazyDict":
        return ["metadata", sorted((k, "current" if k == "stream" and v == stream[0] else repr(v))
                                   for k, v in t.get().items())]
    if type(t).__name__ == "HookChain":
        return ["hook", id(t)]
    return t if t is None or isinstance(t, (bool, int, float, str)) else repr(t)


def call(tag, fn, tensors):
    names = {t.data_ptr(): n for n, t in tensors.items()}
    calls[0] += 1
    stream[0] = 100 + calls[0]  # every call on a stream of its own
    before = len(handed), len(planned)
    fn()
    launches = [[describe(i, v, names) for i, v in enumerate(h)] for h in handed[before[0]:]]
    return {"tag": tag, "planned": len(planned) - before[1], "launches": launches}


def op(backward, log, regime, tensors):
    if backward:
        return lambda: K.softmax_backward(tensors["y"], tensors["dy"], tensors["out"], log=log, regime=regime)
    return lambda: K.softmax_forward(tensors["x"], tensors["out"], log=log, regime=regime)


def case(tag, backward, log, regime, M, N, offset=0, stride=None, dtype=torch.float32, knobs=None):
    saved = {k: getattr(R, k) for k in knobs or {}}
    for k, v in (knobs or {}).items():
        setattr(R, k, v)
    stride = stride or N

    def view(k):  # rows of N at `stride`, starting `offset` elements into a buffer of their own
        return torch.randn(M * stride + offset + 8).to(dtype)[offset:offset + M * stride].view(M, stride)[:, :N]

    ins = {"y": view(0), "dy": view(1)} if backward else {"x": view(2)}
    tensors = {**ins, "out": view(3)}
    fn = op(backward, log, regime, tensors)
    out = [call(f"{tag} #{i}", fn, tensors) for i in range(4)]
    for k, v in saved.items():
        setattr(R, k, v)
    return out


out = {}
out["rows"] = case("rows forward", False, False, None, 6, 40)
out["rows_log_bwd"] = case("rows log backward", True, True, None, 6, 40)
out["unaligned"] = case("rows forward, pointers 4 bytes off", False, False, None, 6, 40, offset=1)
out["strided"] = case("rows forward, row stride 48", False, False, None, 6, 40, stride=48)
out["split"] = case("split forward", False, False, "split", 2, 4096)
out["split_bwd"] = case("split log backward", True, True, "split", 3, 2500)
out["online_bwd"] = case("online backward", True, False, "online", 2, 4096)
out["bf16"] = case("rows forward bf16", False, False, None, 5, 33, dtype=torch.bfloat16)
out["ready_before_knobs"] = len(K._READY)
out["window"] = case("rows forward through windows", False, False, None, 4, 41, knobs={"ROWS_WINDOW_MIN_N": 1})
out["window_tail"] = case("rows forward through windows, the last row apart", False, False, None, 6, 41,
                          knobs={"ROWS_WINDOW_MIN_N": 1, "ROWS_WINDOW_TAIL_MIN_BYTES": 0})
out["knob"] = case("rows forward, ROWS_TILE_BYTES 256", False, False, None, 6, 40, knobs={"ROWS_TILE_BYTES": 256})
out["ready_after_knob"] = len(K._READY)
out["knob_back"] = case("rows forward, the knob back", False, False, None, 6, 40)
out["ready_after_back"] = len(K._READY)
# a persistent grid takes the configuration's occupancy: a shape seen, then planned under a knob that makes a
# configuration not launched yet (its first grid from the estimate), is made ready only once that is learnt
out["persistent_seen"] = case("rows forward, persistent", False, False, None, 300, 40, knobs={"ROWS_PERSISTENT": True})
out["persistent"] = case("rows forward, persistent, a new tile", False, False, None, 300, 40,
                         knobs={"ROWS_PERSISTENT": True, "ROWS_TILE_BYTES": 256})
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


NEW = ("rows", "rows_log_bwd", "unaligned", "strided", "split", "split_bwd", "online_bwd", "bf16", "window", "knob")


@pytest.mark.parametrize("case", NEW + ("knob_back",))
def test_ready_launch_hands_the_launcher_what_triton_did(launches, case):
    first, second, third, fourth = launches[case]
    assert first["planned"] == 1 and len(first["launches"]) == 1
    # a shape is made ready at its second plan (a shape seen once pays nothing for it), once its configuration's
    # occupancy is learnt (at its first launch). The knob's cases are the rows case's shape, seen: the knob set back
    # finds the rows configuration learnt (rows of 40 fp32 are whole 16-byte vectors: UNIT 4, rules.rows_unit)
    assert second["planned"] == (0 if case == "knob_back" else 1)
    assert third["planned"] == fourth["planned"] == 0, "the ready launch was not taken"
    assert first["launches"] == second["launches"] == third["launches"] == fourth["launches"]
    assert first["launches"][0][3] == "current", "the launch was not on the call's current stream"


def test_persistent_grid_made_ready_once_its_occupancy_is_learnt(launches):
    first, second, third, _ = launches["persistent"]
    grid = [launch[0] for call in (first, second, third) for launch in call["launches"]]
    assert grid[0] != grid[1], "the estimated and the learnt occupancy give one grid: the case tests nothing"
    assert [c["planned"] for c in (first, second, third)] == [1, 1, 0]
    assert second["launches"] == third["launches"]


def test_ready_launch_carries_the_workspace_fresh(launches):
    for case in ("split", "split_bwd"):
        for call in launches[case]:
            (launch,) = call["launches"]
            workspaces = [v for v in launch if isinstance(v, list) and v[0] == "workspace"]
            assert [w[1] for w in workspaces] == ["torch.float32", "torch.int32"]
            assert workspaces[1][3], f"{call['tag']}: the split regime's counters must be fresh and zeroed a call"


def test_window_plan_with_its_last_row_apart_is_never_made_ready(launches):
    for call in launches["window_tail"]:
        assert call["planned"] == 1 and len(call["launches"]) == 2, call["tag"]
        # V (the rows kernel's third parameter from the end, before TAIL and UNIT): the windows, then the last row's scalar launch
        assert [launch[-3] for launch in call["launches"]] == [4, 1]
    assert launches["window"][2]["launches"][0][-3] == 4  # one launch through windows: ready


def test_ready_launch_is_per_specialisation(launches):
    # the same shape with unaligned pointers, another row stride or another knob compiles another kernel (the
    # stubbed launcher's function is the compiled kernel's name and hash), or plans another grid
    rows = launches["rows"][2]["launches"][0]
    for case in ("unaligned", "strided", "knob"):
        first = launches[case][0]
        assert first["planned"] == 1, f"{case}: a launch made ready for another case was taken"
        assert first["launches"][0] != rows, case
    assert launches["knob_back"][2]["launches"][0] == rows
    # one ready launch a specialisation; an assignment to the rules (the knob's setting back) drops them all (and
    # their native entries), the shape then made ready again
    assert launches["ready_before_knobs"] == len(NEW) - 2  # before the windows' and the knob's cases
    assert launches["ready_after_knob"] == 0 and launches["ready_after_back"] == 1

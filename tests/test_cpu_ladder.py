"""Every CPU rung equals the float64 softmax on every input kind and every check shape."""

import pytest
import torch

from onlinesoftmax import registry
from onlinesoftmax.harness.check import check_variant
from onlinesoftmax.harness.inputs import kinds_for
from onlinesoftmax.harness.suites import check_shapes

CPU = registry.variants(backend="numpy")


def test_the_ladder_is_complete():
    names = {v.name for v in CPU}
    assert {"cpu.baseline", "cpu.safe_3pass", "cpu.online_2pass", "cpu.online_blocked",
            "cpu.split_row", "cpu.cached_1pass", "cpu.tree_sum"} <= names


@pytest.mark.parametrize("variant", CPU, ids=lambda v: v.name)
def test_cpu_variant_matches_float64(variant, seed):
    for i, (M, N) in enumerate(check_shapes(variant)):
        for j, kind in enumerate(kinds_for(variant.op)):
            report = check_variant(variant, M, N, torch.float32, kind, seed + 97 * i + j)
            assert report.ok and not report.skipped, f"{M}x{N} {kind}: {report.message}"

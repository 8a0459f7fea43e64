"""vocab_parallel_cross_entropy over gloo on CPU: 2 and 3 processes, uneven shards (one empty, one holding no
target), against the single-process loss and gradient; exactly one collective forward, none backward (every
torch.distributed collective is wrapped and counted); mismatched shards raise on every rank."""

import os
import socket
import traceback

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import onlinesoftmax as osm
from onlinesoftmax import reference
from onlinesoftmax.errors import OnlineSoftmaxError

COLLECTIVES = ("all_gather", "all_gather_into_tensor", "all_reduce", "reduce_scatter", "reduce_scatter_tensor",
               "broadcast", "all_to_all", "all_to_all_single", "gather", "scatter", "reduce", "barrier",
               "all_gather_object", "broadcast_object_list", "send", "recv", "isend", "irecv")


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _count_collectives(monkeypatch_calls):
    for name in COLLECTIVES:
        fn = getattr(dist, name, None)
        if fn is None:
            continue

        def wrapped(*a, _fn=fn, _name=name, **k):
            monkeypatch_calls.append(_name)
            return _fn(*a, **k)

        setattr(dist, name, wrapped)


def _worker(rank, world, port, cases, errors):  # noqa: C901
    try:
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
        pair = dist.new_group([0, 1])  # the 2-process cases run on ranks 0 and 1 of the same spawn
        calls = []
        _count_collectives(calls)
        for widths, case in cases:
            calls.clear()
            if len(widths) == 2 and rank < 2:
                _case(rank, widths, case, calls, pair)
            elif len(widths) == world:
                _case(rank, widths, case, calls, None)
    except BaseException:  # noqa: BLE001 - reported to the parent
        errors.put(f"rank {rank}: {traceback.format_exc()}")
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def _case(rank, widths, case, calls, group):
    V = sum(widths)
    gen = torch.Generator().manual_seed(1234)
    x = torch.randn(7, V, generator=gen, dtype=torch.float64) * 4
    t = torch.randint(0, V, (7,), generator=gen)
    t[2] = -100
    if case == "huge":
        t = torch.where(t == -100, t, t.clamp(min=2))  # the shard [0, 2) holds no target
        x[1] = 1e4
        x[3, ::2] = -1e4
    if case == "all_ignored":
        t[:] = -100
    kw = dict(label_smoothing=0.1, z_loss=1e-3, softcap=8.0) if case == "options" else {}
    start = sum(widths[:rank])
    if case == "mismatched":
        start += 1  # the shards no longer tile [0, V)
        try:
            osm.vocab_parallel_cross_entropy(x[:, :widths[rank]], t, start, V, group=group)
        except OnlineSoftmaxError as exc:
            assert "mismatched shards" in str(exc)
            assert calls == ["all_gather"], calls
            return
        raise AssertionError(f"{case}: mismatched shards not detected")
    shard = x[:, start:start + widths[rank]].clone().requires_grad_()
    loss = osm.vocab_parallel_cross_entropy(shard, t, start, V, group=group, **kw)
    assert calls == ["all_gather"], calls  # exactly one collective forward
    (loss * 2).backward()
    assert calls == ["all_gather"], calls  # none backward
    # against the float64 specification, not the package's own single-process path (which shares its row
    # formulas: a z-loss term scaled by 0.9 there passed)
    want_loss, want_grad = reference.cross_entropy(x, t, **kw)
    torch.testing.assert_close(loss, torch.tensor(float(want_loss), dtype=loss.dtype), equal_nan=True, rtol=1e-12,
                               atol=1e-12)
    torch.testing.assert_close(shard.grad, 2 * torch.from_numpy(want_grad)[:, start:start + widths[rank]],
                               rtol=1e-12, atol=1e-12)


# One spawn of 3 processes (starting one costs seconds here: torch's import), every case in it, in order; the
# 2-process cases run on a group of ranks 0 and 1.
CASES = [
    ((5, 12), "plain"),            # 2 ranks, uneven
    ((6, 6), "all_ignored"),       # every row ignored: NaN mean, zero gradient, as single-process
    ((6, 7), "mismatched"),        # shards that do not tile the vocabulary: the same error on every rank
    ((9, 0, 4), "options"),        # 3 ranks, one empty shard; label smoothing, z-loss, softcap
    ((2, 10, 5), "huge"),          # a narrow shard that holds no target; +-1e4 logits
]


def test_vocab_parallel_gloo():
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    ctx = mp.get_context("spawn")
    errors = ctx.SimpleQueue()
    mp.spawn(_worker, args=(3, _free_port(), CASES, errors), nprocs=3, join=True)
    found = []
    while not errors.empty():
        found.append(errors.get())
    assert not found, "\n".join(found)

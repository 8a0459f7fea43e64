"""Vocab-parallel cross-entropy on 2 GPUs with NCCL (torchrun --nproc_per_node 2): agreement with the single-GPU
loss and gradient, the collective count (every torch.distributed collective wrapped and counted), and time
against a Megatron-style baseline (three all-reduces: max, target logit, sum of exp).

    torchrun --nproc_per_node 2 benchmarks/vocab_parallel_nccl.py --out benchmarks/results/h200x2-vocab-parallel
    torchrun --nproc_per_node 2 benchmarks/vocab_parallel_nccl.py --cpu --out /tmp/vp    # gloo smoke run, small

Every rank runs the same number of iterations (fixed warmup and repetitions, timed with events), so the
collectives always pair up.
"""

import argparse
import json
import time

import torch
import torch.distributed as dist

import onlinesoftmax as osm

COLLECTIVES = ("all_gather", "all_gather_into_tensor", "all_reduce", "reduce_scatter_tensor", "broadcast",
               "all_to_all_single", "barrier")
CALLS = []
for _name in COLLECTIVES:
    _fn = getattr(dist, _name)
    setattr(dist, _name, lambda *a, _fn=_fn, _name=_name, **k: (CALLS.append(_name), _fn(*a, **k))[1])


class Megatron(torch.autograd.Function):
    """Megatron-LM's vocab_parallel_cross_entropy: all-reduce MAX, all-reduce SUM of the target logit,
    all-reduce SUM of exp; the softmax kept for the backward."""

    @staticmethod
    def forward(ctx, logits, target, start, group):
        x = logits.float()
        m = x.max(dim=-1)[0]
        dist.all_reduce(m, op=dist.ReduceOp.MAX, group=group)
        x = x - m.unsqueeze(-1)
        local = target - start
        hit = (local >= 0) & (local < x.shape[1])
        idx = torch.where(hit, local, 0)
        pred = torch.where(hit, x.gather(1, idx.unsqueeze(1)).squeeze(1), 0.0)
        dist.all_reduce(pred, group=group)
        e = x.exp_()
        s = e.sum(-1)
        dist.all_reduce(s, group=group)
        loss = torch.log(s) - pred
        e.div_(s.unsqueeze(-1))
        ctx.save_for_backward(e, hit, idx)
        ctx.dtype = logits.dtype
        return loss.mean()

    @staticmethod
    def backward(ctx, g):
        p, hit, idx = ctx.saved_tensors
        rows = hit.nonzero(as_tuple=True)[0]
        p[rows, idx[rows]] -= 1.0
        return (p * (g / p.shape[0])).to(ctx.dtype), None, None, None


def _time(fn, dev, warmup=3, reps=20):
    """The mean time of a fixed number of calls, the same number on every rank (the collectives pair up)."""
    for _ in range(warmup):
        fn()
    dist.barrier()
    if dev.type == "cuda":
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        start.record()
        for _ in range(reps):
            fn()
        end.record()
        torch.cuda.synchronize()
        return start.elapsed_time(end) / reps
    t0 = time.perf_counter()
    for _ in range(reps):
        fn()
    return (time.perf_counter() - t0) * 1e3 / reps


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--cpu", action="store_true", help="gloo on CPU tensors, small shapes: a smoke run")
    args = ap.parse_args()
    dist.init_process_group("gloo" if args.cpu else "nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    if args.cpu:
        dev = torch.device("cpu")
        out = {"world": world, "backend": "gloo", "torch": torch.__version__}
    else:
        torch.cuda.set_device(rank)
        dev = torch.device("cuda", rank)
        out = {"world": world, "backend": "nccl", "gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
               "nccl": ".".join(map(str, torch.cuda.nccl.version()))}
    # agreement: uneven shards, every option, against the single-GPU loss and gradient
    BT, V = (64, 1000) if args.cpu else (1024, 50257)
    even = V // world
    widths = [even - even // 4] + [even] * (world - 2)  # uneven: the first shard a quarter narrower
    widths.append(V - sum(widths))
    g = torch.Generator(device=dev).manual_seed(0)  # the same logits and targets on every rank
    x = torch.randn(BT, V, device=dev, generator=g) * 3
    t = torch.randint(0, V, (BT,), device=dev, generator=g)
    t[::7] = -100
    kw = dict(label_smoothing=0.1, z_loss=1e-4, softcap=30.0)
    start = sum(widths[:rank])
    shard = x[:, start:start + widths[rank]].clone().requires_grad_()
    CALLS.clear()
    loss = osm.vocab_parallel_cross_entropy(shard, t, start, V, **kw)
    fwd_calls = list(CALLS)
    loss.backward()
    bwd_calls = CALLS[len(fwd_calls):]
    full = x.clone().requires_grad_()
    want = osm.cross_entropy(full, t, **kw)
    want.backward()
    ref = x.double().requires_grad_()
    ref_loss = osm.cross_entropy(ref, t, **kw)
    ref_loss.backward()
    mine = slice(start, start + widths[rank])
    out["agreement"] = dict(
        BT=BT, V=V, widths=widths, forward_collectives=fwd_calls, backward_collectives=bwd_calls,
        loss=float(loss.detach()), single_gpu_loss=float(want.detach()), float64_loss=float(ref_loss.detach()),
        loss_diff_vs_single=abs(float(loss.detach()) - float(want.detach())),
        grad_max_diff_vs_single=float((shard.grad - full.grad[:, mine]).abs().max()),
        grad_max_diff_vs_float64=float((shard.grad.double() - ref.grad[:, mine]).abs().max()))
    assert fwd_calls == ["all_gather"] and bwd_calls == [], (fwd_calls, bwd_calls)
    # time: BT 8192, V 128256 bf16 split over the GPUs (the same targets on every rank)
    BT, V = (256, 4096) if args.cpu else (8192, 128256)
    Vr = V // world
    dtype = torch.float32 if args.cpu else torch.bfloat16
    g = torch.Generator(device=dev).manual_seed(1)
    t = torch.randint(0, V, (BT,), device=dev, generator=g)
    xs = (torch.randn(BT, Vr, device=dev, dtype=dtype) * 2).requires_grad_()

    def ours():
        xs.grad = None
        osm.vocab_parallel_cross_entropy(xs, t, rank * Vr, V).backward()

    def megatron():
        xs.grad = None
        Megatron.apply(xs, t, rank * Vr, None).backward()

    CALLS.clear()
    megatron()
    mega_calls = list(CALLS)
    times = {}
    for name, fn in (("onlinesoftmax (1 all_gather)", ours), ("megatron-style (3 all_reduce)", megatron)):
        times[name] = _time(fn, dev)
    out["timing"] = dict(BT=BT, V=V, dtype=str(dtype)[6:], shard=Vr, ms=times, megatron_collectives=mega_calls)
    if rank == 0:
        print(json.dumps(out, indent=1))
        with open(args.out + ".json", "w") as f:
            json.dump(out, f, indent=1)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

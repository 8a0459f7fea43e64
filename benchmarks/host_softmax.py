"""Where the host's time of an eager softmax call goes (issue 12: eager overhead at or below torch's), on the GPU.

    PYTHONPATH=src python benchmarks/host_softmax.py [--m 1] [--n 1024] [--dtype float32] [--backend triton]
    PYTHONPATH=src python benchmarks/host_softmax.py --backend triton --stub-driver     (no GPU needed)
    python -m onlinesoftmax build-native           (then the same calls take runtime/native.cpp's hot path: the
                                                    lookup, allocation and launch in one C++ call;
                                                    ONLINESOFTMAX_NATIVE=0 turns it off)

One process, one M x N input (1 x 1024 by default; a long row or few rows take a cluster launch, e.g. 7 x 32768):
the mean wall time per call of each piece, calls back to back, one synchronize at the end, the median of 5 runs of
2000 (harness/extras.py wall_us, as `onlinesoftmax extras` times the whole call), torch.softmax in the same run. The
pieces nest: the public call = its checks + the native helper's call (where built) or the engine's forward with a
fresh output; the engine's forward = its key and lookup + the prepared launch; the launch = the stream handle + the
parameter block + cuLaunchKernel. A piece that launches a kernel runs as fast as the GPU takes the launches when the
host outpaces it (the kernel's queued time is printed beside them).

--backend triton: the Triton backend's pieces instead (its few-row sweep cells ran 50-120 µs a call where the kernel
queued in 6-20 µs, h200-session53/triton/sweep.csv): the public call, the op without its checks, the launcher
(its checks, the plan, Triton's launch), the plan alone, Triton's launch alone (JITFunction.run: the arguments'
specialisation, the cache lookup, the launch), and Liger-Kernel's softmax, a Triton launch of fewer arguments,
where it imports. With --stub-driver, on any machine: Triton's driver stubbed (tests/fakes.py stub_triton_driver:
kernels compile for sm_90, nothing launches), CPU tensors, so only the host's Python of those pieces is timed (torch's
CPU ops cost what they cost on CPU tensors; relative numbers only)."""

from __future__ import annotations

import argparse
import os
import pathlib
import sys

import torch

import onlinesoftmax as osm
from onlinesoftmax.engines.cuda import run as E
from onlinesoftmax.harness import results
from onlinesoftmax.harness.bench import queued_ms
from onlinesoftmax.harness.extras import wall_us
from onlinesoftmax.registry import get
from onlinesoftmax.runtime import launch, native


def _raw_launch(p):
    """The driver's call alone for the prepared launch p as its last call left it (its C values: grid, stream,
    parameter block)."""
    if p._args is None:
        raise SystemExit("libcuda is not reached through ctypes here: nothing to time alone")
    return lambda: p._launch(*p._args)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--m", type=int, default=1)
    ap.add_argument("--n", type=int, default=1024)
    ap.add_argument("--dtype", default="float32", choices=("float32", "bfloat16", "float16"))
    ap.add_argument("--backend", default="cuda", choices=("cuda", "triton"))
    ap.add_argument("--stub-driver", action="store_true", help="--backend triton without a GPU: the host's Python alone")
    args = ap.parse_args()
    dtype = getattr(torch, args.dtype)
    if args.stub_driver:
        return _report(*stubbed_triton_pieces(args.m, args.n, dtype), "triton", args)
    x = torch.randn(args.m, args.n, device="cuda").to(dtype)
    out = torch.empty_like(x)
    if args.backend == "triton":
        return _report(triton_pieces(x, out), x, "triton", args)
    osm.softmax(x)
    E.forward(x, out, 1, False)
    torch.testing.assert_close(out, torch.softmax(x, -1))
    pa, po, dev = x.data_ptr(), out.data_ptr(), x.device.index
    # the exact-shape call the calls above made (a benchmark may look inside): its prepared launch and grid
    shaped = E._fwd_shapes.get((False, x.shape, x.dtype, dev, pa & 15, po & 15))
    single, grid = shaped.launch, shaped.grid
    if single is None:
        raise SystemExit(f"{args.m} x {args.n} takes the split regime's two launches, not one: pick another shape")
    contig = torch.contiguous_format
    single.rows(grid, args.m, pa, 0, po)
    raw = _raw_launch(single)
    mod = native.module()
    pieces = {
        "torch.softmax(x, -1)": lambda t: torch.softmax(t, -1),
        "osm.softmax(x)": lambda t: osm.softmax(t),
        "osm.softmax(x, backend='cuda')": lambda t: osm.softmax(t, backend="cuda"),
        "osm.log_softmax(x)": lambda t: osm.log_softmax(t),
        **({"  the native helper's call (C++: lookup, empty_like, cuLaunchKernel)":
            lambda t: mod.forward(t, -1, False, 0)} if mod is not None else {}),
        "  torch.empty_like(x, contiguous)": lambda t: torch.empty_like(t, memory_format=contig),
        "  engine forward(x, out): key, lookup, launch": lambda t: E.forward(t, out, 1, False),
        "    the prepared launch (pointers, block, the driver's launch)": lambda t: single.rows(grid, args.m, pa, 0, po),
        "      stream handle": lambda t: launch.stream_handle(dev),
        "      cuLaunchKernel(Ex) alone (ctypes, C values)": lambda t: raw(),
        "  out.zero_() (torch: its dispatch and launch, no allocation)": lambda t: out.zero_(),
        "      torch._C._cuda_getDevice()": lambda t: torch._C._cuda_getDevice(),
        "  torch.compiler.is_compiling()": lambda t: torch.compiler.is_compiling(),
        "  x.requires_grad and torch.is_grad_enabled()": lambda t: t.requires_grad and torch.is_grad_enabled(),
        "  x.device": lambda t: t.device,
    }
    return _report(pieces, x, "cuda", args, f"; the native helper {'on' if shaped.key is not None else 'off'}")


def stubbed_triton_pieces(M: int, N: int, dtype) -> tuple:
    """triton_pieces on a CPU tensor with Triton's driver stubbed (nothing runs, so nothing is checked), and the
    tensor."""
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "tests"))
    import fakes

    fakes.stub_triton_driver()
    from onlinesoftmax.engines.triton import softmax as K

    # occupancy is learnt from a CUDA device's properties: here a configuration counts as learnt once launched
    K._learn_occupancy = lambda key, compiled, warps, device: key is not None and K.OCCUPANCY.setdefault(key, 1)
    x = torch.randn(M, N).to(dtype)
    pieces = triton_pieces(x, torch.empty_like(x), check=False)
    os.environ["TRITON_INTERPRET"] = "1"  # the public op's check for CPU tensors (the kernels stay compiled)
    del pieces["torch.softmax(x, -1)"]  # torch's CPU kernel: no measure of its host time
    return pieces, x


def triton_pieces(x, out, check: bool = True) -> dict:
    """The Triton backend's call, piece by piece (the module docstring)."""
    from onlinesoftmax.engines.triton import softmax as K
    from onlinesoftmax.ops import softmax as ops

    M, N = x.shape
    sms = K.sm_count(x.device)
    regime = K.pick_regime(M, N, x.dtype, False, sms)

    def plan(t):
        return K.plan(False, False, regime, M, N, t.dtype, sms, (t, out), (N, N),
                      lambda n, dt, zero: (torch.zeros if zero else torch.empty)(n, dtype=dt, device=t.device))

    K.softmax_forward(x, out)
    if check:
        torch.testing.assert_close(out, torch.softmax(x, -1))
    p = plan(x)
    if p.tail is not None or regime == "split":
        print(f"# {regime}: the plan's launch alone is not the call's whole launch (a tail, or the split regime's "
              "zeroed counters)")
    mod, helper = native.module(), {}
    if mod is not None:  # a shape's third call goes through C++ where the engine can hand it its ready launch (timed
        for _ in range(3):  # before the piece below that forgets the ready launches, and their entries with them)
            osm.softmax(x, backend="triton")
        put = mod.forward(x, -1, False, 1) is not None
        helper = {"  the native helper's call, backend 1 (C++: lookup, empty_like, cuLaunchKernel)"
                  + ("" if put else ": not in the table, a lookup only"): lambda t: mod.forward(t, -1, False, 1)}
    pieces = {
        "torch.softmax(x, -1)": lambda t: torch.softmax(t, -1),
        "osm.softmax(x, backend='triton')": lambda t: osm.softmax(t, backend="triton"),
        **helper,
        "  ops.forward(x, -1, False, 'triton'): the op without the public checks": lambda t: ops.forward(
            t, 1, False, "triton"),
        "    torch.empty_like(x, contiguous)": lambda t: torch.empty_like(t, memory_format=torch.contiguous_format),
        "    launcher softmax_forward(x, out): checks, then a shape planned twice before: the ready launch":
            lambda t: K.softmax_forward(t, out),
        "    launcher, a shape not seen before: checks, plan, Triton's launch": lambda t: _unready(K, t, out),
        f"      plan ({regime})": plan,
        "      Triton's launch alone (kernel[grid](...))": lambda t: p.kernel[p.grid](*p.args, **p.meta),
    }
    liger = get("liger.softmax")  # the sweep's call of it
    if liger.available() is None:
        pieces["Liger-Kernel's softmax forward"] = lambda t: liger.call((t,))
    return pieces


def _unready(K, t, out) -> None:
    """The launcher as a shape's first call runs it: the shapes seen and made ready forgotten first."""
    K._READY.clear()
    K._SEEN.clear()
    K.softmax_forward(t, out)


def _report(pieces: dict, x, backend: str, args, note: str = "") -> int:
    if args.stub_driver:
        import platform
        import triton

        print(f"# no GPU: Triton's driver stubbed (sm_90), CPU tensors, {platform.processor() or platform.machine()}, "
              f"{os.cpu_count()} CPUs; torch {torch.__version__}, triton {triton.__version__}; {args.dtype} {args.m} x "
              f"{args.n}, backend {backend}; µs per call (wall, calls back to back; median of 5 x 2000)", flush=True)
    else:
        env = results.environment("cuda")
        print(f"# {env['device']}, torch {torch.__version__}, {args.dtype} {args.m} x {args.n}, backend {backend}; µs "
              f"per call (wall, calls back to back; median of 5 x 2000){note}", flush=True)
        kern = 1e3 * queued_ms([lambda: torch.softmax(x, -1)])
        ours_kern = 1e3 * queued_ms([lambda: osm.softmax(x, backend=backend)])
        print(f"  kernel, queued: torch {kern:.2f} µs, ours {ours_kern:.2f} µs")
    for label, fn in pieces.items():
        print(f"{wall_us(fn, x):8.2f}  {label}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

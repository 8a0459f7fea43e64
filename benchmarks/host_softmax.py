"""Where the host's time of an eager softmax call goes (issue 12: eager overhead at or below torch's), on the GPU.

    PYTHONPATH=src python benchmarks/host_softmax.py [--n 1024] [--dtype float32]

One process, one 1 x N input: the mean wall time per call of each piece, calls back to back, one synchronize at
the end, the median of 5 runs of 2000 (harness/extras.py wall_us, as `onlinesoftmax extras` times the whole call),
torch.softmax in the same run. The pieces nest: the public call = its checks + the engine's forward with a fresh
output; the engine's forward = its key and lookup + the prepared launch; the launch = the stream handle + the
parameter block + cuLaunchKernel. A piece that launches a kernel runs as fast as the GPU takes the launches when the
host outpaces it (the kernel's queued time is printed beside them)."""

from __future__ import annotations

import argparse
import sys

import torch

import onlinesoftmax as osm
from onlinesoftmax.engines.cuda import run as E
from onlinesoftmax.harness import results
from onlinesoftmax.harness.bench import queued_ms
from onlinesoftmax.harness.extras import wall_us
from onlinesoftmax.runtime import launch


def _raw_launch(p):
    """libcuda's cuLaunchKernel and its arguments (C values) for the prepared launch p's kernel, block and
    pointers: the driver's call alone."""
    import ctypes

    f = launch._libcuda()["cuLaunchKernel"]
    f.restype = ctypes.c_int
    args = ((ctypes.c_void_p(int(p.lk.kernel.handle)),) + tuple(ctypes.c_uint(d) for d in p.dims[1:])
            + (ctypes.c_void_p(launch.stream_handle(p.device)), ctypes.c_void_p(p._addr), None))
    return lambda: f(*args)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=1024)
    ap.add_argument("--dtype", default="float32", choices=("float32", "bfloat16", "float16"))
    args = ap.parse_args()
    dtype = getattr(torch, args.dtype)
    x = torch.randn(1, args.n, device="cuda").to(dtype)
    out = torch.empty_like(x)
    osm.softmax(x)
    E.forward(x, out, 1, False)
    torch.testing.assert_close(out, torch.softmax(x, -1))
    entry = next(reversed(E._fwd_rows._d.values()))  # the entry the calls above made (a benchmark may look inside)
    single = entry.single
    pa, po, dev = x.data_ptr(), out.data_ptr(), x.device.index
    contig = torch.contiguous_format
    raw = _raw_launch(single)
    pieces = {
        "torch.softmax(x, -1)": lambda t: torch.softmax(t, -1),
        "osm.softmax(x)": lambda t: osm.softmax(t),
        "osm.softmax(x, backend='cuda')": lambda t: osm.softmax(t, backend="cuda"),
        "osm.log_softmax(x)": lambda t: osm.log_softmax(t),
        "  torch.empty_like(x, contiguous)": lambda t: torch.empty_like(t, memory_format=contig),
        "  engine forward(x, out): key, lookup, launch": lambda t: E.forward(t, out, 1, False),
        "    the prepared launch (pointers, block, cuLaunchKernel)": lambda t: single(pa, 0, po),
        "      stream handle": lambda t: launch.stream_handle(dev),
        "      cuLaunchKernel alone (ctypes, C values)": lambda t: raw(),
        "  out.zero_() (torch: its dispatch and launch, no allocation)": lambda t: out.zero_(),
        "      torch._C._cuda_getDevice()": lambda t: torch._C._cuda_getDevice(),
        "  torch.compiler.is_compiling()": lambda t: torch.compiler.is_compiling(),
        "  x.requires_grad and torch.is_grad_enabled()": lambda t: t.requires_grad and torch.is_grad_enabled(),
        "  x.device": lambda t: t.device,
    }
    env = results.environment("cuda")
    print(f"# {env['device']}, torch {torch.__version__}, {args.dtype} 1 x {args.n}; µs per call (wall, calls back to "
          "back; median of 5 x 2000)", flush=True)
    kern = 1e3 * queued_ms([lambda: torch.softmax(x, -1)])
    ours_kern = 1e3 * queued_ms([lambda: osm.softmax(x)])
    print(f"  kernel, queued: torch {kern:.2f} µs, ours {ours_kern:.2f} µs")
    for label, fn in pieces.items():
        print(f"{wall_us(fn, x):8.2f}  {label}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

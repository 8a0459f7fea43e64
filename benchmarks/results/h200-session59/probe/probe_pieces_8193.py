"""Session 59's last probe: 16382 x 8193 through the windows (the rules: one tile of 16384 lanes) against two tiles
(8192 + 1, no windows: ROWS_WINDOW_MIN_N raised past N), softmax and its backward, fp32 and bf16, do_bench medians
(L2 flushed) beside a 1 GiB copy. Run from the repository root: python3 <this file>."""
import sys

import torch
from triton.testing import do_bench

sys.path.insert(0, "src")
from onlinesoftmax.engines.triton import softmax as T, softmax_rules as R  # noqa: E402

a = torch.empty(1 << 28, device="cuda")
b = torch.empty_like(a)
copy = 2 * a.numel() * 4 / do_bench(lambda: b.copy_(a)) / 1e6
print(f"# {torch.cuda.get_device_name()} copy {copy:.0f} GB/s", flush=True)
M, N = 16382, 8193
for dt in (torch.float32, torch.bfloat16):
    x = torch.randn(M, N, device="cuda", dtype=dt)
    y = torch.softmax(x.float(), -1).to(dt)
    dy = torch.randn_like(x)
    ref_f = torch.softmax(x.double(), -1)
    ref_b = y.double() * (dy.double() - (dy.double() * y.double()).sum(-1, keepdim=True))
    for name, knob in (("windows (rules)", 8192), ("two tiles", 16385)):
        R.ROWS_WINDOW_MIN_N = knob
        out = torch.full_like(x, float("nan"))
        dx = torch.full_like(x, float("nan"))
        tf = do_bench(lambda: T.softmax_forward(x, out, regime="rows"))
        tb = do_bench(lambda: T.softmax_backward(y, dy, dx, regime="rows"))
        ef = (out.double() - ref_f).abs().max().item()
        eb = (dx.double() - ref_b).abs().max().item()
        pf = 2 * M * N * dt.itemsize / tf / 1e6 / copy * 100
        pb = 3 * M * N * dt.itemsize / tb / 1e6 / copy * 100
        print(f"{str(dt)[6:]:8s} {name:16s} forward {pf:5.1f}% (err {ef:.1e})  backward {pb:5.1f}% (err {eb:.1e})",
              flush=True)

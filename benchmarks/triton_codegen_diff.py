"""Does a change to the Triton backend change the code it runs on an H200? Answered without a GPU.

    python benchmarks/triton_codegen_diff.py --base REV [--out DIR]  # REV's src/ against the working tree's
    PYTHONPATH=src python benchmarks/triton_codegen_diff.py dump OUT  # one tree (what --base runs twice)
    PYTHONPATH=src python benchmarks/triton_codegen_diff.py dump OUT --launch triton.softmax_rows.float32.4096x32768
    PYTHONPATH=src python benchmarks/triton_codegen_diff.py dump OUT --launch triton.softmax_cols.bfloat16.8x150x65536
    python benchmarks/triton_codegen_diff.py compare OUT_A OUT_B

`dump` drives every launch the launchers can make: it runs every Triton variant of the registry
(the engine's, one per op and regime, each forcing its regime, then the public ops', which pick
the regime) in each of its dtypes wherever it accepts the shape, on meta tensors over a grid of
shapes in two families: powers of two, and 2^k + 1 (so N, the strides and the row counts are not
multiples of 16). Triton is told the
device is an sm_90 H200 and compiles each launch as `kernel[grid](...)` would (its own
specialisation of the arguments), but does not run it; a pipelined kernel whose shared memory
passes the H200's 227 KB per block raises OutOfResources as the real launch would, so the
launcher's one-stage retry is compiled too. Every distinct configuration (kernel, compile-time
arguments, options, argument types) is compiled once per family, at the first shape of the grid
that asks for it, and named by that shape. It keeps the PTX normalised (the kernel's name,
comments and line information removed) and the cubin's registers, stack frame and local memory
(cuobjdump; spills live in the stack frame), and the SASS instructions of each of its loops (what an iteration
issues: a chunk loop's for a thread's elements).

`compare` counts the configurations whose normalised PTX is identical, lists the others with
registers / local memory / stack / shared memory before and after, the configurations only one tree has,
and the shapes whose launch moved to another configuration. It exits 1 if anything differs.

A dump of the whole grid compiles ~3,400 kernels (tens of minutes on two cores; Triton's disk
cache, TRITON_CACHE_DIR, makes a second dump of the same source quick); --quick keeps a few shapes,
--launch names the launches to compile instead (tests/test_triton_interpreter.py checks the spills
of each regime's largest configurations that way).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import pathlib
import re
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parents[1]
H200_SHARED_PER_BLOCK = 232448  # cudaDevAttrMaxSharedMemoryPerBlockOptin on sm_90


def grid(quick: bool):
    """(family, variant name, dtype name, M, N) in the order configurations are first met (and so
    named): every Triton variant of the registry and each of its dtypes, for each shape."""
    from onlinesoftmax.registry import variants

    top_m, top_n = (6, 16) if quick else (15, 23)
    for family, extra in (("pow2", 0), ("odd", 1)):
        for m in range(top_m):
            for n in range(top_n):
                M, N = (1 << m) + extra, (1 << n) + extra
                if M * N <= 1 << 30:
                    for v in variants(backend="triton"):
                        for dtype in v.dtypes:
                            yield family, v.name, str(dtype).replace("torch.", ""), (M, N)


def given(names):
    """The launches named VARIANT.DTYPE.MxN (as `dump` names configurations), or triton.OP_cols.DTYPE.OxNxI: the
    columns kernel over dim 1 of a contiguous (O, N, I) tensor (no registry variant: the public ops' non-last
    dims)."""
    for name in names:
        variant, dtype, shape = name.rsplit(".", 2)
        yield "given", variant, dtype, tuple(map(int, shape.split("x")))


def normalise(ptx: str, name: str) -> str:
    """The PTX without what says nothing about the code: debug sections, line directives, their
    labels, comments, and the kernel's name."""
    ptx = ptx[: ptx.index("\t.file")] if "\t.file" in ptx else ptx
    lines = []
    for line in ptx.splitlines():
        code = re.sub(r"\s*//.*", "", line)
        if code.strip().startswith(".loc") or re.fullmatch(r"\$L__(tmp|func_begin|func_end)\d+:", code.strip()):
            continue
        lines.append(code.replace(name, "KERNEL"))
    return "\n".join(lines) + "\n"


def resources(cubin: bytes) -> dict:
    """Registers, stack frame, local memory and loops (loops) of a cubin, from one run of Triton's own cuobjdump
    (each run costs ~0.5 s; a whole grid is thousands of configurations)."""
    import triton

    tool = pathlib.Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        text = subprocess.run([str(tool), "--dump-resource-usage", "-sass", f.name], capture_output=True, text=True,
                              check=True).stdout
    usage = re.search(r"REG:(\d+) STACK:(\d+) SHARED:\d+ LOCAL:(\d+)", text)
    return {"registers": int(usage.group(1)), "stack": int(usage.group(2)), "local": int(usage.group(3)),
            "loops": loops(text)}


def loops(sass: str) -> list:
    """The SASS instructions of each loop, from its top to the branch back to it (16 bytes an instruction on sm_90),
    in the order of those branches: what one iteration issues (a chunk loop's body for a thread's elements), read
    without a GPU."""
    branches = re.findall(r"/\*([0-9a-f]+)\*/\s+(?:@!?U?P\w+\s+)?BRA(?:\.\w+)*\s+0x([0-9a-f]+)", sass)
    return [(at - to) // 16 + 1 for at, to in ((int(a, 16), int(b, 16)) for a, b in branches) if to < at]


def dump(out: pathlib.Path, launches_to_drive) -> None:
    """Run in a process whose PYTHONPATH holds the source tree to dump (see main)."""
    import torch
    from triton.backends.compiler import GPUTarget
    from triton.runtime import OutOfResources
    from triton.runtime.driver import driver
    from triton.runtime.jit import JITFunction

    class H200:
        """What Triton asks the active driver while it compiles a launch."""

        def get_current_device(self):
            return 0

        def get_current_stream(self, device):
            return 0

        def get_current_target(self):
            return GPUTarget("cuda", 90, 32)

    driver.set_active(H200())
    from onlinesoftmax.opdefs import OPS
    from onlinesoftmax.registry import get
    from onlinesoftmax.engines.triton import variants as tv

    print(f"dumping {tv.kernels().__file__}", file=sys.stderr)
    (out / "ptx").mkdir(parents=True, exist_ok=True)
    configs, launches, too_big = {}, {}, {}
    named = {}  # (family, kernel, meta, argument types) -> config name
    where = {}  # the launch being driven: its name

    def argtype(a):
        return str(a.dtype) if hasattr(a, "dtype") else type(a).__name__

    def compile_only(self, *args, grid, warmup, **kwargs):
        ident = (where["family"], self.__name__, tuple(sorted(kwargs.items())), tuple(map(argtype, args)))
        if ident not in named:
            # a call's second launch (a rows tail) is NAME#2; a one-stage retry of a launch that did not fit
            # replaces it under its name
            nth = sum(configs[n]["fits"] for n in launches.get(where["name"], []))
            name = where["name"] + (f"#{nth + 1}" if nth else "")
            compiled = real_run(self, *args, grid=grid, warmup=True, **kwargs)
            text = normalise(compiled.asm["ptx"], self.__name__)
            (out / "ptx" / f"{name}.ptx").write_text(text)
            too_big[ident] = compiled.metadata.shared > H200_SHARED_PER_BLOCK
            named[ident] = name
            configs[name] = {"kernel": self.__name__, "meta": {k: repr(v) for k, v in kwargs.items()},
                             "sha": hashlib.sha256(text.encode()).hexdigest(), "shared": compiled.metadata.shared,
                             "fits": not too_big[ident], **resources(compiled.asm["cubin"])}
            print(f"{len(configs):5d} {name} {configs[name]}", file=sys.stderr, flush=True)
        launches.setdefault(where["name"], []).append(named[ident])
        if too_big[ident]:
            raise OutOfResources(configs[named[ident]]["shared"], H200_SHARED_PER_BLOCK, "shared memory")
        return None  # nothing to learn occupancy from: the tensors are on the meta device

    real_run = JITFunction.run
    JITFunction.run = compile_only
    for family, name, dtype_name, shape in launches_to_drive:
        dtype = getattr(torch, dtype_name)
        where.update(family=family, name=f"{name}.{dtype_name}.{'x'.join(map(str, shape))}")
        if name.endswith("_cols"):
            op = OPS[name.split(".", 1)[1][: -len("_cols")]]
            ins = tuple(torch.empty(shape, dtype=dtype, device="meta") for _ in op.inputs)
            if not tv.kernels().softmax_columns(ins, torch.empty(shape, dtype=dtype, device="meta"), op.backward, op.log):
                raise SystemExit(f"the columns kernel refuses {name} {dtype_name} {shape}")
            continue
        (M, N), variant = shape, get(name)
        if dtype not in variant.dtypes or variant.supports(M, N, dtype):
            if family == "given":
                raise SystemExit(f"the registry refuses {name} {dtype_name} ({M}, {N})")
            continue
        inputs = tuple(torch.empty(M, N, dtype=dtype, device="meta") for _ in OPS[variant.op].inputs)
        variant.run(inputs, torch.empty(M, N, dtype=dtype, device="meta"))
    (out / "index.json").write_text(json.dumps({"configs": configs, "launches": launches}, indent=1))
    print(f"{len(configs)} configurations, {len(launches)} launches", file=sys.stderr)


def compare(a: pathlib.Path, b: pathlib.Path) -> int:
    ia, ib = (json.loads((d / "index.json").read_text()) for d in (a, b))
    ca, cb = ia["configs"], ib["configs"]
    both = sorted(set(ca) & set(cb))
    same = [n for n in both if ca[n]["sha"] == cb[n]["sha"]]
    print(f"{len(same)} of {len(both)} configurations compile to identical PTX (normalised)")
    for n in (n for n in both if ca[n]["sha"] != cb[n]["sha"]):
        res = " ".join(f"{k} {ca[n][k]}->{cb[n][k]}" for k in ("registers", "local", "stack", "shared"))
        if ca[n].get("loops") != cb[n].get("loops"):  # dumps before the loops were recorded have none
            res += f" loop instructions {ca[n].get('loops')}->{cb[n].get('loops')}"
        print(f"  differs: {n} {ca[n]['meta']}: {res}")
    for label, names in (("only in A", set(ca) - set(cb)), ("only in B", set(cb) - set(ca))):
        for n in sorted(names):
            print(f"  {label}: {n}")
    moved = [s for s in sorted(set(ia["launches"]) | set(ib["launches"]))
             if ia["launches"].get(s) != ib["launches"].get(s)]
    print(f"{len(moved)} of {len(ia['launches'])} launches changed configuration")
    for s in moved[:20]:
        print(f"  {s}: {ia['launches'].get(s)} -> {ib['launches'].get(s)}")
    spilling = sum(c["stack"] > 0 or c["local"] > 0 for c in cb.values())
    print(f"B: {len(cb)} configurations, {spilling} with a stack frame or local memory (spills), "
          f"{sum(not c['fits'] for c in cb.values())} over 227 KB of shared memory (retried with one stage)")
    return 0 if len(same) == len(both) == len(ca) == len(cb) and not moved else 1


def dump_tree(src: pathlib.Path, out: pathlib.Path, quick: bool) -> None:
    """dump in a process of its own, importing onlinesoftmax from `src`."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = str(src)
    subprocess.run([sys.executable, __file__, "dump", str(out)] + (["--quick"] if quick else []), env=env, check=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--base", help="git revision whose src/ to compare with the working tree's")
    ap.add_argument("--out", help="with --base: keep both dumps here (DIR/base, DIR/head)")
    ap.add_argument("--quick", action="store_true", help="a few shapes only")
    ap.add_argument("--launch", nargs="+", metavar="VARIANT.DTYPE.MxN", help="dump: these launches, not the grid")
    ap.add_argument("command", nargs="*", help="dump OUT | compare A B")
    args = ap.parse_args()
    if args.command[:1] == ["dump"] and len(args.command) == 2 and not args.base:
        if os.environ.get("TRITON_INTERPRET") == "1":
            ap.error("dump compiles the kernels: unset TRITON_INTERPRET")
        dump(pathlib.Path(args.command[1]), given(args.launch) if args.launch else grid(args.quick))
        return 0
    if args.command[:1] == ["compare"] and len(args.command) == 3 and not args.base:
        return compare(pathlib.Path(args.command[1]), pathlib.Path(args.command[2]))
    if args.base and not args.command:
        with tempfile.TemporaryDirectory() as tmp:
            out = pathlib.Path(args.out or tmp)
            archive = subprocess.run(["git", "-C", str(ROOT), "archive", args.base, "src"], capture_output=True,
                                     check=True).stdout
            subprocess.run(["tar", "-x", "-C", tmp], input=archive, check=True)
            dump_tree(pathlib.Path(tmp) / "src", out / "base", args.quick)
            dump_tree(ROOT / "src", out / "head", args.quick)
            return compare(out / "base", out / "head")
    ap.error("give --base REV, dump OUT or compare A B")
    return 2


if __name__ == "__main__":
    sys.exit(main())

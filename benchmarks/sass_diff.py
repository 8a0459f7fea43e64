"""Compare the SASS of every production kernel instantiation between two source trees, without a GPU.

    PYTHONPATH=src python benchmarks/sass_diff.py --base be1e6c1 [--head REV_OR_DIR] [--arch sm_90] [--only REGEX]

A tree is a git revision of this repository (its src/onlinesoftmax/kernels/cuda/*.cu, *.cuh) or a directory (a
checkout, or the kernel folder itself); --head defaults to the working tree of the current checkout. The kernels
are instantiations() of the importable package (every name expression the plans can pick), or those
matching --only. Each tree's sources are expanded exactly as the runtime expands them (nvrtc.expand_source, from a
temporary package) and compiled with the runtime's options by NVRTC, --batch kernels per call; each cubin is read
with cuobjdump. Per kernel the comparison covers:
  - the SASS: every instruction with both 64-bit words of its encoding (operands and scheduling control bits);
    only the address comments are dropped, and relocated symbol names would read SYM;
  - the kernel's ELF attributes (cuobjdump -elf .nv.info.<kernel>: launch bounds, parameter layout, barriers,
    exit offsets...; the symbol index of EIATTR_PARAM_CBANK, which depends on the batch, is dropped) and the sizes
    of its .text and .nv.constant0 sections (not .nv.shared's: it includes 1 KB of reserved shared memory or not,
    depending on the other kernels of the batch);
  - the ptxas report (registers, static shared memory, stack, spill stores and loads, barriers, cmem); the static
    shared memory in 16-byte granules: ptxas pads every kernel's to 16 bytes when another kernel of the batch
    declares 16-byte-aligned dynamic shared memory (bwd_row<2,0,1,128,16,0,16,0>: 40 bytes alone, 48 beside a
    flat kernel), so the bytes themselves depend on the batch (a change within one granule, 40 -> 48 bytes, is
    therefore not reported);
and, for each tree as a whole, the module's data objects (a namespace-scope constexpr variable, for one, becomes
a .global variable of every module NVRTC builds).
Line tables are not compared: moving code between files changes them and nothing else.
--counts: for each different kernel one line instead of the diff: its instructions (static: a loop's body once),
base -> head, registers, and the opcodes whose counts moved (what a change costs or saves, read without a GPU).

Results are cached per (expanded source, options, arch, NVRTC version, kernel) under the runtime's cache folder
(sass_diff/), so a second run over an unchanged tree only reads JSON: a kernel's SASS does not depend on the other
kernels of its NVRTC batch (what does is left out above). Exit status: 0 when every kernel is identical, the
module data are the same and the head has no spills and no stack; 1 otherwise.
"""

from __future__ import annotations

import argparse
import collections
import concurrent.futures as cf
import difflib
import hashlib
import json
import multiprocessing as mp
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from onlinesoftmax.engines.cuda.plan import FILE, instantiations
from onlinesoftmax.runtime import DEFAULT_ARCH, nvrtc

PACKAGE_DIR = "src/onlinesoftmax"
SCHEMA = 3
RESOURCES = ("registers", "smem", "stack", "spill_stores", "spill_loads", "barriers", "cmem")


# ---- trees ---------------------------------------------------------------------------------------------------------


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout


def tree_files(spec: str, repo: Path) -> tuple[dict[str, str], str]:
    """({path under src/onlinesoftmax: text} of every CUDA source of a directory (a checkout) or a git revision, the
    folder holding the production FILE). Every .cu/.cuh of the package comes along, so includes across folders
    resolve as in the package; the production folder is found by name, in any layout the history has had."""
    path = Path(spec)
    if path.is_dir():
        top = path / PACKAGE_DIR
        files = {p.relative_to(top).as_posix(): p.read_text(encoding="utf-8") for p in sorted(top.rglob("*"))
                 if p.suffix in (".cu", ".cuh")}
    else:
        names = git(repo, "ls-tree", "-r", "--name-only", spec, PACKAGE_DIR).split()
        files = {n[len(PACKAGE_DIR) + 1:]: git(repo, "show", f"{spec}:{n}") for n in names
                 if n.endswith((".cu", ".cuh"))}
    homes = [f.rpartition("/")[0] for f in files if f.rpartition("/")[2] == FILE]
    if len(homes) != 1:
        raise SystemExit(f"{spec}: expected one {FILE} under {PACKAGE_DIR}, found {len(homes)}")
    return files, homes[0]


def as_package(files: dict[str, str], home: str, root: Path) -> str:
    """Write the sources as a package under root (on sys.path) so nvrtc reads them as it reads the installed ones;
    returns the package argument for nvrtc ("<pkg>/<folder of FILE>")."""
    digest = hashlib.sha256(json.dumps(files, sort_keys=True).encode()).hexdigest()[:16]
    pkg = f"_sass_diff_{digest}"
    (root / pkg).mkdir(parents=True, exist_ok=True)
    (root / pkg / "__init__.py").write_text("")
    for name, text in files.items():
        (root / pkg / name).parent.mkdir(parents=True, exist_ok=True)
        (root / pkg / name).write_text(text, encoding="utf-8")
    return f"{pkg}/{home}"


# ---- compile and disassemble ---------------------------------------------------------------------------------------


def cuobjdump() -> str:
    """cuobjdump from PATH, CUDA_HOME, /usr/local/cuda*, or the copy Triton ships."""
    found = shutil.which("cuobjdump")
    if found:
        return found
    candidates = [Path(os.environ.get("CUDA_HOME", "/usr/local/cuda")) / "bin" / "cuobjdump"]
    candidates += sorted(Path("/usr/local").glob("cuda*/bin/cuobjdump"))
    try:
        import triton

        candidates.append(Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump")
    except ImportError:
        pass
    for c in candidates:
        if c.is_file() and os.access(c, os.X_OK):
            return str(c)
    raise SystemExit("cuobjdump not found (PATH, CUDA_HOME, /usr/local/cuda*, triton's bundled copy); "
                     "pass --cuobjdump PATH")


_FUNCTION = re.compile(r"^\s*Function : (\S+)\s*$", re.M)
_INSTR = re.compile(r"^\s*/\*[0-9a-f]{4,}\*/\s*(.*?)\s*/\* (0x[0-9a-f]{16}) \*/\s*$")
_WORD = re.compile(r"^\s*/\* (0x[0-9a-f]{16}) \*/\s*$")
_RELOC = re.compile(r"(@\w+)\([^)]*\)")


def split_sass(text: str) -> dict[str, str]:
    """mangled name -> normalised SASS: one line per instruction, 'text ; word0 word1' (no addresses)."""
    out = {}
    parts = _FUNCTION.split(text)
    for mangled, body in zip(parts[1::2], parts[2::2]):
        lines = []
        for line in body.splitlines():
            m = _INSTR.match(line)
            if m:
                lines.append(_RELOC.sub(r"\1(SYM)", m.group(1)) + "  " + m.group(2))
                continue
            m = _WORD.match(line)
            if m and lines:
                lines[-1] += f" {m.group(1)}"
            elif line.strip() and not line.strip().startswith(".section"):
                lines.append(line.strip())
        out[mangled] = "\n".join(lines) + "\n"
    return out


_SECTION_ROW = re.compile(r"^\s*[0-9a-f]+\s+[0-9a-f]+\s+([0-9a-f]+)\s+\S+\s+\S+\s+(\S+)\s+\S+\s+\S+\s+\S+\s+"
                          r"(\.text|\.nv\.constant0)\.(\S+)\s*$", re.M)
_PARAM_CBANK = re.compile(r"(Attribute:\tEIATTR_PARAM_CBANK\n\tFormat:\t\S+\n\tValue:\t)0x[0-9a-f]+ ")


def split_elf(text: str) -> dict[str, str]:
    """mangled name -> the sizes of its .text and .nv.constant0 sections, then its .nv.info attributes."""
    rows: dict[str, list] = {}
    for size, kind, section, mangled in _SECTION_ROW.findall(text):
        rows.setdefault(mangled, []).append(f"{section} size 0x{size} type {kind}")
    info = {}
    for block in re.split(r"\n\s*\n", text):
        head, _, body = block.strip("\n").partition("\n")
        if head.startswith(".nv.info."):
            info[head[len(".nv.info."):]] = _PARAM_CBANK.sub(r"\1SYM ", body)
    return {k: "\n".join(sorted(rows.get(k, [])) + [info.get(k, "")]) + "\n" for k in rows.keys() | info.keys()}


_SECTION = re.compile(r"^\s*([0-9a-f]+)\s+[0-9a-f]+\s+[0-9a-f]+\s+\S+\s+\S+\s+\S+\s+\S+\s+\S+\s+\S+\s+(\.\S+)\s*$",
                      re.M)
_SYMBOL = re.compile(r"^\s*0x[0-9a-f]+\s+\S+\s+\S+\s+(0x[0-9a-f]+|0)\s+\S+\s+(0x[0-9a-f]+|0)\s+(\S+)\s*$", re.M)


def module_data(text: str) -> list[str]:
    """The module's data objects (symbols of type OBJECT in .nv.global* or .nv.constant<bank> sections): variables
    every module carries, such as a namespace-scope constexpr variable NVRTC emits. Not per kernel, so compared
    for the module as a whole."""
    sections = {int(i, 16): name for i, name in _SECTION.findall(text)}
    out = []
    for info, shndx, name in _SYMBOL.findall(text):
        section = sections.get(int(shndx, 16), "")
        if int(info, 16) & 0xF == 1 and (section.startswith(".nv.global") or re.match(r"\.nv\.constant\d+$", section)):
            out.append(f"{name} in {section}")
    return sorted(out)


def compile_batch(root: str, package: str, names: list, arch: str, tool: str) -> dict[str, dict]:
    """Compile one batch (in a worker process too) and return per name {sass, elf, report, module}."""
    if root not in sys.path:
        sys.path.insert(0, root)
    mod = nvrtc.compile_source(FILE, names, arch=arch, package=package, use_disk=False)
    nvrtc.clear_memory_cache()
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(mod.cubin)
        f.flush()
        sass = split_sass(subprocess.run([tool, "-sass", f.name], check=True, capture_output=True, text=True).stdout)
        elf_text = subprocess.run([tool, "-elf", f.name], check=True, capture_output=True, text=True).stdout
    elf, data = split_elf(elf_text), module_data(elf_text)
    out = {}
    for name in names:
        mangled = mod.symbol_mapping[name]
        report = {k: mod.report[name].get(k) for k in RESOURCES}
        out[name] = {"sass": sass[mangled], "elf": elf.get(mangled, ""), "report": report, "module": data}
    return out


class Tree:
    """One source tree: its expanded source, and the per-kernel results (cached on disk)."""

    def __init__(self, spec: str, repo: Path, root: Path, arch: str):
        self.spec, self.arch = spec, arch
        self.root = str(root)
        self.package = as_package(*tree_files(spec, repo), root)
        if self.root not in sys.path:
            sys.path.insert(0, self.root)
        self.source = nvrtc.expand_source(FILE, self.package)
        self.cache = nvrtc.cache_dir() / "sass_diff"

    def key(self, name: str) -> str:
        blob = json.dumps({"schema": SCHEMA, "source": self.source, "arch": self.arch, "name": name,
                           "options": nvrtc.DEFAULT_OPTIONS.canonical(), "nvrtc": list(nvrtc.nvrtc_version())},
                          sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()

    def results(self, names: list, batch: int, jobs: int, tool: str) -> dict[str, dict]:
        got, missing = {}, []
        for name in names:
            try:
                got[name] = json.loads((self.cache / f"{self.key(name)}.json").read_text())
            except (OSError, ValueError):
                missing.append(name)
        if missing:
            print(f"{self.spec}: compiling {len(missing)} of {len(names)} kernels ({len(got)} cached)",
                  file=sys.stderr, flush=True)
            groups = [missing[i:i + batch] for i in range(0, len(missing), batch)]
            args = [(self.root, self.package, g, self.arch, tool) for g in groups]
            if jobs > 1 and len(groups) > 1:
                with cf.ProcessPoolExecutor(min(jobs, len(groups)), mp_context=mp.get_context("spawn")) as ex:
                    parts = list(ex.map(compile_batch, *zip(*args)))
            else:
                parts = [compile_batch(*a) for a in args]
            self.cache.mkdir(parents=True, exist_ok=True)
            for part in parts:
                for name, res in part.items():
                    got[name] = res
                    (self.cache / f"{self.key(name)}.json").write_text(json.dumps(res))
        return got


# ---- compare -------------------------------------------------------------------------------------------------------


def short_diff(a: str, b: str, label: str, lines: int) -> list[str]:
    diff = list(difflib.unified_diff(a.splitlines(), b.splitlines(), f"base {label}", f"head {label}", n=1,
                                     lineterm=""))
    return diff[:lines] + ([f"... ({len(diff) - lines} more diff lines)"] if len(diff) > lines else [])


def comparable(res: dict, part: str):
    """A kernel's sass, elf or report as compared: the report's static shared memory in 16-byte granules (the
    batch's padding, see the module's docstring)."""
    if part != "report":
        return res[part]
    return {**res["report"], "smem": -(-(res["report"]["smem"] or 0) // 16)}


def opcodes(sass: str) -> collections.Counter:
    """Each instruction's opcode (its predicate and modifiers dropped) in split_sass' text."""
    counts = collections.Counter()
    for line in sass.splitlines():
        text, sep, _ = line.partition("  0x")
        words = text.split()
        if sep and words:
            counts[(words[1] if words[0].startswith("@") else words[0]).split(".")[0].rstrip(";")] += 1
    return counts


def count_line(name: str, x: dict, y: dict) -> str:
    """--counts: a kernel's instructions and registers, base -> head, and the opcodes that moved."""
    ca, cb = opcodes(x["sass"]), opcodes(y["sass"])
    moved = sorted(((op, cb[op] - ca[op]) for op in ca.keys() | cb.keys() if cb[op] != ca[op]), key=lambda t: t[1])
    return (f"COUNTS  {name}: instructions {sum(ca.values())} -> {sum(cb.values())}, registers "
            f"{x['report']['registers']} -> {y['report']['registers']}; " + " ".join(f"{op} {d:+d}" for op, d in moved))


OLD_ARITY = {"fwd_warp": 5, "bwd_warp": 5, "fwd_row": 7, "bwd_row": 7}  # before the P and DTO arguments


def old_name(name: str):
    """The base's name of a head kernel (--old-names): a warp or row kernel with P = 0 and no DTO loses its last
    argument; every other kernel keeps its name; None for a kernel with no twin (P > 0, or a DTO)."""
    family, _, rest = name.partition("<")
    args = rest[:-1].split(",")
    if family not in OLD_ARITY:
        return name
    if len(args) == OLD_ARITY[family] + 1 and args[-1] == "0":
        return f"{family}<{','.join(args[:-1])}>"
    return None


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", required=True, help="git revision or directory")
    ap.add_argument("--head", default=None, help="git revision or directory (default: this checkout's working tree)")
    ap.add_argument("--arch", default=DEFAULT_ARCH)
    ap.add_argument("--only", default=None, help="regular expression on the name expressions (re.search)")
    ap.add_argument("--batch", type=int, default=64, help="kernels per NVRTC call")
    ap.add_argument("--jobs", type=int, default=1, help="compiling processes")
    ap.add_argument("--diff-lines", type=int, default=30, help="diff lines shown per different kernel")
    ap.add_argument("--cuobjdump", default=None)
    ap.add_argument("-v", "--verbose", action="store_true", help="list identical kernels too")
    ap.add_argument("--counts", action="store_true",
                    help="per different kernel its instruction and register counts and the opcodes that moved, "
                         "not the diff")
    ap.add_argument("--old-names", action="store_true",
                    help="the base predates the warp and row kernels' P and DTO arguments (7c23874 and before): "
                         "each head kernel with P = 0 and no DTO is compared with the base kernel named without its "
                         "last argument; the others (window path, fused cast) have no twin and are left out")
    args = ap.parse_args(argv)

    repo = Path(git(Path.cwd(), "rev-parse", "--show-toplevel").strip())
    tool = args.cuobjdump or cuobjdump()
    names = sorted(instantiations())
    if args.only:
        names = [n for n in names if re.search(args.only, n)]
    twin = {n: n for n in names}
    if args.old_names:
        twin = {n: old for n in names if (old := old_name(n))}
        print(f"{len(twin)} of {len(names)} kernels have a twin under the old names", file=sys.stderr)
        names = sorted(twin)
    if not names:
        raise SystemExit("no instantiation matches --only")
    with tempfile.TemporaryDirectory(prefix="sass_diff.") as tmp:
        base = Tree(args.base, repo, Path(tmp), args.arch)
        head = Tree(args.head or str(repo), repo, Path(tmp), args.arch)
        a = base.results(sorted(set(twin.values())), args.batch, args.jobs, tool)
        b = head.results(names, args.batch, args.jobs, tool)

    different, unhealthy = [], []
    for name in names:
        x, y = a[twin[name]], b[name]
        parts = [p for p in ("sass", "elf", "report") if comparable(x, p) != comparable(y, p)]
        if y["report"]["stack"] or y["report"]["spill_stores"] or y["report"]["spill_loads"]:
            unhealthy.append(name)
        if not parts:
            if args.verbose:
                print(f"identical  {name}")
            continue
        different.append(name)
        if args.counts:
            print(count_line(name, x, y))
            continue
        print(f"DIFFERENT  {name}: {', '.join(parts)}")
        if "report" in parts:
            print(f"    ptxas base {x['report']}\n    ptxas head {y['report']}")
        for p in ("sass", "elf"):
            if p in parts:
                print("\n".join("    " + line for line in short_diff(x[p], y[p], f"{name} {p}", args.diff_lines)))
    for name in unhealthy:
        print(f"STACK/SPILL {name} (head): {b[name]['report']}")
    data_a = sorted({d for n in names for d in a[twin[n]]["module"]})
    data_b = sorted({d for n in names for d in b[n]["module"]})
    if data_a != data_b:
        print(f"MODULE DATA differs: base {data_a}; head {data_b}")
    regs = [b[n]["report"]["registers"] for n in names]
    print(f"{len(names) - len(different)} identical of {len(names)} ({args.arch}; base {args.base}, head "
          f"{args.head or 'working tree'}); head: {len(unhealthy)} with stack or spills, registers "
          f"{min(regs)}..{max(regs)}")
    return 1 if different or unhealthy or data_a != data_b else 0


if __name__ == "__main__":
    sys.exit(main())

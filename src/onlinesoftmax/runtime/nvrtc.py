"""Run-time compilation of CUDA C++ with NVRTC through `cuda.core`, cached in process and on disk.

    mod = compile_source("reduction.cu", ["reduce_k0", "reduce_k5<256>"], arch="sm_90",
                         package="onlinesoftmax/ladder/kernels")
    mod.report["reduce_k5<256>"]   # {"registers": .., "smem": .., "stack": .., "spill_stores": .., ...}
    mod.cubin, mod.symbol_mapping  # what runtime.launch loads when a kernel is launched

Nothing here touches the CUDA driver: compiling and inspecting work on a machine without a GPU
(pass `arch` explicitly there). `arch=None` asks torch for the present GPU's compute capability.

Sources are read from a folder of an installed package ("onlinesoftmax/ladder/kernels": each caller
names its own; this module knows no op) and local `#include "x.cuh"` lines, resolved against the
including file's folder, are inlined textually (with #line markers, so -lineinfo and error
messages still name the right file). The cache key is the sha256 of the expanded source, the
options, the arch, the name expressions, the NVRTC version and a schema number; the disk cache
(default ~/.cache/onlinesoftmax, env ONLINESOFTMAX_CACHE) stores `<key>.cubin` and `<key>.json`
(ptxas report, name expression -> mangled name, cubin sha256), each written atomically.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import posixpath
import re
import tempfile
import threading
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Iterable, Optional, Sequence

from ..errors import OnlineSoftmaxError, Unavailable
from ..install import pip_line

SCHEMA = 1
CACHE_ENV = "ONLINESOFTMAX_CACHE"
_INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*"([^"]+)"[ \t]*$', re.M)


# ---- options -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CompileOptions:
    """The options this package compiles with; a frozen, hashable subset of cuda.core's ProgramOptions."""

    std: str = "c++17"
    opt_level: int = 3  # ptxas -O<n>
    lineinfo: bool = True
    ptxas_verbose: bool = True  # the ptxas -v report is what `report` parses; keep it on
    max_register_count: Optional[int] = None
    defines: tuple = ()  # (("NAME", "value"), ...) or ("NAME", ...)

    def canonical(self) -> dict:
        return {
            "std": self.std,
            "opt_level": self.opt_level,
            "lineinfo": self.lineinfo,
            "ptxas_verbose": self.ptxas_verbose,
            "max_register_count": self.max_register_count,
            "defines": [list(d) if isinstance(d, tuple) else d for d in self.defines],
        }

    def program_options(self, arch: str, name: str):
        from cuda.core import ProgramOptions

        ptxas = [f"-O{self.opt_level}"]
        if self.ptxas_verbose:
            ptxas.insert(0, "-v")
        kw = dict(name=name, arch=arch, std=self.std, ptxas_options=ptxas, lineinfo=self.lineinfo)
        if self.max_register_count is not None:
            kw["max_register_count"] = self.max_register_count
        if self.defines:
            kw["define_macro"] = [tuple(d) if isinstance(d, (tuple, list)) else d for d in self.defines]
        return ProgramOptions(**kw)


DEFAULT_OPTIONS = CompileOptions()


# ---- environment ---------------------------------------------------------------------------------


def _cuda_core():
    try:
        import cuda.core as cc  # noqa: F401
        from cuda.core import Program, ProgramOptions  # noqa: F401
    except Exception as e:  # ImportError, or cuda.bindings missing / wrong major
        raise Unavailable(f"cuda.core is not importable ({type(e).__name__}: {e}); "
                          f"install it with {pip_line('cuda')}") from None
    return cc


_nvrtc_version: Optional[tuple[int, int]] = None


def nvrtc_version() -> tuple[int, int]:
    """(major, minor) of the NVRTC library cuda.bindings loads; raises Unavailable without one."""
    global _nvrtc_version
    if _nvrtc_version is None:
        try:
            from cuda.bindings import nvrtc

            err, major, minor = nvrtc.nvrtcVersion()
        except Exception as e:
            raise Unavailable(f"NVRTC cannot be loaded ({type(e).__name__}: {e}); "
                              f"install it with {pip_line('cuda')}") from None
        if int(err) != 0:
            raise Unavailable(f"nvrtcVersion failed: {err}")
        _nvrtc_version = (int(major), int(minor))
    return _nvrtc_version


def current_arch(device: Optional[int] = None) -> str:
    """'sm_XY' of the present GPU (torch's current device by default); Unavailable without one."""
    import torch

    if not torch.cuda.is_available():
        raise Unavailable("no CUDA GPU is visible to torch (torch.cuda.is_available() is False); "
                          "pass an explicit arch such as 'sm_90' to compile without a GPU")
    major, minor = torch.cuda.get_device_capability(device)
    return f"sm_{major}{minor}"


def cache_dir() -> Path:
    env = os.environ.get(CACHE_ENV)
    return Path(env).expanduser() if env else Path.home() / ".cache" / "onlinesoftmax"


# ---- sources -------------------------------------------------------------------------------------


def _read_text(path: str) -> str:
    """A source file by its path in the installed package tree, e.g. "onlinesoftmax/engines/cuda/kernels/softmax.cu"."""
    top, _, rel = path.partition("/")
    try:
        return resources.files(top).joinpath(rel).read_text(encoding="utf-8")
    except (FileNotFoundError, ModuleNotFoundError, OSError) as e:
        raise OnlineSoftmaxError(f"CUDA source {path!r} not found ({e})") from None


def expand_source(filename: str, package: str, _seen: Optional[set] = None) -> str:
    """The text of `filename` (in the folder `package`) with its local #include "..." files inlined, each at most
    once. An include is resolved against the including file's folder, so "../state.cuh" reaches a parent folder
    (sources shared by several folders: the ladder's and the engines' kernels)."""
    seen = set() if _seen is None else _seen
    path = posixpath.normpath(posixpath.join(package, filename))
    if path.startswith("../") or posixpath.isabs(path):
        raise OnlineSoftmaxError(f"CUDA source {filename!r} lies outside the package ({package})")
    seen.add(path)
    text = _read_text(path)
    folder = posixpath.dirname(path)
    out, pos = [], 0
    for match in _INCLUDE.finditer(text):
        out.append(text[pos:match.start()])
        header = match.group(1)
        line_after = text.count("\n", 0, match.end()) + 2  # the line after the #include, 1-based
        if posixpath.normpath(posixpath.join(folder, header)) not in seen:
            body = expand_source(header, folder, seen)
            out.append(f'#line 1 "{header}"\n{body}\n#line {line_after} "{filename}"')
        pos = match.end()
    out.append(text[pos:])
    return "".join(out)


# ---- ptxas report --------------------------------------------------------------------------------

_ENTRY = re.compile(r"Compiling entry function '([^']+)'")
_PROPS = re.compile(r"Function properties for (\S+)")
_STACK = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_USED = re.compile(r"Used (\d+) registers")
_SMEM = re.compile(r"(\d+) bytes smem")
_CMEM = re.compile(r"(\d+) bytes cmem\[0\]")
_BARRIERS = re.compile(r"used (\d+) barriers")


def parse_ptxas(log: str, symbol_mapping: Optional[dict] = None) -> dict[str, dict]:
    """Per-kernel resources from a `ptxas -v` report, keyed by name expression where the mapping
    knows the mangled name (else by mangled name):
    {"registers", "smem" (static shared bytes), "stack", "spill_stores", "spill_loads",
     "barriers", "cmem", "mangled"}."""
    back = {_s(v): k for k, v in (symbol_mapping or {}).items()}
    kernels: dict[str, dict] = {}
    entry = props = None
    for line in log.splitlines():
        m = _ENTRY.search(line)
        if m:
            entry = m.group(1)
            kernels.setdefault(entry, _blank(entry))
            props = None
            continue
        m = _PROPS.search(line)
        if m:
            props = m.group(1)
            continue
        m = _STACK.search(line)
        if m and entry is not None and props == entry:
            k = kernels[entry]
            k["stack"], k["spill_stores"], k["spill_loads"] = (int(g) for g in m.groups())
            continue
        m = _USED.search(line)
        if m and entry is not None:
            k = kernels[entry]
            k["registers"] = int(m.group(1))
            s = _SMEM.search(line)
            k["smem"] = int(s.group(1)) if s else 0
            c = _CMEM.search(line)
            if c:
                k["cmem"] = int(c.group(1))
            b = _BARRIERS.search(line)
            if b:
                k["barriers"] = int(b.group(1))
    return {back.get(mangled, mangled): info for mangled, info in kernels.items()}


def _blank(mangled: str) -> dict:
    return {"registers": 0, "smem": 0, "stack": 0, "spill_stores": 0, "spill_loads": 0,
            "barriers": 0, "mangled": mangled}


def _s(v) -> str:
    return v.decode() if isinstance(v, (bytes, bytearray)) else str(v)


_VOLATILE_LOG = re.compile(r"^.*Compile time = .*$\n?", re.M)


def _stable_log(log: str) -> str:
    """The ptxas/NVRTC log without the lines that change run to run (compile times)."""
    return _VOLATILE_LOG.sub("", log).strip() + "\n"


# ---- compiled module -----------------------------------------------------------------------------


@dataclass
class CompiledModule:
    """A compiled cubin and what is known about it. Loading onto a GPU happens in runtime.launch."""

    filename: str
    arch: str
    key: str
    cubin: bytes
    symbol_mapping: dict  # name expression -> mangled name (str)
    report: dict  # name expression -> ptxas resources
    log: str
    from_cache: str  # "compiled", "memory" or "disk"
    name_expressions: tuple = ()
    _object_code: object = field(default=None, repr=False)
    _lock: object = field(default_factory=threading.Lock, repr=False)

    def resources(self, name_expression: str) -> dict:
        try:
            return dict(self.report[name_expression])
        except KeyError:
            raise OnlineSoftmaxError(
                f"{self.filename}: no kernel {name_expression!r}; compiled: {', '.join(self.report)}"
            ) from None

    def object_code(self):
        """cuda.core ObjectCode over the cubin (lazy; nothing is loaded until a kernel is fetched)."""
        if self._object_code is None:
            with self._lock:
                if self._object_code is None:
                    from cuda.core import ObjectCode

                    mapping = {k: v.encode() if isinstance(v, str) else v for k, v in self.symbol_mapping.items()}
                    self._object_code = ObjectCode.from_cubin(
                        self.cubin, name=f"{self.filename}:{self.arch}", symbol_mapping=mapping
                    )
        return self._object_code


_memory: dict[str, CompiledModule] = {}
_memory_lock = threading.Lock()


def cache_key(source: str, options: CompileOptions, arch: str, name_expressions: Sequence[str],
              nvrtc: tuple) -> str:
    blob = json.dumps(
        {"schema": SCHEMA, "source": source, "options": options.canonical(), "arch": arch,
         "name_expressions": list(name_expressions), "nvrtc": list(nvrtc)},
        sort_keys=True, separators=(",", ":"),
    )
    return hashlib.sha256(blob.encode()).hexdigest()


def _atomic_write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def _disk_load(key: str, filename: str, arch: str) -> Optional[CompiledModule]:
    root = cache_dir()
    meta_path, cubin_path = root / f"{key}.json", root / f"{key}.cubin"
    try:
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
        cubin = cubin_path.read_bytes()
    except (OSError, ValueError):
        return None
    if meta.get("schema") != SCHEMA or meta.get("cubin_sha256") != hashlib.sha256(cubin).hexdigest():
        return None  # stale or torn entry: recompile and overwrite
    return CompiledModule(filename, arch, key, cubin, meta["symbol_mapping"], meta["report"], meta["log"],
                          "disk", tuple(meta["name_expressions"]))


def _disk_store(mod: CompiledModule) -> None:
    root = cache_dir()
    meta = {
        "schema": SCHEMA,
        "filename": mod.filename,
        "arch": mod.arch,
        "name_expressions": list(mod.name_expressions),
        "symbol_mapping": mod.symbol_mapping,
        "report": mod.report,
        "log": mod.log,
        "cubin_sha256": hashlib.sha256(mod.cubin).hexdigest(),
        "nvrtc": list(nvrtc_version()),
    }
    try:
        _atomic_write(root / f"{mod.key}.cubin", mod.cubin)  # the cubin first: the json marks completion
        _atomic_write(root / f"{mod.key}.json",
                      json.dumps(meta, sort_keys=True, indent=1).encode())
    except OSError:
        pass  # a read-only or full cache directory only costs a recompile next time


def compile_source(filename: str, name_expressions: Iterable[str], arch: Optional[str] = None,
                   options: CompileOptions = DEFAULT_OPTIONS, *, package: str,
                   use_disk: bool = True) -> CompiledModule:
    """Compile `filename` (from the folder `package`, "<top package>/<sub/dir>") to a cubin for `arch` with every name expression
    instantiated; cached in process and (if use_disk) on disk."""
    name_expressions = tuple(name_expressions)
    arch = arch or current_arch()
    source = expand_source(filename, package)
    key = cache_key(source, options, arch, name_expressions, nvrtc_version())
    hit = _memory.get(key)
    if hit is not None:
        return hit
    with _memory_lock:
        hit = _memory.get(key)
        if hit is not None:
            return hit
        mod = _disk_load(key, filename, arch) if use_disk else None
        if mod is None:
            mod = _compile(filename, source, name_expressions, arch, options, key)
            if use_disk:
                _disk_store(mod)
        _memory[key] = mod
        return mod


def _compile(filename, source, name_expressions, arch, options, key) -> CompiledModule:
    _cuda_core()
    from cuda.core import Program

    log = io.StringIO()
    try:
        program = Program(source, "c++", options=options.program_options(arch, filename))
        try:
            obj = program.compile("cubin", name_expressions=name_expressions, logs=log)
        finally:
            try:
                program.close()
            except Exception:
                pass
    except Unavailable:
        raise
    except Exception as e:  # NVRTCError carries the compiler log in its message
        raise OnlineSoftmaxError(f"NVRTC failed to compile {filename} for {arch}:\n{e}") from None
    mapping = {str(k): _s(v) for k, v in obj.symbol_mapping.items()}
    text = _stable_log(log.getvalue())
    # The report is diagnostic: the kernels are good without it, and a kernel missing from it
    # reads as "no report" in inspect and the ladder. Seen on the H200 image (cuda.core 1.2.0,
    # NVRTC 13.0): a second compile of the same file in one process, even with other defines,
    # comes back with an empty log (not understood; not seen with NVRTC 13.0.88 here).
    report = parse_ptxas(text, mapping)
    return CompiledModule(filename, arch, key, bytes(obj.code), mapping, report, text, "compiled",
                          name_expressions)


def clear_memory_cache() -> None:
    """Forget the in-process cache (tests use it to force a disk round trip)."""
    with _memory_lock:
        _memory.clear()

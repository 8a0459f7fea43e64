"""An optional C++ helper for the eager hot path (issue 12: host overhead at or below torch's): native.cpp looks a
call's shape up in a table of prepared launches, allocates the output and launches, in one call from the ops
(ops/softmax.py) with no Python between. Built once with torch's extension builder (g++ and ninja) into the compile
cache:

    python -m onlinesoftmax build-native        # or native.build()

module() loads it wherever it has been built for this source, torch and Python (ONLINESOFTMAX_NATIVE=0: never), and
never builds. Without it the eager path stays the Python one (ctypes); both launch the same kernels with the same
arguments (tests/test_native.py: against a fake driver entry, and on the GPU against float64)."""

from __future__ import annotations

import hashlib
import importlib.machinery
import importlib.util
import os
import platform
import sys
import threading
import warnings
from pathlib import Path
from typing import Optional

from .nvrtc import cache_dir

SOURCE = Path(__file__).with_name("native.cpp")
CFLAGS = ["-O2"]
ENV = "ONLINESOFTMAX_NATIVE"  # "0" (or off, false, no): never load it; "1": load it, and say so where it cannot
_lock = threading.Lock()
_loaded: list = []  # [the module, or None], once tried


def name() -> str:
    """The extension's module name: the source, its flags, torch's version, Python's and the machine's (a rebuild
    for any change)."""
    import torch

    what = [SOURCE.read_bytes(), " ".join(CFLAGS).encode(), torch.__version__.encode(), sys.version.encode(),
            platform.machine().encode()]
    h = hashlib.sha256(b"\0".join(what)).hexdigest()
    return f"osm_native_{h[:16]}"


def directory() -> Path:
    return cache_dir() / "native" / name()


def build(verbose: bool = False):
    """Compile native.cpp (once; torch's cpp_extension, ninja) into the cache and load it (where this process may
    use it: _bound); raises what the builder raises (no compiler, no ninja)."""
    from torch.utils.cpp_extension import load

    d = directory()
    d.mkdir(parents=True, exist_ok=True)
    mod = load(name(), [str(SOURCE)], extra_cflags=CFLAGS, build_directory=str(d), verbose=verbose)
    with _lock:
        _loaded[:] = [_bound(mod) if not _off() else None]
    return mod


def _off() -> bool:
    return os.environ.get(ENV, "").strip().lower() in ("0", "off", "false", "no")


def module():
    """The built extension, loaded and bound (once), or None where it is not built here, libcuda is not reached
    through ctypes, or ONLINESOFTMAX_NATIVE=0."""
    if _loaded:
        return _loaded[0]
    with _lock:
        if not _loaded:
            _loaded.append(_load_built() if not _off() else None)
    return _loaded[0]


def _load_built():
    import torch  # noqa: F401  (the extension links against torch's libraries, loaded first)

    path = directory() / f"{name()}.so"
    if not path.exists():
        if os.environ.get(ENV) == "1":  # asked for and not there: said once, then the Python path as without it
            warnings.warn(f"{ENV}=1 but the native helper is not built (no {path}); `python -m onlinesoftmax "
                          "build-native` builds it", stacklevel=3)
        return None
    try:
        loader = importlib.machinery.ExtensionFileLoader(name(), str(path))
        spec = importlib.util.spec_from_file_location(name(), str(path), loader=loader)
        mod = importlib.util.module_from_spec(spec)
        loader.exec_module(mod)
    except ImportError as e:
        warnings.warn(f"the native helper does not load ({e}); `python -m onlinesoftmax build-native` builds it "
                      "again", stacklevel=3)
        return None
    return _bound(mod)


def _bound(mod):
    """mod with libcuda's cuCtxGetCurrent and the package's error type handed to it, or None where libcuda is not
    reached through ctypes (the launches then go through cuda.bindings, which native.cpp does not call)."""
    import ctypes

    from ..errors import OnlineSoftmaxError
    from .launch import ctx_current_entry

    get = ctx_current_entry()
    if get is None:
        if os.environ.get(ENV) == "1":
            warnings.warn(f"{ENV}=1 but libcuda is not reached through ctypes here: the native helper is not used",
                          stacklevel=4)
        return None
    mod.bind(ctypes.cast(get, ctypes.c_void_p).value, OnlineSoftmaxError)
    return mod


def reset() -> None:
    """Forget the loaded module (tests)."""
    with _lock:
        _loaded.clear()

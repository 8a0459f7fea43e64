"""An optional C++ helper for the eager hot path (issue 12: host overhead at or below torch's): native.cpp's
alloc_launch allocates the output and launches a prepared launch's kernel in one call. Built once with torch's
extension builder (g++ and ninja) into the compile cache:

    python -m onlinesoftmax build-native        # or native.build()
    ONLINESOFTMAX_NATIVE=1 python train.py      # processes load it from the cache

Opt-in until it has run on a GPU: module() loads it only where ONLINESOFTMAX_NATIVE=1 and it has been built for
this source, torch and Python, and never builds. Without it the eager path stays the ctypes one; both launch the
same kernels with the same arguments (tests/test_native.py, against a fake driver entry)."""

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
ENV = "ONLINESOFTMAX_NATIVE"  # "1": load it where built
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
    """Compile native.cpp (once; torch's cpp_extension, ninja) into the cache and load it; raises what the builder
    raises (no compiler, no ninja)."""
    from torch.utils.cpp_extension import load

    d = directory()
    d.mkdir(parents=True, exist_ok=True)
    mod = load(name(), [str(SOURCE)], extra_cflags=CFLAGS, build_directory=str(d), verbose=verbose)
    with _lock:
        _loaded[:] = [mod]
    return mod


def module():
    """The built extension, loaded (once), or None where ONLINESOFTMAX_NATIVE is not 1 or it is not built here."""
    if _loaded:
        return _loaded[0]
    with _lock:
        if not _loaded:
            _loaded.append(_load_built() if os.environ.get(ENV) == "1" else None)
    return _loaded[0]


def _load_built():
    import torch  # noqa: F401  (the extension links against torch's libraries, loaded first)

    path = directory() / f"{name()}.so"
    try:
        if not path.exists():
            raise ImportError(f"not built: no {path}")
        loader = importlib.machinery.ExtensionFileLoader(name(), str(path))
        spec = importlib.util.spec_from_file_location(name(), str(path), loader=loader)
        mod = importlib.util.module_from_spec(spec)
        loader.exec_module(mod)
    except ImportError as e:  # asked for and not there: said once, then the ctypes path as without it
        warnings.warn(f"{ENV}=1 but the native helper does not load ({e}); `python -m onlinesoftmax build-native` "
                      "builds it", stacklevel=3)
        return None
    return mod


def reset() -> None:
    """Forget the loaded module (tests)."""
    with _lock:
        _loaded.clear()

"""The op modules' way to the Triton engine's launchers: imported on first use (the package imports without
triton), with one clear error where triton is missing."""

from __future__ import annotations

import importlib

from ..errors import Unavailable


def triton(module: str):
    """engines/triton/<module>.py (softmax, attention, cross_entropy), or Unavailable naming what is missing."""
    try:
        return importlib.import_module(f"..engines.triton.{module}", __package__)
    except ImportError as exc:
        raise Unavailable(f"the Triton backend needs triton: {exc}") from None

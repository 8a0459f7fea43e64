"""The optional parts of the package (pip extras, pyproject.toml) and the pip line that adds each.

`import onlinesoftmax` and the ops on CPU tensors need only numpy and torch; every error about a
missing optional dependency names the line from `pip_line`.
"""

EXTRAS = {
    "cli": "the command line's tables and plots (rich, matplotlib)",
    "cuda": "the CUDA kernels, compiled at run time (cuda-core, cuda-bindings, nvidia-cuda-nvrtc)",
    "triton": "the Triton backend (triton)",
    "test": "the test suite (pytest, hypothesis)",
}


def pip_line(extra: str) -> str:
    """The command that installs `extra` next to an installed onlinesoftmax."""
    if extra not in EXTRAS:
        raise KeyError(f"no extra {extra!r}; the extras are {', '.join(EXTRAS)}")
    return f"pip install 'onlinesoftmax[{extra}]'"

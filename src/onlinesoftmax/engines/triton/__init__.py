"""The Triton engine: the regimes as registry variants (variants.py); kernels and launchers in kernels/triton/."""

"""Bindings of each backend's kernels to the registry: one module per backend."""

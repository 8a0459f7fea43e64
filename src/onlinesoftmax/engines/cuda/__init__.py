"""The production CUDA engine: rules and plans (plan.py, pure Python), compiled kernels (compiled.py), the
per-call runner (run.py), the regimes as registry variants (variants.py); sources in kernels/ (softmax.cu, production.cuh)."""

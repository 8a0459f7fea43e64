"""Every implementation the harness checks and times, registered by importing the modules that define them: the
seeds' ladders (CPU, CUDA), the engines' regimes (production CUDA, Triton), the public ops, and the libraries we
compare against. The package imports this module, so `registry.variants()` sees them all; backends that cannot
run here still register (`list` and `inspect` show them) and their `available()` says why.
"""

from ..engines.cuda import variants as _cuda_engine  # noqa: F401
from ..ladder import cpu as _cpu_ladder  # noqa: F401
from ..ladder import cuda as _cuda_ladder  # noqa: F401
from ..engines.triton import variants as _triton_engine  # noqa: F401
from . import baselines as _baselines  # noqa: F401
from . import public as _public  # noqa: F401

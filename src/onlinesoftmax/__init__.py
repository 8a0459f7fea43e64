"""onlinesoftmax: the online-softmax (m, d) fold, from the seeds' CUDA ladder to production ops.

    import onlinesoftmax as osm
    y = osm.softmax(x, dim=-1)      # CUDA tensors: production kernels; CPU: the reference path
    osm.variants()                  # every implementation: CPU ladder, CUDA ladder, Triton, ...
"""

from .errors import OnlineSoftmaxError, Unavailable
from .ops import LogSoftmax, Softmax, log_softmax, softmax
from .registry import Variant, get, variants
from .harness import catalog as _catalog  # noqa: F401, E402  (registers every variant)

__all__ = ["LogSoftmax", "OnlineSoftmaxError", "Softmax", "Unavailable", "Variant", "get",
           "log_softmax", "softmax", "variants"]
__version__ = "0.1.0"

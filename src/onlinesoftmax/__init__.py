"""onlinesoftmax: the online-softmax (m, d) fold, from the seeds' CUDA ladder to production ops.

    import onlinesoftmax as osm
    osm.variants()            # every implementation, CPU ladder, CUDA ladder, Triton
"""

from .errors import OnlineSoftmaxError, Unavailable
from .registry import Variant, get, variants

__all__ = ["OnlineSoftmaxError", "Unavailable", "Variant", "get", "variants"]
__version__ = "0.1.0"

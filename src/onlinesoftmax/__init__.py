"""onlinesoftmax: the online-softmax (m, d) fold, from the seeds' CUDA ladder to production ops.

    import onlinesoftmax as osm
    y = osm.softmax(x, dim=-1)      # torch.softmax's signature; CUDA: production kernels, CPU: torch's kernel
    osm.enable()                    # torch.softmax & co. on CUDA tensors (and their backward) run ours
    osm.variants()                  # every implementation: CPU ladder, CUDA ladder, Triton, ...
    o, lse = osm.attention(q, k, v, causal=True, return_lse=True)   # FlashAttention-2 in Triton
    loss = osm.cross_entropy(logits, target)                 # F.cross_entropy + z_loss, softcap; fused gradient
    loss = osm.linear_cross_entropy(hidden, weight, target)  # without the N x V logits
    loss = osm.vocab_parallel_cross_entropy(shard, target, start, V)   # one all_gather, torch.distributed
"""

from .errors import ArgumentTypeError, DimError, OnlineSoftmaxError, Unavailable
from .ops.attention import attention, merge_attention
from .ops.dropin import disable, enable, enabled, is_enabled
from .ops.cross_entropy import TargetError, cross_entropy, linear_cross_entropy
from .ops.softmax import LogSoftmax, Softmax, log_softmax, softmax
from .ops.vocab_parallel import vocab_parallel_cross_entropy
from .registry import Variant, get, variants
from .harness import catalog as _catalog  # noqa: F401, E402  (registers every variant)

__all__ = ["ArgumentTypeError", "DimError", "LogSoftmax", "OnlineSoftmaxError", "Softmax", "TargetError",
           "Unavailable", "Variant", "attention", "cross_entropy", "disable", "enable", "enabled", "get", "is_enabled",
           "linear_cross_entropy", "log_softmax", "merge_attention", "softmax", "variants",
           "vocab_parallel_cross_entropy"]
__version__ = "0.1.0"

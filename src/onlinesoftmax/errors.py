"""The one exception type users see: bad input, unsupported shape/dtype, missing GPU."""


class OnlineSoftmaxError(ValueError):
    """A clear, user-facing error. The CLI prints its message and exits non-zero."""


class Unavailable(OnlineSoftmaxError):
    """A backend cannot run on this machine (no GPU, no driver, no Triton)."""

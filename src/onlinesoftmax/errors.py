"""The exceptions users see: bad input, unsupported shape/dtype, missing GPU. All are OnlineSoftmaxError; the two
argument errors are also the builtin torch raises in the same case (IndexError, TypeError)."""


class OnlineSoftmaxError(ValueError):
    """A clear, user-facing error. The CLI prints its message and exits non-zero."""


class Unavailable(OnlineSoftmaxError):
    """A backend cannot run on this machine (no GPU, no driver, no Triton)."""


class DimError(OnlineSoftmaxError, IndexError):
    """`dim` out of range for the input (torch raises an IndexError)."""


class ArgumentTypeError(OnlineSoftmaxError, TypeError):
    """An argument of the wrong type: the input not a tensor, `dim` not an int, `dtype` not a torch.dtype."""

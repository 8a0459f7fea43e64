"""The integer helpers every launch rule uses (grids, power-of-two geometries), defined once."""


def cdiv(a: int, b: int) -> int:
    """ceil(a / b) for positive b."""
    return -(-a // b)


def pow2ceil(n: int) -> int:
    """The smallest power of two >= n (1 for n <= 1)."""
    return 1 if n <= 1 else 1 << (n - 1).bit_length()


def pow2floor(n: int) -> int:
    """The largest power of two <= n (1 for n <= 1)."""
    return 1 << (max(1, n).bit_length() - 1)


def log2(n: int) -> int:
    """floor(log2(n)) for n >= 1."""
    return n.bit_length() - 1

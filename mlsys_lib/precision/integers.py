"""n-bit integers for quantization: the allowed widths (2 to 16 bits), their ranges, and rounding into them.

Signed integers are two's complement: n bits hold [-2^(n-1), 2^(n-1) - 1] (the lecture's
[-2^(n-1) - 1, 2^(n-1) - 1] is off by one at the bottom); unsigned ones hold [0, 2^n - 1].
"""

from __future__ import annotations

import numpy as np


def check_bits(bits: int, who: str) -> None:
    """ValueError unless bits is an int in [2, 16]."""
    if not isinstance(bits, (int, np.integer)) or isinstance(bits, bool):
        raise TypeError(f"{who}: bits must be an int, got {type(bits).__name__}")
    if not 2 <= bits <= 16:
        raise ValueError(f"{who}: bits must be in [2, 16], got {bits}")


def integer_range(bits: int, signed: bool = True) -> tuple[int, int]:
    """(q_min, q_max) of an n-bit integer: (-2^(n-1), 2^(n-1) - 1) signed, (0, 2^n - 1) unsigned."""
    check_bits(bits, "integer_range")
    return (-(1 << bits - 1), (1 << bits - 1) - 1) if signed else (0, (1 << bits) - 1)


def to_integers(x: np.ndarray, zero_point, bits: int, signed: bool) -> np.ndarray:
    """q = clip(round(x) + Z, q_min, q_max), rounding half to even, for x = r / S (any shape; Z broadcasts).
    Stored as int8/uint8 up to 8 bits, else int16/uint16."""
    q_min, q_max = integer_range(bits, signed)
    q = np.clip(np.round(x) + zero_point, q_min, q_max)
    return q.astype(f"{'i' if signed else 'u'}{1 if bits <= 8 else 2}")

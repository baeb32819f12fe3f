"""Floating-point formats as bit fields: 1 sign bit, E exponent bits, M mantissa bits and a bias.

A code ``S | E..E | M..M`` means (``e`` = the exponent field read as an unsigned integer, ``f`` = the
mantissa field read as a fraction ``M / 2^M``)::

    normal     (1 <= e, below the special codes):  (-1)^S · (1 + f) · 2^(e - bias)
    subnormal  (e = 0):                             (-1)^S · (0 + f) · 2^(1 - bias)   (f = 0: ±0)

Subnormals use the exponent ``1 - bias``, not ``0 - bias``: that is what makes them continue the
normal numbers' spacing and puts FP32's smallest positive value at 2^(1-127-23) = 2^-149.

Special codes come in two conventions (``has_inf``):

* IEEE-like (FP32, FP16, BF16, FP8 E5M2): e all ones is reserved: f = 0 is ±inf, f != 0 is NaN.
* OCP FP8 E4M3 ("fn": finite + NaN): no infinities; e all ones holds normal numbers except the one
  code S.1111.111, which is NaN. So E4M3 reaches 1.75 · 2^8 = 448 instead of 240.

Every format here fits inside float32 (exponent range and mantissa width), so each of its values is a
float32; :mod:`~mlsys_lib.precision.rounding` relies on that.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

_FLOAT32_EMIN, _FLOAT32_EMAX, _FLOAT32_MANTISSA = -126, 127, 23


@dataclass(frozen=True)
class FloatFormat:
    """A binary floating-point format: sign, exponent and mantissa widths (bits), exponent bias.

    name: how :func:`get_format` finds it.  has_inf: IEEE-like special codes (True) or the OCP E4M3
    convention (False: no inf, NaN only at all-ones exponent and mantissa). Values in units of 1.
    """

    name: str
    exponent_bits: int
    mantissa_bits: int
    bias: int
    has_inf: bool = True

    sign_bits: ClassVar[int] = 1

    def __post_init__(self) -> None:
        for field in ("exponent_bits", "mantissa_bits", "bias"):
            if not isinstance(getattr(self, field), int) or isinstance(getattr(self, field), bool):
                raise TypeError(f"FloatFormat {self.name!r}: {field} must be an int, got {getattr(self, field)!r}")
        if not 2 <= self.exponent_bits <= 8:
            raise ValueError(f"FloatFormat {self.name!r}: exponent_bits must be in [2, 8], got {self.exponent_bits}")
        if not 1 <= self.mantissa_bits <= _FLOAT32_MANTISSA:
            raise ValueError(f"FloatFormat {self.name!r}: mantissa_bits must be in [1, 23], got {self.mantissa_bits}")
        # The exponent range fits float32's (bias checked on the exponent fields; the emin and emax
        # properties are an exercise of Lab 5, and the grading edition removes them).
        lowest, highest = 1 - self.bias, self.max_exponent_field - self.bias
        if lowest < _FLOAT32_EMIN or highest > _FLOAT32_EMAX:
            raise ValueError(f"FloatFormat {self.name!r}: exponents [{lowest}, {highest}] (from bias {self.bias}) "
                             f"must lie within float32's [{_FLOAT32_EMIN}, {_FLOAT32_EMAX}]")

    @property
    def total_bits(self) -> int:
        """Width of one code: 1 + exponent_bits + mantissa_bits."""
        return self.sign_bits + self.exponent_bits + self.mantissa_bits

    @property
    def max_exponent_field(self) -> int:
        """Largest exponent field of a finite value: all ones minus one (IEEE-like) or all ones (E4M3)."""
        return (1 << self.exponent_bits) - (2 if self.has_inf else 1)

    @property
    def emin(self) -> int:
        """Exponent of the smallest normal number (and of every subnormal): 1 - bias."""
        return 1 - self.bias

    @property
    def emax(self) -> int:
        """Exponent of the largest finite number: max_exponent_field - bias."""
        return self.max_exponent_field - self.bias

    @property
    def max(self) -> float:
        """Largest finite value: (2 - 2^-M) · 2^emax, or (2 - 2^(1-M)) · 2^emax for E4M3 (its all-ones
        mantissa at the top exponent is NaN). FP16: 65504, BF16: ≈3.39e38, E4M3: 448, E5M2: 57344."""
        top_mantissa_gap = 1 if self.has_inf else 2
        return (2.0 - top_mantissa_gap * 2.0 ** -self.mantissa_bits) * 2.0 ** self.emax

    @property
    def min_normal(self) -> float:
        """Smallest positive normal value: 2^emin (FP16: 2^-14 ≈ 6.1e-5)."""
        return 2.0 ** self.emin

    @property
    def min_subnormal(self) -> float:
        """Smallest positive value: 2^(emin - M) (FP32: 2^-149, FP16: 2^-24 ≈ 6.0e-8)."""
        return 2.0 ** (self.emin - self.mantissa_bits)

    @property
    def eps(self) -> float:
        """Machine epsilon: the gap between 1 and the next value, 2^-M (FP16: 2^-10, BF16: 2^-7)."""
        return 2.0 ** -self.mantissa_bits


FP32 = FloatFormat("fp32", exponent_bits=8, mantissa_bits=23, bias=127)
FP16 = FloatFormat("fp16", exponent_bits=5, mantissa_bits=10, bias=15)
BF16 = FloatFormat("bf16", exponent_bits=8, mantissa_bits=7, bias=127)
FP8_E4M3 = FloatFormat("fp8_e4m3", exponent_bits=4, mantissa_bits=3, bias=7, has_inf=False)
FP8_E5M2 = FloatFormat("fp8_e5m2", exponent_bits=5, mantissa_bits=2, bias=15)

FORMATS: dict[str, FloatFormat] = {fmt.name: fmt for fmt in (FP32, FP16, BF16, FP8_E4M3, FP8_E5M2)}


def get_format(fmt: str | FloatFormat) -> FloatFormat:
    """The registered format called ``fmt`` (case-insensitive: "fp16", "BF16", "fp8_e4m3", ...);
    a FloatFormat passes through."""
    if isinstance(fmt, FloatFormat):
        return fmt
    if not isinstance(fmt, str):
        raise TypeError(f"get_format: expected a format name or a FloatFormat, got {type(fmt).__name__}")
    try:
        return FORMATS[fmt.lower()]
    except KeyError:
        raise ValueError(f"get_format: unknown format {fmt!r}; known formats: {', '.join(FORMATS)}") from None

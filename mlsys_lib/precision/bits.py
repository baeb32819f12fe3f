"""Codes of a FloatFormat: values <-> unsigned-integer codes <-> bit strings, and value classes.

``to_bits``/``from_bits`` are the array API (codes as uint8/16/32); ``encode``/``decode`` are the
bit-string API the lecture uses ("1 10001 1100000000" in FP16 is -1.75 · 2^(17-15) = -7.0);
``classify`` names what a code, or a value stored in the format, is.

A value of the format is a float32 (see :mod:`~mlsys_lib.precision.formats`), so the code of a normal
value is its float32 pattern re-biased: shift the pattern right by 23 - M (the dropped mantissa bits
are zero) and subtract (127 - bias) from the exponent field. A subnormal's code is its value divided
by min_subnormal. NaN gets the quiet NaN code (E4M3: its only NaN, S.1111.111).
"""

from __future__ import annotations

import numpy as np

from .formats import FloatFormat, get_format
from .rounding import as_float_array, round_to

_FLOAT32_MANTISSA, _FLOAT32_BIAS = 23, 127
CLASSES = ("zero", "subnormal", "normal", "inf", "nan")


def _fields(codes: np.ndarray, fmt: FloatFormat) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(sign, exponent field, mantissa field) of each code, as int64 arrays."""
    codes = codes.astype(np.int64)
    m, e = fmt.mantissa_bits, fmt.exponent_bits
    return codes >> (e + m), (codes >> m) & ((1 << e) - 1), codes & ((1 << m) - 1)


def _nan_code(fmt: FloatFormat) -> int:
    """Positive NaN: exponent all ones with the top mantissa bit (IEEE quiet NaN) or all mantissa bits (E4M3)."""
    mantissa = 1 << (fmt.mantissa_bits - 1) if fmt.has_inf else (1 << fmt.mantissa_bits) - 1
    return (((1 << fmt.exponent_bits) - 1) << fmt.mantissa_bits) | mantissa


def to_bits(x, fmt: str | FloatFormat, saturate: bool = False) -> np.ndarray:
    """The codes of x rounded into fmt (see :func:`round_to`): unsigned integers of fmt.total_bits bits
    (uint8 for FP8, uint16 for FP16/BF16, uint32 for FP32), same shape as x."""
    fmt = get_format(fmt)
    rounded = np.asarray(round_to(as_float_array(x, "to_bits"), fmt, saturate), np.float32)  # exact: fmt ⊂ float32
    values = rounded.reshape(-1)
    pattern = values.view(np.uint32).astype(np.int64)
    sign, magnitude = pattern >> 31, np.abs(values).astype(np.float64)
    code = (pattern & 0x7FFFFFFF) >> (_FLOAT32_MANTISSA - fmt.mantissa_bits)
    code -= (_FLOAT32_BIAS - fmt.bias) << fmt.mantissa_bits
    subnormal = magnitude < fmt.min_normal
    code[subnormal] = magnitude[subnormal] / fmt.min_subnormal  # exact integers below 2^M
    code[np.isinf(values)] = (fmt.max_exponent_field + 1) << fmt.mantissa_bits
    code[np.isnan(values)] = _nan_code(fmt)
    code |= sign << (fmt.total_bits - 1)
    return code.astype(np.min_scalar_type((1 << fmt.total_bits) - 1)).reshape(rounded.shape)


def from_bits(codes, fmt: str | FloatFormat) -> np.ndarray:
    """The values of fmt's codes (non-negative integers below 2^total_bits) as a float32 array."""
    fmt = get_format(fmt)
    codes = np.asarray(codes)
    if not np.issubdtype(codes.dtype, np.integer):
        raise TypeError(f"from_bits: codes must be integers, got dtype {codes.dtype}")
    if codes.size and (codes.min() < 0 or codes.max() >> fmt.total_bits):
        raise ValueError(f"from_bits: {fmt.name} codes must lie in [0, 2^{fmt.total_bits}), "
                         f"got values in [{codes.min()}, {codes.max()}]")
    sign, exponent, mantissa = _fields(codes, fmt)
    m = fmt.mantissa_bits
    normal = ((exponent - fmt.bias + _FLOAT32_BIAS) << _FLOAT32_MANTISSA | mantissa << (_FLOAT32_MANTISSA - m))
    value = np.where(exponent == 0, mantissa * fmt.min_subnormal, normal.astype(np.uint32).view(np.float32))
    classes = _classes(exponent, mantissa, fmt)
    value[classes == CLASSES.index("inf")] = np.inf
    value[classes == CLASSES.index("nan")] = np.nan
    return np.where(sign == 1, -value, value).astype(np.float32)


def _classes(exponent: np.ndarray, mantissa: np.ndarray, fmt: FloatFormat) -> np.ndarray:
    """Index into CLASSES of each (exponent field, mantissa field) pair."""
    all_ones = exponent == (1 << fmt.exponent_bits) - 1
    if fmt.has_inf:
        special = np.where(mantissa == 0, CLASSES.index("inf"), CLASSES.index("nan"))
        top = all_ones
    else:
        special = CLASSES.index("nan")
        top = all_ones & (mantissa == (1 << fmt.mantissa_bits) - 1)
    low = np.where(mantissa == 0, CLASSES.index("zero"), CLASSES.index("subnormal"))
    return np.where(top, special, np.where(exponent == 0, low, CLASSES.index("normal")))


def encode(x: float, fmt: str | FloatFormat, sep: str = "", saturate: bool = False) -> str:
    """The bit string of the scalar x rounded into fmt: sign, exponent and mantissa bits, joined by ``sep``.

    >>> encode(2.5, "bf16", sep=" ")
    '0 10000000 0100000'
    """
    if np.ndim(x) != 0:
        raise ValueError(f"encode: expected a scalar, got an array of shape {np.shape(x)}")
    fmt = get_format(fmt)
    code = int(to_bits(x, fmt, saturate))
    bits = format(code, f"0{fmt.total_bits}b")
    e = fmt.exponent_bits
    return sep.join((bits[:1], bits[1:1 + e], bits[1 + e:]))


def _parse_bits(bits: str, fmt: str | FloatFormat) -> int:
    """The code written as the bit string ``bits`` (spaces and underscores between groups are ignored)."""
    fmt = get_format(fmt)
    if not isinstance(bits, str):
        raise TypeError(f"expected a bit string like {'0' * fmt.total_bits!r}, got {type(bits).__name__}")
    digits = bits.replace(" ", "").replace("_", "")
    if len(digits) != fmt.total_bits or set(digits) - {"0", "1"}:
        raise ValueError(f"{fmt.name} needs a string of exactly {fmt.total_bits} bits (0/1; spaces ignored) "
                         f"(1 sign, {fmt.exponent_bits} exponent, {fmt.mantissa_bits} mantissa), got {bits!r}")
    return int(digits, 2)


def decode(bits: str, fmt: str | FloatFormat) -> float:
    """The value of a bit string of fmt: ``decode("1 10001 1100000000", "fp16") == -7.0``."""
    return float(from_bits(_parse_bits(bits, fmt), fmt))


def classify(x: str | float, fmt: str | FloatFormat) -> str:
    """'zero', 'subnormal', 'normal', 'inf' or 'nan': the class of a bit string of fmt, or of the real
    number x once rounded into fmt (``classify(1e-6, "fp16") == 'subnormal'``, ``classify(1e5, "fp16") == 'inf'``)."""
    fmt = get_format(fmt)
    if isinstance(x, str):
        code = _parse_bits(x, fmt)
    elif np.ndim(x) == 0:
        code = to_bits(x, fmt)
    else:
        raise ValueError(f"classify: expected a bit string or a scalar, got an array of shape {np.shape(x)}")
    _, exponent, mantissa = _fields(np.asarray(code), fmt)
    return CLASSES[int(_classes(exponent, mantissa, fmt))]

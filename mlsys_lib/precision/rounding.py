"""Round real numbers into a FloatFormat, round-to-nearest-even, by integer arithmetic on bit patterns.

``round_to(x, fmt)`` returns the values of ``fmt`` nearest to ``x``, still stored as float32 (for float32
input) or float64 (anything else), so the result can be computed with directly: this is how
mixed-precision training is emulated on a CPU. It works on the IEEE bit patterns of the container
(float32 or float64), whose magnitude bits grow with the value, one binade after another:

* **normal range** (|x| >= fmt.min_normal): drop the container's low ``d = M_container - M`` mantissa
  bits, rounding half to even: add ``2^(d-1) - 1`` plus the lowest kept bit, then clear the low bits.
  A carry out of the mantissa moves into the exponent field: the next binade, as it should.
* **subnormal range** (|x| < fmt.min_normal): the values are the multiples of ``fmt.min_subnormal``.
  Add and subtract ``C = min_subnormal · 2^M_container``, whose ulp is exactly min_subnormal: the
  container's own round-to-nearest-even addition rounds |x| onto that grid (and flushes the tiniest
  values to 0).
* **overflow** (the rounded value exceeds fmt.max): inf for IEEE-like formats, NaN for E4M3 (it has
  no inf), or ±fmt.max with ``saturate=True`` (also for ±inf inputs; the OCP FP8 saturating mode).
  NaN stays NaN.

Working on float64 patterns for float64 input (rather than casting to float32 first) avoids double
rounding. The arrays are processed in blocks of ``BLOCK`` elements so that the temporaries of the
computation stay in cache (the tiling idea of lab 1).
"""

from __future__ import annotations

import functools

import numpy as np

from .formats import FloatFormat, get_format

BLOCK = 1 << 15  # elements per block: its few temporaries (128 KiB each for float32) stay in L2


def as_float_array(x, who: str) -> np.ndarray:
    """``x`` as a float32 array (if it is one) or a float64 array; TypeError for non-real input."""
    array = np.asarray(x)
    if array.dtype == np.float32 or array.dtype == np.float64:
        return array
    real = np.issubdtype(array.dtype, np.integer) or np.issubdtype(array.dtype, np.floating)
    if array.dtype == np.bool_ or not real:
        raise TypeError(f"{who}: expected real numbers (a float or integer array), got dtype {array.dtype}")
    return array.astype(np.float64)


def round_to(x, fmt: str | FloatFormat, saturate: bool = False) -> np.ndarray | np.floating:
    """The values of ``fmt`` nearest to ``x`` (round half to even), as float32 for float32 input and
    float64 otherwise; same shape as x (a numpy scalar for a scalar).

    saturate: overflow goes to ±fmt.max instead of ±inf (or NaN for FP8 E4M3, which has no inf).
    """
    fmt = get_format(fmt)
    x = as_float_array(x, "round_to")
    pattern = _patterns(fmt, x.dtype, saturate)
    flat = np.ascontiguousarray(x).reshape(-1).view(pattern.uint)
    out = np.empty_like(flat)
    with np.errstate(invalid="ignore"):  # the subnormal trick computes inf - inf for lanes it discards
        for start in range(0, flat.size, BLOCK):
            pattern.round_block(flat[start:start + BLOCK], out[start:start + BLOCK])
    return out.view(x.dtype).reshape(x.shape)[()]


@functools.lru_cache(maxsize=64)
def _patterns(fmt: FloatFormat, dtype: np.dtype, saturate: bool) -> _Patterns:
    """The constants for one (format, container, saturate) triple, computed once."""
    return _Patterns(fmt, dtype, saturate)


class _Patterns:
    """The bit-pattern constants for rounding a container dtype (float32/float64) into ``fmt``."""

    def __init__(self, fmt: FloatFormat, dtype: np.dtype, saturate: bool):
        self.float, self.uint = np.dtype(dtype), np.dtype(f"u{np.dtype(dtype).itemsize}")
        container_mantissa = np.finfo(self.float).nmant
        drop = container_mantissa - fmt.mantissa_bits  # low mantissa bits that fmt lacks
        self.drop, self.one = self.uint.type(drop), self.uint.type(1)
        self.half_minus_one = self.uint.type((1 << drop - 1) - 1 if drop else 0)  # 2^(drop-1) - 1
        self.keep = ~self.uint.type((1 << drop) - 1)  # clears the dropped bits
        self.sign = self.uint.type(1 << (8 * self.uint.itemsize - 1))
        self.min_normal = self.bits_of(fmt.min_normal)
        self.max = self.bits_of(fmt.max)
        self.inf, self.nan = self.bits_of(np.inf), self.bits_of(np.nan)
        self.overflow = self.max if saturate else (self.inf if fmt.has_inf else self.nan)
        self.subnormal_shift = self.float.type(fmt.min_subnormal * 2.0 ** container_mantissa)  # C

    def bits_of(self, value: float) -> np.unsignedinteger:
        return np.array(value, self.float).view(self.uint)[()]

    def round_block(self, bits: np.ndarray, out: np.ndarray) -> None:
        """Round the container patterns ``bits`` (1-D) into fmt, writing the patterns to ``out``."""
        sign = bits & self.sign
        magnitude = bits ^ sign
        if self.drop:  # normal range: round the pattern half to even at bit `drop`
            np.add(magnitude, self.half_minus_one, out=out)
            out += (magnitude >> self.drop) & self.one
            out &= self.keep
        else:
            out[...] = magnitude
        small = magnitude < self.min_normal  # subnormal range: onto the grid of min_subnormal
        if small.any():
            grid = magnitude.view(self.float) + self.subnormal_shift
            grid -= self.subnormal_shift
            _select(out, grid.view(self.uint), small)
        overflow = out > self.max  # also every NaN: its pattern exceeds inf's
        if overflow.any():
            _select(out, self.overflow, overflow)
            _select(out, self.nan, magnitude > self.inf)
        out |= sign


def _select(out: np.ndarray, value, where: np.ndarray) -> None:
    """out[where] = value without branches: out ^= (out ^ value) & (all ones where `where`). Masked copies
    (np.copyto(where=...)) are several times slower when the mask is dense and irregular."""
    take = where.astype(out.dtype)
    np.negative(take, out=take)
    out ^= (out ^ value) & take

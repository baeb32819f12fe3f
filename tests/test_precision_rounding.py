"""round_to against numpy's float16 and ml_dtypes' bfloat16 / float8_e4m3fn / float8_e5m2 casts (float32 input),
numpy's direct float64 -> float16 cast and an exact per-value oracle (float64 input), on random bit patterns,
values next to every power of two, every rounding tie, subnormals, overflow and every special value."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from test_precision_formats import reference_dtype  # numpy's float16, ml_dtypes' others

from mlsys_lib.precision import BF16, FORMATS, FP8_E4M3, FP8_E5M2, FP16, FP32, FloatFormat, from_bits, round_to

NATIVE_FORMATS = [FP16, BF16, FP8_E4M3, FP8_E5M2]
formats = pytest.mark.parametrize("fmt", NATIVE_FORMATS, ids=lambda f: f.name)


def native(x: np.ndarray, fmt: FloatFormat) -> np.ndarray:
    """The reference: cast to numpy's float16 or ml_dtypes' format and back (float32 input); skips the
    test where ml_dtypes is missing."""
    with np.errstate(over="ignore", invalid="ignore"):
        return x.astype(reference_dtype(fmt)[0]).astype(x.dtype)


def assert_same(actual: np.ndarray, expected: np.ndarray) -> None:
    """Equal values, bit for bit (so the sign of zero counts), NaN where expected is NaN."""
    assert actual.dtype == expected.dtype and actual.shape == expected.shape
    nan = np.isnan(expected)
    assert np.array_equal(np.isnan(actual), nan), "NaN in different places"
    uint = np.dtype(f"u{expected.itemsize}")
    bad = np.flatnonzero(actual.view(uint)[~nan] != expected.view(uint)[~nan])
    assert bad.size == 0, f"{bad.size} mismatches, e.g. x -> {actual[~nan][bad[:5]]} expected {expected[~nan][bad[:5]]}"


def oracle(value: float, fmt: FloatFormat, saturate: bool = False) -> float:
    """Round one finite float exactly, by the definition: the nearest multiple of the format's spacing
    at |value|'s binade (at least emin), ties to the even multiple; then overflow."""
    if value == 0:
        return value
    exponent = max(math.frexp(abs(value))[1] - 1, fmt.emin)
    quantum = 2.0 ** (exponent - fmt.mantissa_bits)
    result = math.copysign(round(abs(value) / quantum) * quantum, value)  # round(): half to even, exact
    if abs(result) > fmt.max:
        if saturate:
            return math.copysign(fmt.max, value)
        return math.copysign(math.inf, value) if fmt.has_inf else math.nan
    return result


def tie_and_boundary_values(fmt: FloatFormat) -> np.ndarray:
    """Every finite value of fmt, every midpoint between neighbours (the ties) and the float32 numbers
    just below and above each midpoint, past the largest value and below the smallest subnormal, both signs."""
    values = np.unique(np.abs(from_bits(np.arange(1 << fmt.total_bits), fmt).astype(np.float64)))
    values = values[np.isfinite(values)]
    top = fmt.max + 2.0 ** (fmt.emax - fmt.mantissa_bits)  # the next value above max, were there one
    grid = np.concatenate([values, [top]])
    mids = ((grid[1:] + grid[:-1]) / 2).astype(np.float32)  # exact: one bit more than fmt has
    with np.errstate(over="ignore"):  # BF16's `top` is 2^128: float32 inf
        near = np.concatenate([mids, np.nextafter(mids, np.float32(0)), np.nextafter(mids, np.float32(np.inf)),
                               values.astype(np.float32), [top, 2 * top, fmt.min_subnormal / 4]])
        return np.concatenate([near, -near]).astype(np.float32)


def powers_of_two_neighbourhood(fmt: FloatFormat) -> np.ndarray:
    """2^e · (1 + k·2^-23) for small k of both signs, for every e from below the subnormals to past max."""
    exponents = np.arange(fmt.emin - fmt.mantissa_bits - 3, fmt.emax + 3)
    offsets = np.arange(-40, 41) * 2.0 ** -23
    x = (2.0 ** exponents[:, None] * (1 + offsets[None, :])).ravel()
    x = x[(x < np.finfo(np.float32).max) & (x >= 2.0 ** -149)]
    return np.concatenate([x, -x]).astype(np.float32)


SPECIALS = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, -np.nan, 1.0, -1.0,
                     np.finfo(np.float32).max, np.finfo(np.float32).smallest_subnormal,
                     np.finfo(np.float32).smallest_normal], np.float32)


@formats
def test_random_bit_patterns_match_the_native_cast(fmt):
    """Uniform random float32 bit patterns: every exponent equally likely, NaN payloads, infs, subnormals."""
    bits = np.random.default_rng(0).integers(0, 2 ** 32, 200_000, dtype=np.uint64).astype(np.uint32)
    x = bits.view(np.float32)
    assert_same(round_to(x, fmt), native(x, fmt))


@formats
def test_random_values_at_the_formats_scale_match(fmt):
    rng = np.random.default_rng(1)
    x = (rng.standard_normal(100_000) * 2.0 ** rng.integers(fmt.emin - fmt.mantissa_bits - 2, fmt.emax + 2, 100_000))
    with np.errstate(over="ignore"):  # BF16's range reaches float32's: some become inf
        x = x.astype(np.float32)
    assert_same(round_to(x, fmt), native(x, fmt))


@formats
def test_ties_and_neighbours_of_every_value_match(fmt):
    x = tie_and_boundary_values(fmt)
    assert_same(round_to(x, fmt), native(x, fmt))


@formats
def test_values_near_every_power_of_two_match(fmt):
    x = powers_of_two_neighbourhood(fmt)
    assert_same(round_to(x, fmt), native(x, fmt))


@formats
def test_special_values_match(fmt):
    assert_same(round_to(SPECIALS, fmt), native(SPECIALS, fmt))


@settings(max_examples=150, deadline=None)
@given(x=hnp.arrays(np.float32, st.integers(1, 64), elements=st.floats(width=32)),
       fmt=st.sampled_from(NATIVE_FORMATS))
def test_hypothesis_float32_arrays_match(x, fmt):
    assert_same(round_to(x, fmt), native(x, fmt))


def test_round_half_to_even_examples():
    # FP16 spacing at 1 is 2^-10: 1 + 2^-11 is a tie between 1 (even) and 1 + 2^-10 (odd)
    assert round_to(np.float32(1 + 2 ** -11), FP16) == 1.0
    assert round_to(np.float32(1 + 3 * 2 ** -11), FP16) == 1 + 2 * 2 ** -10  # tie -> the even neighbour above
    assert round_to(np.float32(2.5), FP8_E5M2) == 2.5 and round_to(np.float32(2.75), FP8_E5M2) == 3.0
    assert round_to(np.float32(2.25), FP8_E5M2) == 2.0  # 2.0 = 1.00b·2, 2.5 = 1.01b·2: even is 2.0
    assert round_to(np.float32(464.0), FP8_E4M3) == 448.0  # tie between 448 (1.110b) and 480 (1.111b, NaN code)


def test_underflow_goes_through_the_subnormals_to_zero():
    tiny = FP16.min_subnormal
    x = np.array([tiny, tiny / 2, tiny * 0.51, tiny * 1.5, tiny * 2.5, FP16.min_normal - tiny / 4, -tiny / 4],
                 np.float32)
    expected = np.array([tiny, 0, tiny, 2 * tiny, 2 * tiny, FP16.min_normal, -0.0], np.float32)
    assert np.array_equal(round_to(x, FP16), expected)
    assert np.signbit(round_to(np.float32(-tiny / 4), FP16))


def test_overflow_inf_nan_or_saturate():
    big = np.array([1e5, -1e5, np.inf, -np.inf, np.nan], np.float32)
    assert_same(round_to(big, FP16), np.array([np.inf, -np.inf, np.inf, -np.inf, np.nan], np.float32))
    assert_same(round_to(big, FP8_E4M3), np.full(5, np.nan, np.float32))  # E4M3 has no inf
    assert_same(round_to(big, FP8_E4M3, saturate=True), np.array([448, -448, 448, -448, np.nan], np.float32))
    assert_same(round_to(big, FP8_E5M2, saturate=True), np.array([57344, -57344, 57344, -57344, np.nan], np.float32))
    assert round_to(np.float32(65519.0), FP16) == 65504.0 and round_to(np.float32(65520.0), FP16) == np.inf
    wide = np.array([np.inf, -np.inf, np.nan, 1e300, -1e-300])  # float64 input: the same rules
    assert_same(round_to(wide, FP8_E5M2), np.array([np.inf, -np.inf, np.nan, np.inf, -0.0]))
    assert_same(round_to(wide, FP8_E4M3, saturate=True), np.array([448, -448, np.nan, 448, -0.0]))


@settings(max_examples=300, deadline=None)
@given(x=st.floats(allow_nan=False, allow_infinity=False), fmt=st.sampled_from(list(FORMATS.values())),
       saturate=st.booleans())
def test_float64_input_matches_the_exact_oracle(x, fmt, saturate):
    got, expected = float(round_to(np.float64(x), fmt, saturate)), oracle(x, fmt, saturate)
    if math.isnan(expected):
        assert math.isnan(got)
    else:
        assert got == expected and math.copysign(1, got) == math.copysign(1, expected)


@settings(max_examples=200, deadline=None)
@given(x=st.floats(allow_nan=False, allow_infinity=False, min_value=-1e6, max_value=1e6),
       scale=st.sampled_from([1.0, 2.0 ** -14, 2.0 ** -24, 2.0 ** 15]))
def test_float64_input_is_rounded_once_like_numpy_float16(x, scale):
    x = np.float64(x * scale)
    with np.errstate(over="ignore"):
        assert_same(np.atleast_1d(round_to(x, FP16)), np.atleast_1d(x.astype(np.float16).astype(np.float64)))


def test_float64_is_not_double_rounded_through_float32():
    x = 1 + 2.0 ** -8 + 2.0 ** -40  # just above the BF16 tie 1 + 2^-8; via float32 it would become the tie
    assert round_to(np.float64(x), BF16) == 1 + 2.0 ** -7
    assert round_to(np.float64(x).astype(np.float32), BF16) == 1.0


def test_dtypes_shapes_and_fp32():
    x = np.random.default_rng(2).standard_normal((3, 4, 5))
    assert round_to(x, FP16).dtype == np.float64 and round_to(x, FP16).shape == (3, 4, 5)
    assert round_to(x.astype(np.float32), "bf16").dtype == np.float32
    assert round_to([1, 2, 3], FP16).dtype == np.float64
    assert round_to(np.arange(3, dtype=np.int16), FP16).dtype == np.float64
    assert isinstance(round_to(1.0, FP16), np.floating)
    assert np.array_equal(round_to(x, FP32), x.astype(np.float32).astype(np.float64))  # float64 -> FP32 = numpy's cast
    x32 = x.astype(np.float32)[:, ::2]  # non-contiguous input
    assert_same(round_to(x32, FP32), x32.copy())
    assert_same(round_to(x32, FP16), x32.astype(np.float16).astype(np.float32))
    assert round_to(np.empty((0, 3), np.float32), FP16).shape == (0, 3)


def test_bad_input():
    with pytest.raises(TypeError, match="real numbers"):
        round_to(np.array(["1.0"]), FP16)
    with pytest.raises(TypeError, match="real numbers"):
        round_to(np.array([1 + 1j]), FP16)
    with pytest.raises(TypeError, match="real numbers"):
        round_to(np.array([True]), FP16)
    with pytest.raises(ValueError, match="unknown format"):
        round_to(1.0, "fp12")

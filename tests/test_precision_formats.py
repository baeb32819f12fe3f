"""FloatFormat fields and properties, the registry, and the bit-level API (encode/decode, to_bits/from_bits,
classify), against the lecture's worked examples, numpy's float16 and ml_dtypes' formats."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mlsys_lib.precision import (BF16, FORMATS, FP8_E4M3, FP8_E5M2, FP16, FP32, FloatFormat, classify, decode,
                                 encode, from_bits, get_format, round_to, to_bits)

SMALL = [FP16, BF16, FP8_E4M3, FP8_E5M2]  # every code enumerable


def reference_dtype(fmt: FloatFormat) -> tuple[type, object]:
    """The reference dtype of fmt and its finfo: numpy's float16, ml_dtypes' others (skip without ml_dtypes)."""
    if fmt is FP16:
        return np.float16, np.finfo(np.float16)
    ml_dtypes = pytest.importorskip("ml_dtypes", reason="ml_dtypes (a dev dependency) provides the reference formats")
    dtype = {BF16: ml_dtypes.bfloat16, FP8_E4M3: ml_dtypes.float8_e4m3fn, FP8_E5M2: ml_dtypes.float8_e5m2}[fmt]
    return dtype, ml_dtypes.finfo(dtype)


def all_codes(fmt: FloatFormat) -> np.ndarray:
    return np.arange(1 << fmt.total_bits, dtype=np.min_scalar_type((1 << fmt.total_bits) - 1))


# -- the lecture's facts --------------------------------------------------------------------------------------

def test_lecture_fp16_example_is_minus_seven_not_minus_seven_point_one():
    # sign 1; exponent 10001 = 17, 17 - bias 15 = 2; mantissa 1100000000 = 0.5 + 0.25 -> -(1.75 · 2^2) = -7.0
    assert int("10001", 2) - FP16.bias == 2
    assert decode("1 10001 1100000000", "fp16") == -7.0 == -(1 + 0.5 + 0.25) * 2 ** 2
    assert encode(-7.0, FP16, sep=" ") == "1 10001 1100000000"
    assert encode(-7.1, FP16, sep=" ") == "1 10001 1100011010"  # -7.1 needs mantissa bits the example lacks


def test_lecture_bf16_example_two_point_five():
    # 2.5 = 1.25 · 2^1: exponent 1 + 127 = 128 = 10000000, mantissa .25 = 0100000
    assert encode(2.5, "bf16", sep=" ") == "0 10000000 0100000"
    assert encode(2.5, "bf16") == "0100000000100000"
    assert decode("0 10000000 0100000", "bf16") == 2.5


def test_smallest_fp32_subnormal_is_two_to_the_minus_149():
    assert FP32.min_subnormal == 2.0 ** -149 == float(np.finfo(np.float32).smallest_subnormal)
    assert decode("0 00000000 00000000000000000000001", "fp32") == 2.0 ** -149
    assert classify(2.0 ** -149, FP32) == "subnormal"
    assert round_to(np.float64(2.0 ** -150), FP32) == 0.0  # the tie between 0 and 2^-149 goes to even (0)
    assert round_to(np.float64(2.0 ** -150 * 1.5), FP32) == 2.0 ** -149


# -- formats and their properties -----------------------------------------------------------------------------

@pytest.mark.parametrize("fmt", SMALL, ids=lambda f: f.name)
def test_properties_match_the_reference_finfo(fmt):
    dtype, info = reference_dtype(fmt)
    assert fmt.total_bits == 8 * np.dtype(dtype).itemsize
    assert fmt.max == float(info.max)
    assert fmt.min_normal == float(info.smallest_normal)
    assert fmt.min_subnormal == float(info.smallest_subnormal)
    assert fmt.eps == float(info.eps)


def test_fields_and_named_values():
    assert (FP32.exponent_bits, FP32.mantissa_bits, FP32.bias) == (8, 23, 127)
    assert (FP16.exponent_bits, FP16.mantissa_bits, FP16.bias) == (5, 10, 15)
    assert (BF16.exponent_bits, BF16.mantissa_bits, BF16.bias) == (8, 7, 127)
    assert (FP8_E4M3.exponent_bits, FP8_E4M3.mantissa_bits, FP8_E4M3.bias, FP8_E4M3.has_inf) == (4, 3, 7, False)
    assert (FP8_E5M2.exponent_bits, FP8_E5M2.mantissa_bits, FP8_E5M2.bias, FP8_E5M2.has_inf) == (5, 2, 15, True)
    assert all(f.sign_bits == 1 for f in FORMATS.values())
    assert FP16.max == 65504 and FP8_E4M3.max == 448 and FP8_E5M2.max == 57344
    assert FP32.max == float(np.finfo(np.float32).max) and FP32.eps == float(np.finfo(np.float32).eps)


def test_registry_is_case_insensitive_and_names_the_known_formats():
    assert get_format("FP16") is FP16 and get_format("bf16") is BF16 and get_format(FP8_E4M3) is FP8_E4M3
    with pytest.raises(ValueError, match="unknown format 'fp64'.*fp32, fp16, bf16, fp8_e4m3, fp8_e5m2"):
        get_format("fp64")
    with pytest.raises(TypeError, match="format name"):
        get_format(16)


@pytest.mark.parametrize("kwargs, message", [
    (dict(exponent_bits=9, mantissa_bits=3, bias=7), "exponent_bits must be in"),
    (dict(exponent_bits=1, mantissa_bits=3, bias=0), "exponent_bits must be in"),
    (dict(exponent_bits=4, mantissa_bits=0, bias=7), "mantissa_bits must be in"),
    (dict(exponent_bits=4, mantissa_bits=24, bias=7), "mantissa_bits must be in"),
    (dict(exponent_bits=8, mantissa_bits=3, bias=200), "within float32"),
    (dict(exponent_bits=8, mantissa_bits=3, bias=100), "within float32"),
])
def test_invalid_formats_are_rejected(kwargs, message):
    with pytest.raises(ValueError, match=message):
        FloatFormat("bad", **kwargs)
    with pytest.raises(TypeError, match="must be an int"):
        FloatFormat("bad", exponent_bits=4.0, mantissa_bits=3, bias=7)


def test_a_custom_format_works_through_the_same_code():
    e3m2 = FloatFormat("fp6_e3m2", exponent_bits=3, mantissa_bits=2, bias=3)  # IEEE-like 6-bit float
    values = from_bits(np.arange(64), e3m2)
    finite = values[np.isfinite(values)]
    assert e3m2.max == 14.0 == finite.max() and e3m2.min_subnormal == 0.0625
    assert np.array_equal(round_to(finite, e3m2), finite)
    assert np.array_equal(to_bits(values, e3m2)[~np.isnan(values)], np.arange(64)[~np.isnan(values)])
    assert to_bits(values, e3m2).dtype == np.uint8


# -- codes: every code of every small format ------------------------------------------------------------------

@pytest.mark.parametrize("fmt", SMALL, ids=lambda f: f.name)
def test_every_code_decodes_like_the_reference_and_encodes_back(fmt):
    codes = all_codes(fmt)
    values = from_bits(codes, fmt)
    reference = codes.view(reference_dtype(fmt)[0]).astype(np.float32)
    assert values.dtype == np.float32
    assert np.array_equal(values, reference, equal_nan=True)
    nan = np.isnan(values)
    assert np.array_equal(to_bits(values, fmt)[~nan], codes[~nan])
    assert np.all(np.isnan(from_bits(to_bits(values[nan], fmt), fmt)))


@pytest.mark.parametrize("fmt", SMALL, ids=lambda f: f.name)
def test_classify_every_code_like_numpy(fmt):
    values = from_bits(all_codes(fmt), fmt).astype(np.float64)
    expected = np.select([np.isnan(values), np.isinf(values), values == 0, np.abs(values) < fmt.min_normal],
                         ["nan", "inf", "zero", "subnormal"], "normal")
    step = max(1, values.size // 4096)  # all 256 FP8 codes; every 16th FP16/BF16 code
    for code in range(0, values.size, step):
        assert classify(format(code, f"0{fmt.total_bits}b"), fmt) == expected[code]


def test_special_values_of_each_convention():
    assert decode("0 11111 0000000000", "fp16") == np.inf and decode("1 11111 00", "fp8_e5m2") == -np.inf
    assert np.isnan(decode("0 11111 01", "fp8_e5m2")) and classify("0 11111 01", "fp8_e5m2") == "nan"
    # E4M3: no infinities; S.1111.111 is the only NaN, S.1111.110 is the largest number
    assert classify("0 1111 111", "fp8_e4m3") == "nan" and classify("1 1111 111", "fp8_e4m3") == "nan"
    assert decode("0 1111 110", "fp8_e4m3") == 448.0 and classify("0 1111 000", "fp8_e4m3") == "normal"
    assert decode("0 1111 000", "fp8_e4m3") == 256.0
    assert encode(np.inf, "fp8_e4m3") == "01111111" and encode(np.inf, "fp8_e4m3", saturate=True) == "01111110"
    assert encode(1000.0, "fp8_e4m3", sep=" ") == "0 1111 111"
    assert encode(np.nan, "fp16", sep=" ") == "0 11111 1000000000"
    assert encode(-0.0, "fp16") == "1000000000000000" and classify(-0.0, "fp16") == "zero"


@pytest.mark.parametrize("value, fmt, cls", [
    (1e-6, "fp16", "subnormal"), (1e-9, "fp16", "zero"), (1e5, "fp16", "inf"), (6e-5, "fp16", "subnormal"),
    (6.2e-5, "fp16", "normal"), (1e-39, "bf16", "subnormal"), (1e38, "bf16", "normal"), (500.0, "fp8_e4m3", "nan"),
    (1e5, "fp8_e5m2", "inf"), (9e-4, "fp8_e4m3", "zero"), (3e-3, "fp8_e4m3", "subnormal"), (np.nan, "fp32", "nan"),
])
def test_classify_values_once_rounded_into_the_format(value, fmt, cls):
    assert classify(value, fmt) == cls


@settings(max_examples=200, deadline=None)
@given(x=st.floats(width=32), fmt=st.sampled_from(list(FORMATS.values())))
def test_encode_then_decode_gives_the_rounded_value(x, fmt):
    expected = float(round_to(np.float32(x), fmt))
    bits = encode(x, fmt)
    assert len(bits) == fmt.total_bits and set(bits) <= {"0", "1"}
    assert encode(x, fmt, sep=" ").replace(" ", "") == bits
    got = decode(bits, fmt)
    assert (np.isnan(got) and np.isnan(expected)) or (got == expected and np.signbit(got) == np.signbit(expected))


# -- bad input ------------------------------------------------------------------------------------------------

def test_decode_rejects_wrong_lengths_and_characters():
    with pytest.raises(ValueError, match="exactly 16 bits"):
        decode("1 10001 110000000", "fp16")
    with pytest.raises(ValueError, match="exactly 8 bits"):
        decode("0 1111 1111", "fp8_e4m3")
    with pytest.raises(ValueError, match="exactly 16 bits"):
        decode("1 10001 11000000002", "fp16")
    with pytest.raises(ValueError, match="exactly 32 bits"):
        classify("0" * 16, "fp32")
    with pytest.raises(TypeError, match="bit string"):
        decode(0b1100, "fp8_e5m2")


def test_array_api_bad_input():
    with pytest.raises(TypeError, match="integers"):
        from_bits(np.array([1.5]), "fp16")
    with pytest.raises(ValueError, match=r"\[0, 2\^8\)"):
        from_bits(np.array([256]), "fp8_e5m2")
    with pytest.raises(ValueError, match=r"\[0, 2\^16\)"):
        from_bits(np.array([-1]), "fp16")
    with pytest.raises(ValueError, match="scalar"):
        encode(np.ones(2), "fp16")
    with pytest.raises(TypeError, match="real numbers"):
        to_bits(np.array(["a"]), "fp16")

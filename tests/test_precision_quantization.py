"""Linear quantization (the lecture's S and Z; per tensor, channel, group), the integer matmul with int32
accumulators, k-means (codebook) quantization with centroid fine-tuning, and the error metrics."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from mlsys_lib.precision import (QuantizedTensor, centroid_gradients, dequantize, finetune_centroids,
                                 int32_accumulate, integer_range, kmeans_quantize, linear_quant_params,
                                 max_abs_error, mse, quantize, quantized_matmul, sqnr_db)

examples = settings(max_examples=60, deadline=None)


def channel_varying(rng: np.random.Generator, shape=(8, 64)) -> np.ndarray:
    """Rows whose ranges differ by orders of magnitude (as the channels of a weight matrix do)."""
    return rng.standard_normal(shape) * np.logspace(-2, 1, shape[0])[:, None]


# -- S, Z and integer ranges ----------------------------------------------------------------------------------

def test_integer_ranges_two_complement_and_unsigned():
    assert integer_range(8) == (-128, 127) and integer_range(8, signed=False) == (0, 255)
    assert integer_range(2) == (-2, 1) and integer_range(16) == (-32768, 32767)


def test_lecture_formulas_for_scale_and_zero_point():
    # r in [-1, 2], 8-bit signed: S = 3 / 255, Z = round(-128 - (-1) / S) = round(-128 + 85) = -43
    scale, zero_point = linear_quant_params(-1.0, 2.0, bits=8)
    assert scale == pytest.approx(3 / 255) and zero_point == -43 and zero_point.dtype == np.int32
    scale, zero_point = linear_quant_params(-1.0, 2.0, bits=8, symmetric=True)
    assert scale == pytest.approx(2 / 127) and zero_point == 0
    scale, zero_point = linear_quant_params(0.5, 2.0, bits=4, signed=False)  # widened to [0, 2]: 0 stays exact
    assert scale == pytest.approx(2 / 15) and zero_point == 0
    assert linear_quant_params(0.0, 0.0)[0] == 1.0  # an all-zero range gets a usable scale


def test_zero_is_exact_and_storage_dtypes():
    r = np.array([[-1.3, 0.0, 2.7], [0.0, 0.5, -0.2]])
    for bits, signed, dtype in [(8, True, np.int8), (8, False, np.uint8), (4, True, np.int8), (12, False, np.uint16),
                                (16, True, np.int16)]:
        qt = quantize(r, bits, signed=signed)
        assert qt.q.dtype == dtype and qt.q.shape == r.shape
        assert np.all(dequantize(qt)[r == 0] == 0)


@examples
@given(r=hnp.arrays(np.float64, hnp.array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=6),
                    elements=st.floats(-1e3, 1e3)),
       bits=st.integers(2, 16), signed=st.booleans(), symmetric=st.booleans(), granularity=st.sampled_from(
           ["tensor", "channel", "group"]), data=st.data())
def test_error_within_half_a_step_for_values_inside_the_range(r, bits, signed, symmetric, granularity, data):
    if symmetric and not signed:
        r = np.abs(r)  # symmetric unsigned quantization is for non-negative tensors
    axis = data.draw(st.integers(-r.ndim, r.ndim - 1)) if granularity != "tensor" else None
    group = None
    if granularity == "group":
        length = r.shape[axis]
        group = data.draw(st.sampled_from([g for g in range(1, length + 1) if length % g == 0]))
    qt = quantize(r, bits, signed=signed, symmetric=symmetric, axis=axis, group_size=group)
    step = np.broadcast_to(qt.scale, qt.grouped_shape).reshape(r.shape)
    error = np.abs(dequantize(qt) - r)
    assert np.all(error <= step / 2 * (1 + 1e-9) + 1e-12 * np.abs(r))
    q_min, q_max = integer_range(bits, signed)
    assert qt.q.min() >= q_min and qt.q.max() <= q_max


def test_per_channel_beats_per_tensor_when_channel_ranges_differ():
    rng = np.random.default_rng(0)
    r = channel_varying(rng)
    per_tensor, per_channel = dequantize(quantize(r, 4)), dequantize(quantize(r, 4, axis=0))
    per_group = dequantize(quantize(r, 4, axis=1, group_size=16))
    assert mse(r, per_group) <= mse(r, per_channel) <= mse(r, per_tensor)
    for row in range(r.shape[0]):  # row by row never worse (up to the rounding of Z) ...
        assert mse(r[row], per_channel[row]) <= mse(r[row], per_tensor[row]) * 1.01 + 1e-12
    # ... and the small-range rows, which a single scale flattens to ~0, are kept
    assert sqnr_db(r[0], per_tensor[0]) < 3 < 15 < sqnr_db(r[0], per_channel[0])


def test_granularity_parameter_shapes():
    r = np.random.default_rng(1).standard_normal((4, 6, 8))
    assert quantize(r).scale.shape == (1, 1, 1)
    assert quantize(r, axis=1).scale.shape == (1, 6, 1)
    qt = quantize(r, axis=-1, group_size=4)
    assert qt.grouped_shape == (4, 6, 2, 4) and qt.scale.shape == (4, 6, 2, 1) and qt.q.shape == r.shape


def test_sqnr_grows_about_six_db_per_bit():
    r = np.random.default_rng(2).uniform(-1, 1, 100_000)
    sqnr = [sqnr_db(r, dequantize(quantize(r, bits))) for bits in (4, 6, 8)]
    assert np.allclose(np.diff(sqnr), 2 * 6.02, atol=0.5)


@pytest.mark.parametrize("bits", [0, 1, 17, 32])
def test_bit_widths_outside_2_to_16_are_rejected(bits):
    with pytest.raises(ValueError, match=r"bits must be in \[2, 16\]"):
        quantize(np.ones(3), bits)
    with pytest.raises(ValueError, match=r"bits must be in \[2, 16\]"):
        kmeans_quantize(np.ones(3), bits)
    with pytest.raises(ValueError, match=r"bits must be in \[2, 16\]"):
        integer_range(bits)


def test_quantize_bad_input():
    with pytest.raises(TypeError, match="bits must be an int"):
        quantize(np.ones(3), 8.0)
    with pytest.raises(ValueError, match="finite"):
        quantize(np.array([1.0, np.nan]))
    with pytest.raises(ValueError, match="non-empty"):
        quantize(np.array([]))
    with pytest.raises(ValueError, match="axis 2 is out of range"):
        quantize(np.ones((2, 3)), axis=2)
    with pytest.raises(ValueError, match="divide the length 6"):
        quantize(np.ones((2, 6)), axis=1, group_size=4)
    with pytest.raises(ValueError, match="needs an axis"):
        quantize(np.ones((2, 6)), group_size=2)
    with pytest.raises(TypeError, match="real numbers"):
        quantize(np.array(["x"]))
    with pytest.raises(ValueError, match="r_min must be <= r_max"):
        linear_quant_params(1.0, 0.0)
    with pytest.raises(TypeError, match="QuantizedTensor or KMeansQuantized"):
        dequantize(np.ones(3))


# -- integer matmul -------------------------------------------------------------------------------------------

@pytest.fixture
def operands():
    rng = np.random.default_rng(3)
    a = rng.uniform(-0.5, 2.0, (5, 40))  # activations: affine, per tensor
    w = channel_varying(rng, (7, 40)).T  # weights (K, N): columns (output channels) of different ranges
    return a, w, quantize(a, 8), quantize(w, 8, symmetric=True, axis=1)


def test_int32_accumulators_equal_the_product_of_the_dequantized_inputs(operands):
    _, _, qa, qw = operands
    acc = int32_accumulate(qa, qw)
    assert acc.dtype == np.int32 and acc.shape == (5, 7)
    reference = (qa.q.astype(np.int64) - qa.zero_point) @ (qw.q.astype(np.int64) - qw.zero_point)
    assert np.array_equal(acc, reference)
    assert np.allclose(qa.scale * qw.scale * acc, dequantize(qa) @ dequantize(qw), rtol=1e-12, atol=1e-12)


def test_quantized_matmul_within_its_error_bound(operands):
    a, w, qa, qw = operands
    exact = dequantize(qa) @ dequantize(qw)
    s_y, z_y = linear_quant_params(exact.min(), exact.max(), bits=8)
    qy = quantized_matmul(qa, qw, float(s_y), int(z_y))
    assert qy.q.dtype == np.int8 and qy.q.shape == (5, 7)
    assert max_abs_error(exact, dequantize(qy)) <= s_y / 2 * (1 + 1e-9)  # requantization: half an output step
    # against the float product of the unquantized inputs, the input errors (≤ S/2 each) add up over K
    da, dw = qa.scale / 2, qw.scale / 2
    bound = np.abs(a) @ np.broadcast_to(dw, w.shape) + da * np.abs(w).sum(0) + a.shape[1] * da * dw + s_y / 2
    assert np.all(np.abs(a @ w - dequantize(qy)) <= bound)


def test_accumulation_wraps_like_int32_hardware_yet_ends_exact():
    rng = np.random.default_rng(4)
    k = 500
    a = np.concatenate([[[-1.0]], rng.uniform(0.9, 1.0, (1, k - 1))], axis=1)  # 16-bit unsigned: q ≈ 65000, Z = 32768
    qa = quantize(a, 16, signed=False)
    qb = quantize(rng.uniform(0.9, 1.0, (k, 3)), 8, symmetric=True)  # q ≈ 120, Z = 0
    assert (qa.q.astype(np.int64) @ qb.q.astype(np.int64)).max() > np.iinfo(np.int32).max  # q_A q_B wraps...
    reference = (qa.q.astype(np.int64) - qa.zero_point) @ (qb.q.astype(np.int64) - qb.zero_point)
    assert np.abs(reference).max() <= np.iinfo(np.int32).max  # ...but the centred sum fits
    assert np.array_equal(int32_accumulate(qa, qb), reference)


def test_accumulator_overflow_is_refused():
    k = 140_000  # K · 127 · 127 > 2^31
    qa, qb = quantize(np.ones((1, k)), 8, symmetric=True), quantize(np.ones((k, 1)), 8, symmetric=True)
    with pytest.raises(ValueError, match="overflow int32"):
        int32_accumulate(qa, qb)


def test_quantized_matmul_bad_input(operands):
    a, w, qa, qw = operands
    with pytest.raises(ValueError, match="inner dimensions"):
        int32_accumulate(qa, quantize(np.ones((3, 2))))
    with pytest.raises(ValueError, match="must not vary along the summed axis"):
        int32_accumulate(qa, quantize(w, 8, axis=0))
    with pytest.raises(ValueError, match="must not vary along the summed axis"):
        int32_accumulate(quantize(a, 8, axis=1), qw)
    with pytest.raises(ValueError, match="per tensor or per channel"):
        int32_accumulate(quantize(a, 8, axis=1, group_size=8), qw)
    with pytest.raises(ValueError, match="2-D"):
        int32_accumulate(quantize(np.ones(4)), qw)
    with pytest.raises(TypeError, match="QuantizedTensor"):
        int32_accumulate(a, qw)
    with pytest.raises(ValueError, match="out_scale must be > 0"):
        quantized_matmul(qa, qw, 0.0, 0)
    with pytest.raises(ValueError, match=r"out_zero_point must lie in \[-128, 127\]"):
        quantized_matmul(qa, qw, 0.1, 200)


# -- k-means quantization -------------------------------------------------------------------------------------

def clustered(rng: np.random.Generator, n: int = 4000) -> np.ndarray:
    centres = np.array([-3.0, -2.6, 0.1, 4.0])  # uneven: a uniform 2-bit grid cannot hit them
    return (rng.choice(centres, n) + rng.normal(0, 0.05, n)).reshape(40, -1)


def test_kmeans_two_bits_gives_four_values_and_beats_linear_on_clustered_data():
    w = clustered(np.random.default_rng(5))
    kq = kmeans_quantize(w, bits=2)
    approx = dequantize(kq)
    assert kq.codebook.shape == (4,) and kq.indices.dtype == np.uint8 and kq.indices.shape == w.shape
    assert len(np.unique(approx)) <= 4
    assert np.allclose(np.sort(kq.codebook), [-3.0, -2.6, 0.1, 4.0], atol=0.02)
    assert mse(w, approx) < mse(w, dequantize(quantize(w, 2))) / 10
    again = kmeans_quantize(w, bits=2)  # deterministic: linear initialisation, no random restarts
    assert np.array_equal(again.codebook, kq.codebook) and np.array_equal(again.indices, kq.indices)


def test_kmeans_assigns_every_weight_to_its_nearest_centroid():
    w = np.random.default_rng(6).standard_normal(500)
    kq = kmeans_quantize(w, bits=3)
    distance = np.abs(w[:, None] - kq.codebook[None, :])
    assert np.allclose(distance[np.arange(w.size), kq.indices], distance.min(axis=1))
    assert kmeans_quantize(w, bits=9).indices.dtype == np.uint16


def test_centroid_gradients_group_the_weight_gradients_by_cluster():
    rng = np.random.default_rng(7)
    kq = kmeans_quantize(clustered(rng), bits=2)
    grad = rng.standard_normal(kq.indices.shape)
    expected = [grad[kq.indices == c].sum() for c in range(4)]
    assert np.allclose(centroid_gradients(kq, grad), expected)
    tuned = finetune_centroids(kq, grad, lr=0.01)
    assert np.allclose(tuned.codebook, kq.codebook - 0.01 * np.array(expected))
    assert tuned.indices is kq.indices


def test_finetuning_the_codebook_reduces_the_loss():
    """L = ½ Σ (ŵ - target)²: the centroids move to the mean target of their cluster (Deep Compression's retraining)."""
    rng = np.random.default_rng(8)
    w = clustered(rng)
    target = w + rng.normal(0.3, 0.05, w.shape)
    kq = kmeans_quantize(w, bits=2)
    losses = []
    for _ in range(30):
        residual = dequantize(kq) - target
        losses.append(0.5 * np.sum(residual ** 2))
        kq = finetune_centroids(kq, residual, lr=5e-4)
    assert losses[-1] < losses[0] / 5 and np.all(np.diff(losses) <= 0)


def test_kmeans_bad_input():
    with pytest.raises(ValueError, match="finite"):
        kmeans_quantize(np.array([1.0, np.inf]))
    with pytest.raises(ValueError, match="max_iterations"):
        kmeans_quantize(np.ones(3), max_iterations=0)
    kq = kmeans_quantize(np.arange(8.0))
    with pytest.raises(ValueError, match=r"weights' shape \(8,\)"):
        centroid_gradients(kq, np.ones(7))
    with pytest.raises(ValueError, match="lr must be > 0"):
        finetune_centroids(kq, np.ones(8), lr=0)


# -- metrics --------------------------------------------------------------------------------------------------

def test_error_metrics():
    r, r_hat = np.array([1.0, -2.0, 3.0, 0.0]), np.array([1.5, -2.0, 2.0, 0.0])
    assert mse(r, r_hat) == pytest.approx((0.25 + 1) / 4)
    assert max_abs_error(r, r_hat) == 1.0
    assert sqnr_db(r, r_hat) == pytest.approx(10 * np.log10(14 / 1.25))
    assert sqnr_db(r, r) == np.inf
    with pytest.raises(ValueError, match="same shape"):
        mse(np.ones(3), np.ones(4))
    with pytest.raises(ValueError, match="empty"):
        max_abs_error(np.ones(0), np.ones(0))


def test_quantized_tensor_is_a_plain_record():
    qt = quantize(np.arange(6.0).reshape(2, 3), 8, axis=0)
    assert isinstance(qt, QuantizedTensor) and qt.bits == 8 and qt.signed
    assert np.allclose(qt.dequantize(), np.arange(6.0).reshape(2, 3), atol=qt.scale.max() / 2)

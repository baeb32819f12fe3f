"""Mixed precision: vanishing FP16 updates vs FP32 master weights, the cast op, the loss scalers'
skip/backoff/growth sequence, and the seeded training demonstration (pure FP16 fails, scaling fixes it)."""

from __future__ import annotations

import numpy as np
import pytest

from mlsys_lib.autodiff import Tensor
from mlsys_lib.precision import (FP16, MODES, DynamicLossScaler, StaticLossScaler, cast, round_to, spiral_data,
                                 train_mixed_precision)


def test_an_update_vanishes_in_fp16_but_survives_with_fp32_master_weights():
    w16 = w32 = np.float32(1.0)
    for _ in range(100):
        w16 = round_to(w16 - np.float32(1e-4), FP16)  # FP16 spacing at 1.0 is 2^-10 ≈ 9.8e-4: 1e-4 < half of it
        w32 = w32 - np.float32(1e-4)  # FP32 master weight
    assert w16 == 1.0
    assert w32 == pytest.approx(0.99, abs=1e-5)
    assert round_to(w32, FP16) == pytest.approx(0.99, abs=FP16.eps)  # the FP16 compute copy moved too


def test_cast_rounds_forward_and_backward():
    x = Tensor(np.array([1.0001, 3e-8, 1e5, -2.0], np.float32), requires_grad=True)
    y = cast(x, "fp16")
    assert np.array_equal(y.numpy(), round_to(x.numpy(), FP16)) and y.dtype == np.float32
    (y * Tensor(np.array([1e-8, 1.0, 1e-3, 3.0000001], np.float32))).sum().backward()
    assert np.array_equal(x.grad.numpy(), round_to(np.array([1e-8, 1.0, 1e-3, 3.0000001], np.float32), FP16))
    assert x.grad.numpy()[0] == 0.0  # 1e-8 < 2^-25: the gradient underflows in FP16


def test_loss_scaling_keeps_a_small_gradient_from_underflowing():
    def gradient(scaler):
        x = Tensor(np.ones(4, np.float32), requires_grad=True)
        loss = (cast(x, "fp16") * np.float32(1e-8)).sum()  # ∂loss/∂x = 1e-8, below FP16's smallest subnormal 6e-8
        (loss if scaler is None else scaler.scale_loss(loss)).backward()
        g = x.grad.numpy().copy()
        assert scaler is None or scaler.unscale([g])
        return g

    assert np.all(gradient(None) == 0)
    assert np.allclose(gradient(StaticLossScaler(2.0 ** 16)), 1e-8, rtol=FP16.eps)


def test_unscale_divides_in_place_and_reports_overflow():
    scaler = StaticLossScaler(8.0)
    grads = [np.array([8.0, 16.0]), np.array([[4.0]])]
    assert scaler.unscale(grads) is True and grads[0].tolist() == [1.0, 2.0] and grads[1].item() == 0.5
    assert scaler.unscale([np.array([1.0]), np.array([np.inf])]) is False
    assert scaler.unscale([np.array([np.nan])]) is False


def test_static_scaler_skips_overflowing_steps_and_keeps_its_scale():
    scaler = StaticLossScaler(1024.0)
    assert [scaler.update(ok) for ok in (True, False, True)] == [True, False, True]
    assert scaler.scale == 1024.0 and scaler.skipped_steps == 1


def test_dynamic_scaler_backoff_skip_and_growth_sequence():
    scaler = DynamicLossScaler(init_scale=2.0 ** 10, growth_interval=3)
    pattern = [True, True, True,  # 3 good steps: grow to 2^11
               True, False,  # overflow: skip, back off to 2^10, count restarts
               False,  # overflow again: 2^9
               True, True, True,  # grow to 2^10
               True, True]
    steps, scales = [], []
    for finite in pattern:
        steps.append(scaler.update(finite))
        scales.append(scaler.scale)
    assert steps == [True, True, True, True, False, False, True, True, True, True, True]
    assert [np.log2(s) for s in scales] == [10, 10, 11, 11, 10, 9, 9, 9, 10, 10, 10]
    assert scaler.skipped_steps == 2 and scaler.good_steps == 2


@pytest.mark.parametrize("kwargs, message", [
    (dict(init_scale=0.0), "scale must be > 0"), (dict(growth_factor=1.0), "growth_factor"),
    (dict(backoff_factor=1.0), "backoff_factor"), (dict(growth_interval=0), "growth_interval"),
])
def test_dynamic_scaler_bad_settings(kwargs, message):
    with pytest.raises(ValueError, match=message):
        DynamicLossScaler(**kwargs)


@pytest.fixture(scope="module")
def curves():
    return {mode: train_mixed_precision(mode) for mode in MODES}


def test_pure_fp16_fails_and_master_weights_with_scaling_match_fp32(curves):
    fp32, fp16, scaled = (curves[m].losses for m in MODES)
    assert fp32[0] == pytest.approx(fp16[0], rel=1e-3) == pytest.approx(scaled[0], rel=1e-3)
    progress = fp32[0] - fp32[-1]
    assert progress > 0.2  # FP32 learns...
    assert fp16[0] - fp16[-1] < 0.4 * progress  # ...pure FP16 keeps well under half of that: its updates round away
    assert np.allclose(scaled, fp32, atol=2e-3)  # master weights + loss scaling follow the FP32 curve
    assert curves["fp16_scaled"].scales[0] == 2.0 ** 16 and np.all(curves["fp32"].scales == 1)


def test_training_is_deterministic():
    x, labels = spiral_data(5, seed=3)
    a = train_mixed_precision("fp16_scaled", x, labels, sizes=(2, 8, 3), steps=5, lr=1e-3,
                              scaler=DynamicLossScaler(2.0 ** 30, growth_interval=2))
    b = train_mixed_precision("fp16_scaled", x, labels, sizes=(2, 8, 3), steps=5, lr=1e-3,
                              scaler=DynamicLossScaler(2.0 ** 30, growth_interval=2))
    assert np.array_equal(a.losses, b.losses) and np.array_equal(a.scales, b.scales)
    assert a.skipped_steps >= 1 and a.scales[1] < a.scales[0]  # 2^30 overflows FP16: skip and back off
    assert len(a.losses) == 5 and a.mode == "fp16_scaled"


def test_train_bad_arguments():
    with pytest.raises(ValueError, match="mode must be one of"):
        train_mixed_precision("bf16")
    with pytest.raises(ValueError, match="only in mode 'fp16_scaled'"):
        train_mixed_precision("fp16", scaler=StaticLossScaler())
    with pytest.raises(ValueError, match="steps must be >= 1"):
        train_mixed_precision("fp32", steps=0)
    with pytest.raises(ValueError, match="both x and labels"):
        train_mixed_precision("fp32", x=np.zeros((4, 2), np.float32))

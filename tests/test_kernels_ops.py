"""The CUDA kernels against numpy, on sizes that are not multiples of the block, plus input checking.

Every kernel runs once, instrumented: the same run checks the result, that the kernel is free of
shared-memory races and out-of-bounds accesses, and that the global traffic the simulator counted
is the traffic the plan's formula models (what the roofline uses on a GPU).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from mlsys_lib.kernels import (attention_fused, attention_naive, conv1d_naive, conv1d_shared, elementwise_map,
                               instrument, matmul_naive, matmul_register_blocked, matmul_tiled)
from mlsys_lib.testing.guard import ReferenceUsedError, reference_guard


def f32(rng: np.random.Generator, *shape: int) -> np.ndarray:
    return rng.standard_normal(shape).astype(np.float32)


def run_checked(op, *args, **kwargs) -> np.ndarray:
    """Run ``op`` instrumented; assert race-free, in bounds, counted traffic == modeled; return the result."""
    plan = op.plan(*args, **kwargs)
    with instrument() as report:
        out = plan.run()
    assert report.ok, report.summary()
    assert report.global_bytes == plan.modeled_bytes, report.summary()
    return out


def attention_reference(Q, K, V, causal):
    S = Q.astype(np.float64) @ K.T.astype(np.float64) / math.sqrt(Q.shape[1])
    if causal:
        S[np.arange(K.shape[0])[None, :] > np.arange(Q.shape[0])[:, None]] = -np.inf
    P = np.exp(S - S.max(axis=1, keepdims=True))
    return (P / P.sum(axis=1, keepdims=True)) @ V


def test_elementwise_map_any_shape():
    rng = np.random.default_rng(0)
    x = f32(rng, 3, 37)  # 111 elements, 4 blocks of 32
    out = run_checked(elementwise_map, lambda v: 2.0 * v * v - 1.0, x, block=32)
    assert out.shape == x.shape and out.dtype == np.float32
    np.testing.assert_allclose(out, 2 * x * x - 1, rtol=1e-6)
    np.testing.assert_allclose(elementwise_map(lambda v: math.tanh(v), x[:, :5], block=8), np.tanh(x[:, :5]), rtol=1e-6)


@pytest.mark.parametrize("op", [conv1d_naive, conv1d_shared])
@pytest.mark.parametrize("n, width, block", [(45, 3, 16), (50, 1, 16), (40, 20, 8), (7, 7, 4)])
def test_conv1d_matches_numpy(op, n, width, block):
    rng = np.random.default_rng(n * width)
    x, w = f32(rng, n), f32(rng, width)
    out = run_checked(op, x, w, block=block)
    np.testing.assert_allclose(out, np.correlate(x, w, mode="valid"), rtol=1e-5, atol=1e-5)


def test_conv1d_is_the_lectures_window_average():
    x = np.random.default_rng(1).random(20, dtype=np.float32)
    expected = (x[:-2] + x[1:-1] + x[2:]) / 3
    np.testing.assert_allclose(conv1d_shared(x, np.full(3, 1 / 3, np.float32), block=8), expected, rtol=1e-6)


@pytest.mark.parametrize("op, params", [(matmul_naive, {"block": 4}), (matmul_tiled, {"tile": 4}),
                                        (matmul_tiled, {"tile": 3}), (matmul_register_blocked, {"v": 3, "block": 2}),
                                        (matmul_register_blocked, {"v": 1, "block": 4})])
def test_matmul_matches_numpy(op, params):
    rng = np.random.default_rng(2)
    A, B = f32(rng, 13, 7), f32(rng, 7, 10)
    np.testing.assert_allclose(run_checked(op, A, B, **params), A @ B, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("op, params", [(attention_naive, {"block": 4}),
                                        (attention_fused, {"block_q": 8, "block_k": 5})])
def test_attention_matches_numpy(op, params, causal):
    rng = np.random.default_rng(3)
    Q, K, V = f32(rng, 19, 5), f32(rng, 23, 5), f32(rng, 23, 3)
    np.testing.assert_allclose(run_checked(op, Q, K, V, causal=causal, **params),
                               attention_reference(Q, K, V, causal), rtol=1e-5, atol=1e-5)


def test_fused_attention_more_queries_than_keys_and_large_scores():
    rng = np.random.default_rng(4)
    Q, K, V = 8 * f32(rng, 12, 4), 8 * f32(rng, 7, 4), f32(rng, 7, 2)  # scores ~ 30: exp would overflow unshifted
    for causal in (False, True):
        out = run_checked(attention_fused, Q, K, V, causal=causal, block_q=4, block_k=3)
        np.testing.assert_allclose(out, attention_reference(Q, K, V, causal), rtol=1e-4, atol=1e-5)


def test_plan_describes_the_launch_without_running_it():
    A, B = np.ones((13, 7), np.float32), np.ones((7, 10), np.float32)
    plan = matmul_tiled.plan(A, B, tile=4)
    (step,) = plan.steps
    assert (step.grid, step.block) == ((3, 4), (4, 4))
    assert plan.flops == 2 * 13 * 7 * 10
    assert matmul_tiled.__name__ == "matmul_tiled" and "shared-memory tiles" in matmul_tiled.__doc__


def test_reference_guard_catches_a_call_through_the_host_wrapper():
    A = np.ones((2, 2), np.float32)
    with reference_guard(matmul_tiled.plan), pytest.raises(ReferenceUsedError, match="matmul_tiled"):
        matmul_tiled(A, A)


GOOD = np.ones((4, 4), np.float32)


@pytest.mark.parametrize("call, error, message", [
    (lambda: matmul_naive(GOOD.astype(np.float64), GOOD), TypeError, "A must have dtype float32, got float64"),
    (lambda: matmul_tiled(GOOD, np.ones((3, 4), np.float32)), ValueError, r"A's columns to match B's rows.*\(3, 4\)"),
    (lambda: matmul_tiled(GOOD.tolist(), GOOD), TypeError, "A must be a numpy.ndarray, got list"),
    (lambda: matmul_tiled(GOOD, GOOD, tile=33), ValueError, "1089 threads per block; a CUDA block holds at most 1024"),
    (lambda: matmul_tiled(GOOD, GOOD, tile=0), ValueError, "tile must be at least 1"),
    (lambda: matmul_register_blocked(GOOD, GOOD, v=2.0), TypeError, "v must be an int"),
    (lambda: matmul_naive(np.ones(4, np.float32), GOOD), ValueError, r"A must have 2 dimension\(s\), got shape \(4,\)"),
    (lambda: matmul_naive(np.ones((0, 4), np.float32), GOOD), ValueError, "must not be empty"),
    (lambda: conv1d_shared(np.ones(3, np.float32), np.ones(4, np.float32)), ValueError, "width 4 is longer than"),
    (lambda: conv1d_naive(np.ones(8, np.float32), np.ones(2, np.int32)), TypeError, "w must have dtype float32"),
    (lambda: conv1d_shared(np.ones(7000, np.float32), np.ones(7000, np.float32)), ValueError, "56508 bytes of shared"),
    (lambda: elementwise_map(math.tanh, GOOD), TypeError, "fn must be a Python function .* lambda v: math.tanh"),
    (lambda: elementwise_map(lambda v: v, GOOD, block=2048), ValueError, "2048 threads per block"),
    (lambda: attention_fused(GOOD, np.ones((4, 3), np.float32), GOOD), ValueError, "same head size d"),
    (lambda: attention_naive(GOOD, GOOD, np.ones((5, 4), np.float32)), ValueError, "one row per key"),
    (lambda: attention_fused(GOOD, GOOD, GOOD, causal=1), TypeError, "causal must be a bool"),
    (lambda: attention_fused(np.ones((4, 512), np.float32), np.ones((4, 512), np.float32), GOOD, block_q=16),
     ValueError, "bytes of shared memory"),
])
def test_bad_inputs_fail_before_any_launch(call, error, message):
    with instrument() as report, pytest.raises(error, match=message):
        call()
    assert report.launches == []

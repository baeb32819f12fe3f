"""Data-parallel SGD over all_reduce: identical weights on every rank, equal to single-process SGD."""

from __future__ import annotations

import numpy as np
import pytest

from mlsys_lib.comm import data_parallel_sgd, launch, sgd
from mlsys_lib.comm.data_parallel import gradient_sum


def blobs(n: int = 90, d: int = 4, k: int = 3, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """k Gaussian clusters in d dimensions: X (n, d) float64, y (n,) int labels."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, k, n)
    centers = 3 * rng.standard_normal((k, d))
    return centers[y] + rng.standard_normal((n, d)), y


TRAINING = dict(num_classes=3, steps=25, batch_size=10, lr=0.5, seed=7)


@pytest.mark.parametrize("p, algorithm", [(3, "ring"), (4, "tree"), (2, "naive")])
def test_data_parallel_sgd_equals_single_process_sgd(p, algorithm):
    X, y = blobs()
    per_rank = launch(data_parallel_sgd, p, args=(X, y, *TRAINING.values(), algorithm))
    W0, b0 = per_rank[0]
    for W, b in per_rank[1:]:  # bit-identical replicas
        assert np.array_equal(W, W0) and np.array_equal(b, b0)
    W_ref, b_ref = sgd(X, y, **TRAINING)
    np.testing.assert_allclose(W0, W_ref, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(b0, b_ref, rtol=1e-10, atol=1e-12)
    accuracy = np.mean(np.argmax(X @ W0 + b0, axis=1) == y)
    assert accuracy > 0.9


def test_gradient_sum_matches_finite_differences():
    X, y = blobs(n=5, d=3, k=4, seed=1)
    rng = np.random.default_rng(2)
    W, b = rng.standard_normal((3, 4)), rng.standard_normal(4)

    def loss(theta: np.ndarray) -> float:
        logits = X @ theta[:12].reshape(3, 4) + theta[12:]
        logits -= logits.max(axis=1, keepdims=True)
        return float(np.sum(np.log(np.exp(logits).sum(axis=1)) - logits[np.arange(5), y]))

    theta = np.concatenate([W.ravel(), b])
    eps = 1e-6
    numeric = [(loss(theta + eps * e) - loss(theta - eps * e)) / (2 * eps) for e in np.eye(theta.size)]
    np.testing.assert_allclose(gradient_sum(W, b, X, y), numeric, rtol=1e-6, atol=1e-7)


def test_sgd_checks_its_inputs():
    X, y = blobs()
    with pytest.raises(ValueError, match="batch_size must be in 1..90"):
        sgd(X, y, 3, steps=1, batch_size=100, lr=0.1)
    with pytest.raises(ValueError, match=r"X must be \(n, d\) and y \(n,\)"):
        sgd(X, y[:-1], 3, steps=1, batch_size=10, lr=0.1)

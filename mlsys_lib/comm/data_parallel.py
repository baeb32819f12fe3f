"""Data-parallel SGD over ``all_reduce``: the same model on every rank, a shard of every batch per rank.

The model is softmax regression (``logits = X @ W + b``, mean cross-entropy). Each step every rank
draws the same batch indices, takes its shard (``np.array_split`` of the batch), computes the *sum*
of the gradients over its rows, and all-reduces it; dividing by the batch size gives exactly the
full-batch mean gradient, even when the shards are unequal. Every rank starts from the same weights
and applies the same update, so the weights stay identical on every rank and equal (up to the order
of floating-point additions) to single-process SGD on the full batches (:func:`sgd`).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from .group import ProcessGroup

GradientOfBatch = Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray]


def gradient_sum(W: np.ndarray, b: np.ndarray, X: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Sum over the rows of the cross-entropy gradient, flattened as ``[dW.ravel(), db]``.

    W (d, k), b (k,), X (m, d), y (m,) int labels in 0..k-1; returns shape (d*k + k,).
    """
    logits = X @ W + b
    logits -= logits.max(axis=1, keepdims=True)
    probs = np.exp(logits)
    probs /= probs.sum(axis=1, keepdims=True)
    probs[np.arange(len(y)), y] -= 1.0  # d(loss)/d(logits) per row
    return np.concatenate([(X.T @ probs).ravel(), probs.sum(axis=0)])


def _train(X: np.ndarray, y: np.ndarray, num_classes: int, steps: int, batch_size: int, lr: float,
           seed: int, batch_gradient: GradientOfBatch) -> tuple[np.ndarray, np.ndarray]:
    """SGD with the gradient sum of each batch from ``batch_gradient(W, b, batch_indices)``."""
    if X.ndim != 2 or y.shape != (X.shape[0],):
        raise ValueError(f"X must be (n, d) and y (n,), got {X.shape} and {y.shape}")
    if not 1 <= batch_size <= X.shape[0]:
        raise ValueError(f"batch_size must be in 1..{X.shape[0]}, got {batch_size}")
    rng = np.random.default_rng(seed)
    d = X.shape[1]
    W = 0.01 * rng.standard_normal((d, num_classes))
    b = np.zeros(num_classes)
    for _ in range(steps):
        batch = rng.choice(X.shape[0], size=batch_size, replace=False)
        grad = batch_gradient(W, b, batch) / batch_size
        W -= lr * grad[:W.size].reshape(W.shape)
        b -= lr * grad[W.size:]
    return W, b


def sgd(X: np.ndarray, y: np.ndarray, num_classes: int, steps: int, batch_size: int, lr: float,
        seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Single-process minibatch SGD of softmax regression; returns W (d, k) and b (k,)."""
    return _train(X, y, num_classes, steps, batch_size, lr, seed,
                  lambda W, b, batch: gradient_sum(W, b, X[batch], y[batch]))


def data_parallel_sgd(group: ProcessGroup, X: np.ndarray, y: np.ndarray, num_classes: int, steps: int,
                      batch_size: int, lr: float, seed: int = 0,
                      algorithm: str = "ring") -> tuple[np.ndarray, np.ndarray]:
    """:func:`sgd` with each batch split over the ranks and gradients all-reduced with ``algorithm``."""
    def batch_gradient(W: np.ndarray, b: np.ndarray, batch: np.ndarray) -> np.ndarray:
        mine = np.array_split(batch, group.world_size)[group.rank]
        return group.all_reduce(gradient_sum(W, b, X[mine], y[mine]), op="sum", algorithm=algorithm)
    return _train(X, y, num_classes, steps, batch_size, lr, seed, batch_gradient)

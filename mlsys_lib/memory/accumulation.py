"""Gradient accumulation: the full-batch gradient from micro-batches, one at a time.

Activation memory grows with the batch, so a batch of B rows that does not fit is split into
micro-batches of B_1 + B_2 + ... = B rows; each runs forward and backward alone and the gradients are
added up before the single optimizer step. The loss is a *mean* over rows, so micro-batch j's mean-loss
gradient must be weighted by B_j / B: Σ_j (B_j / B) ∇ mean_j = ∇ (1/B) Σ_rows loss = ∇ mean. (Averaging
the micro-batch gradients with equal weights 1/m is right only when all micro-batches have the same size.)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from ..autodiff import Tensor, grad


def accumulated_gradients(loss_fn: Callable[[np.ndarray, np.ndarray], Tensor], parameters: Sequence[Tensor],
                          X: np.ndarray, y: np.ndarray, micro_batches: int) -> list[np.ndarray]:
    """The gradient of the mean loss over all rows of (X, y), from ``micro_batches`` micro-batches.

    loss_fn(X_j, y_j): the *mean* loss over the rows of one micro-batch (a scalar Tensor).
    X, y: the batch, B rows; split with ``np.array_split`` (sizes differ by at most one).
    Returns one array per parameter, the shape of the parameter.
    """
    rows = len(X)
    if len(y) != rows:
        raise ValueError(f"X has {rows} rows but y has {len(y)}")
    if isinstance(micro_batches, bool) or not isinstance(micro_batches, int) or not 1 <= micro_batches <= rows:
        raise ValueError(f"micro_batches must be an integer from 1 to the batch size {rows}, got {micro_batches!r}")
    total = [np.zeros(p.shape, p.dtype) for p in parameters]
    for X_j, y_j in zip(np.array_split(X, micro_batches), np.array_split(y, micro_batches)):
        for acc, g in zip(total, grad(loss_fn(X_j, y_j), list(parameters))):
            acc += (len(X_j) / rows) * g.numpy()
    return total

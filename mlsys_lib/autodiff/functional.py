"""Neural-network ops: softmax, log_softmax (numerically stable primitives), one_hot, and the composites
cross_entropy and layer_norm built from primitives (so their derivatives of every order come for free).
"""

from __future__ import annotations

import numpy as np

from .reductions import mean, sum
from .shapes import normalize_axes
from .tensor import Op, Tensor, apply, as_tensor


class Softmax(Op):
    """s = exp(x - max x) / Σ exp(x - max x) along ``axis``."""

    name = "softmax"

    def __init__(self, axis: int):
        self.axis = axis

    def forward(self, x):
        e = np.exp(x - x.max(axis=self.axis, keepdims=True))
        return e / e.sum(axis=self.axis, keepdims=True)

    def shape(self, shape):
        return shape

    def jacobian_product(self, v: Tensor, s: Tensor) -> Tensor:
        """(diag(s) - s sᵀ) v along the axis. The Jacobian is symmetric, so this is both the VJP and the JVP."""
        return s * (v - sum(v * s, self.axis, keepdims=True))

    def vjp(self, g, out, x):
        return (self.jacobian_product(g, out),)

    def jvp(self, tangents, out, x):
        return self.jacobian_product(tangents[0], out)


class LogSoftmax(Op):
    """x - max x - log Σ exp(x - max x) along ``axis``; its Jacobian is I - 1 sᵀ with s = softmax(x) = exp(out)."""

    name = "log_softmax"

    def __init__(self, axis: int):
        self.axis = axis

    def forward(self, x):
        shifted = x - x.max(axis=self.axis, keepdims=True)
        return shifted - np.log(np.exp(shifted).sum(axis=self.axis, keepdims=True))

    def shape(self, shape):
        return shape

    def vjp(self, g, out, x):
        return (g - out.exp() * sum(g, self.axis, keepdims=True),)

    def jvp(self, tangents, out, x):
        t = tangents[0]
        return t - sum(out.exp() * t, self.axis, keepdims=True)


class OneHot(Op):
    """Integer labels (...) -> (..., num_classes) with a 1 at each label. Labels carry no gradient."""

    name = "one_hot"

    def __init__(self, num_classes: int, dtype: np.dtype):
        self.num_classes, self.out_dtype = num_classes, np.dtype(dtype)

    def forward(self, labels):
        if not np.issubdtype(labels.dtype, np.integer):
            raise TypeError(f"one_hot: labels must be integers, got {labels.dtype}")
        if labels.size and (labels.min() < 0 or labels.max() >= self.num_classes):
            raise ValueError(f"one_hot: labels must lie in [0, {self.num_classes}), got [{labels.min()}, {labels.max()}]")
        return (labels[..., None] == np.arange(self.num_classes)).astype(self.out_dtype)

    def shape(self, shape):
        return shape + (self.num_classes,)

    def dtype(self, *dtypes):
        return self.out_dtype

    def vjp(self, g, out, labels):
        return (None,)

    def jvp(self, tangents, out, labels):
        return None


def softmax(x, axis: int = -1) -> Tensor:
    """Softmax along ``axis`` (shifted by the max, so it never overflows)."""
    x = as_tensor(x)
    return apply(Softmax(normalize_axes("softmax", axis, x.ndim)[0]), x)


def log_softmax(x, axis: int = -1) -> Tensor:
    """log(softmax(x)) along ``axis``, computed stably (log-sum-exp with the max subtracted)."""
    x = as_tensor(x)
    return apply(LogSoftmax(normalize_axes("log_softmax", axis, x.ndim)[0]), x)


def one_hot(labels, num_classes: int, dtype=np.float64) -> Tensor:
    """labels (...) of integers in [0, num_classes) -> (..., num_classes) one-hot rows of ``dtype``."""
    return apply(OneHot(num_classes, dtype), as_tensor(labels))


def cross_entropy(logits, labels) -> Tensor:
    """Mean over the batch of -log softmax(logits)[label]: logits (N, C) float, labels (N,) integers -> scalar."""
    logits, labels = as_tensor(logits), as_tensor(labels)
    if logits.ndim != 2 or labels.shape != logits.shape[:1]:
        raise ValueError(f"cross_entropy: expected logits (N, C) and labels (N,), got {logits.shape} and {labels.shape}")
    if not np.issubdtype(labels.dtype, np.integer):
        raise TypeError(f"cross_entropy: labels must be integers, got {labels.dtype}")
    n, c = logits.shape
    picked = log_softmax(logits, axis=-1) * one_hot(labels, c, logits.dtype)
    return sum(picked) * (-1.0 / n)


def layer_norm(x, weight, bias, eps: float = 1e-5) -> Tensor:
    """Normalize over the last axis, then scale and shift: (x - μ) / √(σ² + eps) · weight + bias.

    x: (..., D); weight, bias: (D,). μ and σ² are the mean and (biased) variance over the last axis.
    """
    x, weight, bias = as_tensor(x), as_tensor(weight), as_tensor(bias)
    if x.ndim < 1 or weight.shape != x.shape[-1:] or bias.shape != x.shape[-1:]:
        raise ValueError(f"layer_norm: expected x (..., D) with weight and bias (D,), "
                         f"got {x.shape}, {weight.shape}, {bias.shape}")
    centered = x - mean(x, axis=-1, keepdims=True)
    variance = mean(centered * centered, axis=-1, keepdims=True)
    return centered * (variance + eps) ** -0.5 * weight + bias

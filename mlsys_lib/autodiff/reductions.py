"""Reductions over axes: sum, mean (sum scaled by 1/count), max.

``max`` sends its gradient to the arg-max; where several elements tie for the maximum the gradient
is **split evenly** among them (the subgradient numpy-style libraries such as ``torch.amax`` use).
"""

from __future__ import annotations

import math
from collections.abc import Sequence


from .layout import broadcast_to, reshape
from .shapes import Shape, normalize_axes, reduced_shape
from .tensor import Op, Tensor, apply, as_tensor


class Reduction(Op):
    """Reduces over ``axes`` (sorted, >= 0), keeping them as size 1 when ``keepdims``."""

    def __init__(self, axes: Shape, keepdims: bool):
        self.axes, self.keepdims = axes, keepdims

    def shape(self, shape):
        return reduced_shape(shape, self.axes, self.keepdims)

    def with_kept_axes(self, g: Tensor, x_shape: Shape) -> Tensor:
        """g (the output's shape) with the reduced axes put back as size 1, so it broadcasts against x."""
        return reshape(g, reduced_shape(x_shape, self.axes, keepdims=True))


class Sum(Reduction):
    name = "sum"

    def forward(self, x):
        return x.sum(axis=self.axes, keepdims=self.keepdims)

    def vjp(self, g, out, x):
        return (broadcast_to(self.with_kept_axes(g, x.shape), x.shape),)

    def jvp(self, tangents, out, x):
        return sum(tangents[0], self.axes, self.keepdims)


class Max(Reduction):
    name = "max"

    def forward(self, x):
        return x.max(axis=self.axes, keepdims=self.keepdims)

    def vjp(self, g, out, x):
        return (self.with_kept_axes(g, x.shape) * apply(ArgmaxWeights(self.axes), x),)

    def jvp(self, tangents, out, x):
        return sum(tangents[0] * apply(ArgmaxWeights(self.axes), x), self.axes, self.keepdims)


class ArgmaxWeights(Op):
    """∂max/∂x: 1/k at each of the k elements that attain the maximum over ``axes``, 0 elsewhere (no gradient)."""

    name = "argmax_weights"

    def __init__(self, axes: Shape):
        self.axes = axes

    def forward(self, x):
        is_max = x == x.max(axis=self.axes, keepdims=True)
        return is_max / is_max.sum(axis=self.axes, keepdims=True).astype(x.dtype)

    def shape(self, shape):
        return shape

    def vjp(self, g, out, x):
        return (None,)

    def jvp(self, tangents, out, x):
        return None


def sum(x, axis: int | Sequence[int] | None = None, keepdims: bool = False) -> Tensor:  # noqa: A001
    """Sum over ``axis`` (None: all axes)."""
    x = as_tensor(x)
    return apply(Sum(normalize_axes("sum", axis, x.ndim), keepdims), x)


def mean(x, axis: int | Sequence[int] | None = None, keepdims: bool = False) -> Tensor:
    """Mean over ``axis`` (None: all axes): the sum times 1/count."""
    x = as_tensor(x)
    axes = normalize_axes("mean", axis, x.ndim)
    return sum(x, axes, keepdims) * (1.0 / math.prod(x.shape[a] for a in axes))


def max(x, axis: int | Sequence[int] | None = None, keepdims: bool = False) -> Tensor:  # noqa: A001
    """Maximum over ``axis`` (None: all axes); the gradient goes to the arg-max, split evenly among ties."""
    x = as_tensor(x)
    return apply(Max(normalize_axes("max", axis, x.ndim), keepdims), x)

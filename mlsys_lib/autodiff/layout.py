"""Ops that move or replicate elements without arithmetic: transpose, reshape, broadcast_to, sum_to.

``broadcast_to`` and ``sum_to`` are each other's VJP: broadcasting copies a value along new or size-1
axes, so its adjoint sums the copies back. ``sum_to`` is the one helper that makes every gradient
broadcasting-aware: the engine applies it to each VJP whose shape is larger than its input's.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .shapes import Shape, broadcast_shapes, resolve_reshape
from .tensor import Op, Tensor, apply, as_tensor


class Transpose(Op):
    name = "transpose"

    def __init__(self, axes: Shape):
        self.axes = axes

    def forward(self, x):
        return np.transpose(x, self.axes)

    def shape(self, shape):
        return tuple(shape[a] for a in self.axes)

    def vjp(self, g, out, x):
        return (transpose(g, tuple(np.argsort(self.axes))),)

    def jvp(self, tangents, out, x):
        return transpose(tangents[0], self.axes)


class Reshape(Op):
    name = "reshape"

    def __init__(self, shape: Shape):
        self.target = shape

    def forward(self, x):
        return x.reshape(self.target)

    def shape(self, shape):
        return self.target

    def vjp(self, g, out, x):
        return (reshape(g, x.shape),)

    def jvp(self, tangents, out, x):
        return reshape(tangents[0], self.target)


class BroadcastTo(Op):
    name = "broadcast_to"

    def __init__(self, shape: Shape):
        self.target = shape

    def forward(self, x):
        return np.broadcast_to(x, self.target)

    def shape(self, shape):
        if len(shape) > len(self.target) or broadcast_shapes(self.name, shape, self.target) != self.target:
            raise ValueError(f"{self.name}: cannot broadcast {shape} to {self.target}")
        return self.target

    def vjp(self, g, out, x):
        return (g,)  # the engine sums it back to x's shape

    def jvp(self, tangents, out, x):
        return broadcast_to(tangents[0], self.target)


class SumTo(Op):
    """Sum a broadcast array back to ``shape``: over its extra leading axes and over the axes where shape has 1."""

    name = "sum_to"

    def __init__(self, shape: Shape):
        self.target = shape

    def forward(self, x):
        lead = x.ndim - len(self.target)
        axes = tuple(range(lead)) + tuple(lead + i for i, n in enumerate(self.target) if n == 1 and x.shape[lead + i] != 1)
        return x.sum(axis=axes, keepdims=True).reshape(self.target) if axes else x.reshape(self.target)

    def shape(self, shape):
        if len(self.target) > len(shape) or broadcast_shapes(self.name, self.target, shape) != shape:
            raise ValueError(f"{self.name}: {shape} is not a broadcast of {self.target}")
        return self.target

    def vjp(self, g, out, x):
        return (broadcast_to(g, x.shape),)

    def jvp(self, tangents, out, x):
        return sum_to(tangents[0], self.target)


def transpose(x, axes: Sequence[int] | None = None) -> Tensor:
    """Permute the axes (default: reverse them, the matrix transpose for 2-D). out.shape[i] = x.shape[axes[i]]."""
    x = as_tensor(x)
    axes = tuple(reversed(range(x.ndim))) if axes is None else tuple(int(a) + x.ndim * (a < 0) for a in axes)
    if sorted(axes) != list(range(x.ndim)):
        raise ValueError(f"transpose: axes {axes} are not a permutation of the {x.ndim} axes of {x.shape}")
    return apply(Transpose(axes), x)


def swap_last_axes(x: Tensor) -> Tensor:
    """The matrix transpose of each matrix in a batch (..., m, n) -> (..., n, m)."""
    axes = list(range(x.ndim))
    axes[-2:] = axes[-1], axes[-2]
    return transpose(x, axes)


def reshape(x, shape: Sequence[int]) -> Tensor:
    """The same elements (row-major order) in ``shape``; one entry may be -1."""
    x = as_tensor(x)
    return apply(Reshape(resolve_reshape("reshape", x.shape, shape)), x)


def broadcast_to(x, shape: Sequence[int]) -> Tensor:
    """x repeated along new leading axes and its size-1 axes to ``shape`` (numpy broadcasting)."""
    return apply(BroadcastTo(tuple(shape)), as_tensor(x))


def sum_to(x, shape: Sequence[int]) -> Tensor:
    """The adjoint of broadcasting: sum x down to ``shape`` (x itself when it already has that shape)."""
    x, shape = as_tensor(x), tuple(shape)
    return x if x.shape == shape else apply(SumTo(shape), x)

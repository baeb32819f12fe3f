"""Shape rules the ops share: broadcasting, axis normalization, reduced shapes, reshape targets.

Pure functions of shape tuples. Each takes the op's name so that its error says which op failed.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

Shape = tuple[int, ...]


def broadcast_shapes(op: str, *shapes: Shape) -> Shape:
    """The shape numpy broadcasting gives ``shapes``; ValueError naming ``op`` if they do not broadcast."""
    if all(s == shapes[0] for s in shapes[1:]):  # the common case, without numpy's general machinery
        return shapes[0]
    try:
        return tuple(np.broadcast_shapes(*shapes))
    except ValueError:
        raise ValueError(f"{op}: shapes {' and '.join(map(str, shapes))} do not broadcast") from None


def normalize_axes(op: str, axis: int | Sequence[int] | None, ndim: int) -> Shape:
    """``axis`` (None = all, an int, or a sequence; negatives count from the end) as sorted axes >= 0."""
    if axis is None:
        return tuple(range(ndim))
    axes = (axis,) if isinstance(axis, (int, np.integer)) else tuple(axis)
    for a in axes:
        if not -ndim <= a < ndim:
            raise ValueError(f"{op}: axis {a} is out of range for a {ndim}-D input")
    normalized = sorted(int(a) % ndim for a in axes)
    if len(set(normalized)) != len(normalized):
        raise ValueError(f"{op}: repeated axis in {axis}")
    return tuple(normalized)


def reduced_shape(shape: Shape, axes: Shape, keepdims: bool) -> Shape:
    """``shape`` after reducing over ``axes``: those axes become 1 (keepdims) or disappear."""
    if keepdims:
        return tuple(1 if i in axes else n for i, n in enumerate(shape))
    return tuple(n for i, n in enumerate(shape) if i not in axes)


def resolve_reshape(op: str, shape: Shape, target: Sequence[int]) -> Shape:
    """``target`` with its one allowed -1 filled in; ValueError unless it holds as many elements as ``shape``."""
    target = tuple(int(n) for n in target)
    size = math.prod(shape)
    unknown = [i for i, n in enumerate(target) if n == -1]
    known = math.prod(n for n in target if n != -1)
    if len(unknown) > 1 or any(n < -1 for n in target):
        raise ValueError(f"{op}: invalid target shape {target}")
    if unknown and known and size % known == 0:
        target = target[:unknown[0]] + (size // known,) + target[unknown[0] + 1:]
    if math.prod(target) != size or -1 in target:
        raise ValueError(f"{op}: cannot reshape {shape} ({size} elements) into {target}")
    return target

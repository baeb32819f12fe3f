"""Strides: the index arithmetic behind every view of an NDArray.

A tensor in strides format is a flat storage plus ``(shape, strides, offset)``::

    A[i0, i1, ..., i_{n-1}] = storage[offset + i0*strides[0] + i1*strides[1] + ... ]

Strides count *elements*, not bytes. Slicing changes ``offset`` and ``shape``, transposing permutes
``strides``, broadcasting sets a stride to 0 -- none of them copies data.

The public functions are plain Python (they are the references of the lab's exercises, and the
course's reference guard swaps their code). The two index formulas the Numba kernels need,
:func:`position` and :func:`unravel`, are written once here as ``njit(inline="always")`` helpers;
:func:`index_to_position` runs the same formula through ``position.py_func``.
"""

from __future__ import annotations

import math
import operator
from typing import Any, Iterable, Sequence

from numba import njit

__all__ = [
    "as_shape", "compact_strides", "is_compact", "index_to_position", "broadcast_shape",
    "broadcast_strides", "reshape_strides", "slice_params",
]

Shape = tuple[int, ...]
Strides = tuple[int, ...]


# --------------------------------------------------------------------------------------------
# The two index formulas, shared by the kernels (compiled) and the Python functions (py_func).
# --------------------------------------------------------------------------------------------

@njit(inline="always")
def position(index, strides, offset):
    """Storage position of a multi-index: ``offset + sum(index[d] * strides[d])`` (elements)."""
    pos = offset
    for d in range(len(index)):
        pos += index[d] * strides[d]
    return pos


@njit(inline="always")
def unravel(ordinal, shape, out_index):
    """Write into ``out_index`` the multi-index of the ``ordinal``-th element in row-major order.

    ``shape`` and ``out_index`` are 1-D integer arrays of length ndim; every ``shape[d] >= 1``.
    """
    for d in range(len(shape) - 1, -1, -1):
        out_index[d] = ordinal % shape[d]
        ordinal //= shape[d]


# --------------------------------------------------------------------------------------------
# Public reference functions.
# --------------------------------------------------------------------------------------------

def _as_ints(values: Iterable[Any], what: str) -> tuple[int, ...]:
    try:
        return tuple(operator.index(v) for v in values)
    except TypeError:
        raise TypeError(f"{what} must be a sequence of integers, got {values!r}") from None


def as_shape(shape: int | Iterable[int]) -> Shape:
    """Normalize ``shape`` (an int or a sequence of ints) to a tuple; ValueError if a size is negative."""
    if isinstance(shape, Iterable):
        shape = _as_ints(shape, "shape")
    else:
        shape = _as_ints((shape,), "shape")
    if any(n < 0 for n in shape):
        raise ValueError(f"shape {shape} has a negative size")
    return shape


def compact_strides(shape: Sequence[int]) -> Strides:
    """Row-major (C-order) strides, in elements, of a compact array of ``shape``.

    The last axis has stride 1 and each earlier axis steps over the whole block after it:
    ``(N, 2, 3, 4) -> (24, 12, 4, 1)``, ``(2, 9, 1) -> (9, 1, 1)``. As in numpy, an array with
    no elements gets all-zero strides.
    """
    shape = as_shape(shape)
    if 0 in shape:
        return (0,) * len(shape)
    strides = []
    step = 1
    for n in reversed(shape):
        strides.append(step)
        step *= n
    return tuple(reversed(strides))


def is_compact(shape: Sequence[int], strides: Sequence[int]) -> bool:
    """True if the view's elements fill one contiguous row-major run of storage.

    Strides of size-1 axes never matter (they are never stepped along), and an array with no
    elements is compact; this is numpy's ``C_CONTIGUOUS`` rule, in elements.
    """
    shape, strides = as_shape(shape), _as_ints(strides, "strides")
    if 0 in shape:
        return True
    step = 1
    for n, s in zip(reversed(shape), reversed(strides)):
        if n != 1 and s != step:
            return False
        step *= n
    return True


def index_to_position(index: Sequence[int], strides: Sequence[int], offset: int = 0) -> int:
    """Storage position of ``A[index]``: ``offset + sum(index[d] * strides[d])``, in elements."""
    index, strides = _as_ints(index, "index"), _as_ints(strides, "strides")
    if len(index) != len(strides):
        raise ValueError(f"index {index} has {len(index)} entries but strides {strides} has {len(strides)}")
    return position.py_func(index, strides, operator.index(offset))


def broadcast_shape(*shapes: Sequence[int]) -> Shape:
    """The shape the arrays of ``shapes`` broadcast to (numpy's rules).

    Shapes are aligned at their last axis; along each axis the sizes must be equal or 1, and a
    missing leading axis counts as 1. ``broadcast_shape((8, 1, 3), (4, 3)) == (8, 4, 3)``.
    """
    shapes = tuple(as_shape(s) for s in shapes)
    ndim = max((len(s) for s in shapes), default=0)
    result = []
    for d in range(-ndim, 0):
        sizes = {s[d] for s in shapes if len(s) >= -d} - {1}
        if len(sizes) > 1:
            listed = " ".join(str(s) for s in shapes)
            raise ValueError(f"shapes {listed} cannot be broadcast together "
                             f"(axis {d} has sizes {sorted(sizes)})")
        result.append(sizes.pop() if sizes else 1)
    return tuple(result)


def broadcast_strides(shape: Sequence[int], strides: Sequence[int], new_shape: Sequence[int]) -> Strides:
    """Strides that show an array of ``(shape, strides)`` as ``new_shape`` without copying.

    New leading axes and axes of size 1 get stride 0 (as in numpy), so every index along them
    reads the same element. ValueError if ``shape`` does not broadcast to ``new_shape``.
    """
    shape, new_shape = as_shape(shape), as_shape(new_shape)
    strides = _as_ints(strides, "strides")
    if len(strides) != len(shape):
        raise ValueError(f"strides {strides} do not match shape {shape}")
    extra = len(new_shape) - len(shape)
    if extra < 0:
        raise ValueError(f"cannot broadcast shape {shape} to {new_shape}: the target has fewer axes")
    result = [0] * extra
    for n, s, new_n in zip(shape, strides, new_shape[extra:]):
        if n == 1:
            result.append(0)
        elif n == new_n:
            result.append(s)
        else:
            raise ValueError(f"cannot broadcast shape {shape} to {new_shape}: size {n} cannot become {new_n}")
    return tuple(result)


def reshape_strides(shape: Sequence[int], strides: Sequence[int], new_shape: Sequence[int]) -> Strides | None:
    """Strides that show the view ``(shape, strides)`` as ``new_shape`` without copying, or None.

    Reshaping keeps the row-major order of the elements. It is possible without a copy when each
    group of old axes that merges into (or splits into) new axes is itself one evenly strided run:
    within the group, every axis steps over exactly one full step of the next. Axes of size 1 never
    constrain anything. This is the idea of numpy's ``_attempt_nocopy_reshape``.
    ValueError if the sizes differ.
    """
    shape, new_shape = as_shape(shape), as_shape(new_shape)
    strides = _as_ints(strides, "strides")
    if len(strides) != len(shape):
        raise ValueError(f"strides {strides} do not match shape {shape}")
    size = math.prod(shape)
    if math.prod(new_shape) != size:
        raise ValueError(f"cannot reshape an array of shape {shape} (size {size}) into shape {new_shape}")
    if size == 0:
        return compact_strides(new_shape)

    old = [(n, s) for n, s in zip(shape, strides) if n != 1]
    new_strides = [0] * len(new_shape)
    o = k = 0  # first old axis and first new axis of the current group
    while o < len(old) and k < len(new_shape):
        # Grow the group [o, o_end) x [k, k_end) until both sides hold the same number of elements.
        o_end, k_end = o + 1, k + 1
        old_n, new_n = old[o][0], new_shape[k]
        while old_n != new_n:
            if new_n < old_n:
                new_n *= new_shape[k_end]
                k_end += 1
            else:
                old_n *= old[o_end][0]
                o_end += 1
        # The old axes of the group must form one run with a single innermost step...
        for d in range(o, o_end - 1):
            if old[d][1] != old[d + 1][0] * old[d + 1][1]:
                return None
        # ...which the new axes of the group then split compactly.
        new_strides[k_end - 1] = old[o_end - 1][1]
        for d in range(k_end - 1, k, -1):
            new_strides[d - 1] = new_strides[d] * new_shape[d]
        o, k = o_end, k_end
    # Trailing new axes have size 1; their stride is never used.
    for d in range(k, len(new_shape)):
        new_strides[d] = new_strides[k - 1] if k > 0 else 1
    return tuple(new_strides)


def _is_integer_index(item: Any) -> bool:
    if isinstance(item, bool):
        return False
    try:
        operator.index(item)
    except TypeError:
        return False
    return True


def slice_params(shape: Sequence[int], strides: Sequence[int], offset: int, key: Any
                 ) -> tuple[Shape, Strides, int]:
    """``(shape, strides, offset)`` of the view ``A[key]`` for a basic-indexing ``key``.

    ``key`` is an int, a slice, ``...``, ``None`` or a tuple of those (numpy's basic indexing).
    An integer ``i`` drops its axis and moves the offset by ``i * stride`` (negative ``i`` counts
    from the end); a slice ``start:stop:step`` keeps the axis with ``len(range(start, stop, step))``
    elements, stride ``stride * step``, and moves the offset to ``start``; ``None`` inserts an axis
    of size 1; ``...`` stands for as many ``:`` as needed.

    IndexError for an out-of-range integer or too many indices; TypeError for advanced
    (list/array/bool) indexing, which would need a copy.
    """
    shape, strides = as_shape(shape), _as_ints(strides, "strides")
    items = key if isinstance(key, tuple) else (key,)
    for item in items:
        if not (item is None or item is Ellipsis or isinstance(item, slice) or _is_integer_index(item)):
            raise TypeError(f"NDArray supports only basic indexing (ints, slices, ..., None), got {item!r}; "
                            "advanced (list, array or boolean) indexing would need a copy")
    if sum(item is Ellipsis for item in items) > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    n_indexed = sum(item is not None and item is not Ellipsis for item in items)
    if n_indexed > len(shape):
        raise IndexError(f"too many indices: the array is {len(shape)}-dimensional, but {n_indexed} were indexed")
    if Ellipsis in items:
        at = items.index(Ellipsis)
        items = items[:at] + (slice(None),) * (len(shape) - n_indexed) + items[at + 1:]
    else:
        items = items + (slice(None),) * (len(shape) - n_indexed)

    new_shape, new_strides = [], []
    axis = 0
    offset = operator.index(offset)
    for item in items:
        if item is None:
            new_shape.append(1)
            new_strides.append(0)
            continue
        n, s = shape[axis], strides[axis]
        if isinstance(item, slice):
            start, stop, step = item.indices(n)
            length = len(range(start, stop, step))
            if length > 0:
                offset += start * s
            new_shape.append(length)
            new_strides.append(s * step)
        else:
            i = operator.index(item)
            if not -n <= i < n:
                raise IndexError(f"index {i} is out of bounds for axis {axis} with size {n}")
            offset += (i % n) * s
        axis += 1
    return tuple(new_shape), tuple(new_strides), offset

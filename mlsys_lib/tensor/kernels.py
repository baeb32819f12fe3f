"""CPU kernels of NDArray: four Numba loops that read strided (and broadcast) views directly.

Every kernel walks its output in row-major order: it turns an element's ordinal into a multi-index
(:func:`~mlsys_lib.tensor.strides.unravel`) and each operand's multi-index into a storage position
(:func:`~mlsys_lib.tensor.strides.position`). The scalar operation is chosen by an integer code, so
each kernel compiles once per dtype signature rather than once per operation.

Arguments follow one convention: a view is passed as ``storage`` (1-D array), ``strides`` (int64
array, elements) and ``offset``; shapes are int64 arrays; outputs are fresh compact 1-D arrays of
the output's size, except for :func:`copy`, which writes into a view.

(Numba's on-disk cache checks only this file's timestamp: after editing the helpers in
``strides.py``, delete ``__pycache__`` so that the kernels are recompiled.)
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from .strides import position, unravel

# Binary operations (binary_map).
ADD, SUB, MUL, DIV, POW, MAXIMUM, MINIMUM, EQ, NE, LT, LE, GT, GE = range(13)
COMPARISONS = frozenset({EQ, NE, LT, LE, GT, GE})
# Unary operations (unary_map).
NEG, ABS, EXP, LOG, TANH = range(5)
# Reductions (reduce).
SUM, MAX, MIN, MEAN = range(4)


@njit(cache=True)
def copy(src, src_strides, src_offset, shape, dst, dst_strides, dst_offset):
    """Copy the view ``src`` into the view ``dst`` of the same ``shape``, casting to dst's dtype."""
    index = np.empty(len(shape), np.int64)
    for ordinal in range(np.prod(shape)):
        unravel(ordinal, shape, index)
        dst[position(index, dst_strides, dst_offset)] = src[position(index, src_strides, src_offset)]


@njit(cache=True, error_model="numpy")
def binary_map(op, a, a_strides, a_offset, b, b_strides, b_offset, shape, out):
    """``out[ordinal] = op(a[index], b[index])`` for the views a, b broadcast to ``shape``."""
    index = np.empty(len(shape), np.int64)
    for ordinal in range(out.size):
        unravel(ordinal, shape, index)
        x = a[position(index, a_strides, a_offset)]
        y = b[position(index, b_strides, b_offset)]
        if op == ADD:
            out[ordinal] = x + y
        elif op == SUB:
            out[ordinal] = x - y
        elif op == MUL:
            out[ordinal] = x * y
        elif op == DIV:
            out[ordinal] = x / y
        elif op == POW:
            out[ordinal] = x ** y
        elif op == MAXIMUM:  # NaN wins, as in numpy
            out[ordinal] = x if x >= y or x != x else y
        elif op == MINIMUM:
            out[ordinal] = x if x <= y or x != x else y
        elif op == EQ:
            out[ordinal] = x == y
        elif op == NE:
            out[ordinal] = x != y
        elif op == LT:
            out[ordinal] = x < y
        elif op == LE:
            out[ordinal] = x <= y
        elif op == GT:
            out[ordinal] = x > y
        else:
            out[ordinal] = x >= y


@njit(cache=True, error_model="numpy")
def unary_map(op, a, a_strides, a_offset, shape, out):
    """``out[ordinal] = op(a[index])`` for the view a of ``shape``."""
    index = np.empty(len(shape), np.int64)
    for ordinal in range(out.size):
        unravel(ordinal, shape, index)
        x = a[position(index, a_strides, a_offset)]
        if op == NEG:
            out[ordinal] = -x
        elif op == ABS:
            out[ordinal] = abs(x)
        elif op == EXP:
            out[ordinal] = math.exp(x)
        elif op == LOG:
            out[ordinal] = math.log(x)
        else:
            out[ordinal] = math.tanh(x)


@njit(cache=True, error_model="numpy")
def reduce(op, a, offset, keep_shape, keep_strides, red_shape, red_strides, out):
    """Reduce the view of ``a`` over its reduced axes; ``out`` has the kept axes' shape.

    The view's axes are split into kept axes ``(keep_shape, keep_strides)`` and reduced axes
    ``(red_shape, red_strides)``. MAX and MIN need at least one reduced element. Sums accumulate in
    float64 (floats) or int64 (ints, bools).
    """
    keep_index = np.empty(len(keep_shape), np.int64)
    red_index = np.empty(len(red_shape), np.int64)
    count = np.prod(red_shape)
    for ordinal in range(out.size):
        unravel(ordinal, keep_shape, keep_index)
        base = position(keep_index, keep_strides, offset)
        acc = a[base] if op == MAX or op == MIN else 0
        for r in range(count):
            unravel(r, red_shape, red_index)
            x = a[position(red_index, red_strides, base)]
            if op == MAX:
                if x > acc or x != x:  # NaN wins, as in numpy
                    acc = x
            elif op == MIN:
                if x < acc or x != x:
                    acc = x
            else:
                acc += x
        if op == MEAN:
            out[ordinal] = acc / count
        else:
            out[ordinal] = acc

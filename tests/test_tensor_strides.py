"""Strides arithmetic against numpy's own views of the same data (the oracle)."""

from __future__ import annotations

import math
import types
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from mlsys_lib.tensor import strides as S
from mlsys_lib.testing.oracles import numpy_view

examples = settings(max_examples=60, deadline=None)

shapes = hnp.array_shapes(min_dims=0, max_dims=4, min_side=0, max_side=5)
nonempty_shapes = hnp.array_shapes(min_dims=0, max_dims=4, min_side=1, max_side=5)


def element_offset(view: np.ndarray, base: np.ndarray) -> int:
    """Position of ``view[0, ..., 0]`` inside ``base``'s buffer, in elements."""
    return (view.__array_interface__["data"][0] - base.__array_interface__["data"][0]) // base.itemsize


def basic_view(x: np.ndarray, key) -> np.ndarray:
    """``x[key]`` as a numpy view even when ``key`` indexes every axis with an int (then numpy gives a scalar)."""
    key = key if isinstance(key, tuple) else (key,)
    return x[key if any(item is Ellipsis for item in key) else key + (...,)]


def element_strides(view: np.ndarray) -> tuple[int, ...]:
    return tuple(s // view.itemsize for s in view.strides)


@st.composite
def numpy_views(draw, base_shapes: st.SearchStrategy = shapes, min_dims: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """``(storage, view)``: a 1-D storage and a random permuted, sliced numpy view of it (>= min_dims axes)."""
    shape = draw(base_shapes)
    storage = np.arange(math.prod(shape), dtype=np.float64)
    x = storage.reshape(shape).transpose(draw(st.permutations(range(len(shape)))))
    key = draw(hnp.basic_indices(x.shape, min_dims=min_dims, allow_newaxis=True, allow_ellipsis=True))
    return storage, basic_view(x, key)


@st.composite
def same_size_shapes(draw, size: int) -> tuple[int, ...]:
    """A random shape with ``size`` elements (size-1 axes included)."""
    if size == 0:
        shape = list(draw(hnp.array_shapes(min_dims=1, max_dims=4, min_side=0, max_side=5)))
        shape[draw(st.integers(0, len(shape) - 1))] = 0
        return tuple(shape)
    factors = prime_factors(size)
    ndim = draw(st.integers(1 if factors else 0, 4))
    shape = [1] * ndim
    for f in factors:
        shape[draw(st.integers(0, ndim - 1))] *= f
    return tuple(shape)


def prime_factors(n: int) -> list[int]:
    factors, f = [], 2
    while n > 1:
        while n % f == 0:
            factors.append(f)
            n //= f
        f += 1
    return factors


def test_public_functions_are_plain_python():
    # The reference guard swaps __code__, which only plain Python functions have.
    for name in S.__all__:
        assert isinstance(getattr(S, name), types.FunctionType), name


def test_lecture_examples():
    assert S.compact_strides((5, 2, 3, 4)) == (24, 12, 4, 1)
    assert S.compact_strides([2, 9, 1]) == (9, 1, 1)
    assert S.compact_strides(()) == ()


@examples
@given(shapes)
def test_compact_strides_match_numpy(shape):
    assert S.compact_strides(shape) == element_strides(np.empty(shape, np.float32))


@examples
@given(numpy_views())
def test_is_compact_matches_numpy_c_contiguous(case):
    _, view = case
    assert S.is_compact(view.shape, element_strides(view)) == view.flags.c_contiguous


@examples
@given(numpy_views())
def test_index_to_position_reads_every_element_of_a_view(case):
    storage, view = case
    offset, strides = element_offset(view, storage), element_strides(view)
    for index in np.ndindex(*view.shape):
        assert storage[S.index_to_position(index, strides, offset)] == view[index]


def test_index_to_position_checks_lengths():
    with pytest.raises(ValueError, match="strides"):
        S.index_to_position((1, 2), (3,))


@examples
@given(hnp.mutually_broadcastable_shapes(num_shapes=3, min_dims=0, max_dims=4, min_side=0, max_side=5))
def test_broadcast_shape_matches_numpy(case):
    assert S.broadcast_shape(*case.input_shapes) == np.broadcast_shapes(*case.input_shapes) == case.result_shape


@examples
@given(shapes, shapes)
def test_broadcast_shape_fails_exactly_when_numpy_does(a, b):
    try:
        expected = np.broadcast_shapes(a, b)
    except ValueError:
        with pytest.raises(ValueError) as error:
            S.broadcast_shape(a, b)
        assert str(a) in str(error.value) and str(b) in str(error.value)
    else:
        assert S.broadcast_shape(a, b) == expected


@examples
@given(hnp.mutually_broadcastable_shapes(num_shapes=2, min_dims=0, max_dims=4, min_side=0, max_side=5))
def test_broadcast_strides_match_numpy(case):
    shape = case.input_shapes[0]
    x = np.zeros(shape, np.float32)[(slice(None, None, -1),) * len(shape)]  # negative strides too
    expected = element_strides(np.broadcast_to(x, case.result_shape))
    assert S.broadcast_strides(shape, element_strides(x), case.result_shape) == expected


def test_broadcast_strides_rejects_incompatible_shapes():
    with pytest.raises(ValueError, match=r"\(3,\).*\(2, 4\)"):
        S.broadcast_strides((3,), (1,), (2, 4))
    with pytest.raises(ValueError, match="fewer axes"):
        S.broadcast_strides((2, 3), (3, 1), (3,))


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_reshape_strides_succeed_exactly_when_numpy_needs_no_copy(data):
    storage, view = data.draw(numpy_views(hnp.array_shapes(min_dims=2, max_dims=4, min_side=2, max_side=6),
                                          min_dims=2))
    new_shape = data.draw(same_size_shapes(view.size))
    strides = S.reshape_strides(view.shape, element_strides(view), new_shape)
    try:
        expected = np.reshape(view, new_shape, copy=False)
    except ValueError:
        assert strides is None
        return
    assert strides is not None
    offset = element_offset(view, storage) if view.size else 0
    ours = numpy_view(SimpleNamespace(storage=storage, shape=new_shape, strides=strides, offset=offset))
    np.testing.assert_array_equal(ours, expected)


def test_reshape_strides_examples():
    # A transposed (3, 2) of a compact (2, 3) cannot be flattened without a copy...
    assert S.reshape_strides((3, 2), (1, 3), (6,)) is None
    # ...but a column slice of a compact (4, 6) can split its rows,
    assert S.reshape_strides((4, 3), (6, 1), (2, 2, 3)) == (12, 6, 1)
    # also unevenly: the columns 0:2 of a compact (6, 5), rows split as 2 x 3.
    assert S.reshape_strides((6, 2), (5, 1), (2, 3, 2)) == (15, 5, 1)
    with pytest.raises(ValueError, match="size 6"):
        S.reshape_strides((2, 3), (3, 1), (4,))


@examples
@given(nonempty_shapes.flatmap(lambda shape: st.tuples(
    st.just(shape), hnp.basic_indices(shape, allow_newaxis=True, allow_ellipsis=True))))
def test_slice_params_match_numpy_views(case):
    shape, key = case
    storage = np.arange(math.prod(shape), dtype=np.float64)
    base = storage.reshape(shape)
    view = basic_view(base, key)
    new_shape, new_strides, offset = S.slice_params(shape, S.compact_strides(shape), 0, key)
    assert new_shape == view.shape
    if view.size:
        assert new_strides == element_strides(view)
        assert offset == element_offset(view, storage)


def test_slice_params_errors():
    with pytest.raises(IndexError, match="index 3 is out of bounds for axis 1 with size 3"):
        S.slice_params((2, 3), (3, 1), 0, (0, 3))
    with pytest.raises(IndexError, match="index -3 is out of bounds for axis 0 with size 2"):
        S.slice_params((2, 3), (3, 1), 0, -3)
    with pytest.raises(IndexError, match="too many indices"):
        S.slice_params((2, 3), (3, 1), 0, (0, 0, 0))
    with pytest.raises(IndexError, match="single ellipsis"):
        S.slice_params((2, 3), (3, 1), 0, (..., 0, ...))
    for advanced in ([0, 1], np.array([0, 1]), True, (slice(None), [0])):
        with pytest.raises(TypeError, match="basic indexing"):
            S.slice_params((2, 3), (3, 1), 0, advanced)
    with pytest.raises(ValueError, match="step cannot be zero"):
        S.slice_params((2, 3), (3, 1), 0, slice(None, None, 0))


def test_shapes_are_validated():
    with pytest.raises(ValueError, match="negative"):
        S.compact_strides((2, -1))
    with pytest.raises(TypeError, match="integers"):
        S.compact_strides((2.5,))

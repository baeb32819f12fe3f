"""NDArray views, compact() and setitem against numpy doing the same on the same data.

Every view is checked three ways: its values (read by our copy kernel) equal numpy's view, numpy's
own reading of our ``(shape, strides, offset)`` gives the same values, and it shares the storage
object of the array it came from.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from test_tensor_strides import same_size_shapes, shapes  # shared strategies

from mlsys_lib.tensor import NDArray, array, from_numpy
from mlsys_lib.testing.oracles import numpy_view

examples = settings(max_examples=60, deadline=None)
nonempty_shapes = hnp.array_shapes(min_dims=1, max_dims=4, min_side=1, max_side=5)


@st.composite
def arrays(draw, shape_strategy: st.SearchStrategy = shapes) -> tuple[NDArray, np.ndarray]:
    """``(ours, ref)``: the same random float32 data as a compact NDArray and as a numpy array."""
    shape = draw(shape_strategy)
    ref = np.random.default_rng(draw(st.integers(0, 2**32 - 1))).standard_normal(shape).astype(np.float32)
    return array(ref), ref


@st.composite
def broadcast_targets(draw, shape: tuple[int, ...]) -> tuple[int, ...]:
    """A shape that ``shape`` broadcasts to: new leading axes, size-1 axes expanded."""
    lead = draw(st.lists(st.integers(0, 3), max_size=4 - len(shape) if len(shape) < 4 else 0))
    return tuple(lead) + tuple(draw(st.integers(0, 3)) if n == 1 else n for n in shape)


@st.composite
def broadcast_sources(draw, shape: tuple[int, ...]) -> tuple[int, ...]:
    """A shape that broadcasts to ``shape``: some leading axes dropped, some axes shrunk to 1."""
    kept = shape[draw(st.integers(0, len(shape))):]
    return tuple(draw(st.sampled_from([n, 1])) for n in kept)


def assert_same_view(ours: NDArray, ref: np.ndarray) -> None:
    assert ours.shape == ref.shape
    np.testing.assert_array_equal(ours.numpy(), ref)  # read by the strided-copy kernel
    np.testing.assert_array_equal(numpy_view(ours), ref)  # read by numpy through our strides
    if ref.size:  # strides of size-1 axes are arbitrary
        assert [s for s, n in zip(ours.strides, ours.shape) if n > 1] == \
               [s // ref.itemsize for s, n in zip(ref.strides, ref.shape) if n > 1]


def apply_view(draw, ours: NDArray, ref: np.ndarray) -> tuple[NDArray, np.ndarray]:
    """One random view (drawn with ``draw``), applied to ``ours`` and mirrored on ``ref`` with numpy."""
    ops = ["index", "broadcast", "reshape"] + (["permute", "T", "transpose"] if ours.ndim else [])
    op = draw(st.sampled_from(ops))
    if op == "permute":
        order = draw(st.permutations(range(ours.ndim)))
        return ours.permute(*order), ref.transpose(order)
    if op == "T":
        return ours.T, ref.T
    if op == "transpose":
        dim0, dim1 = draw(st.tuples(*[st.integers(-ours.ndim, ours.ndim - 1)] * 2))
        return ours.transpose(dim0, dim1), np.swapaxes(ref, dim0, dim1)
    if op == "index":
        key = draw(hnp.basic_indices(ref.shape, allow_newaxis=True, allow_ellipsis=True))
        return ours[key], np.asarray(ref[key])
    if op == "broadcast":
        shape = draw(broadcast_targets(ref.shape))
        return ours.broadcast_to(shape), np.broadcast_to(ref, shape)
    shape = draw(same_size_shapes(ref.size))
    try:
        expected = np.reshape(ref, shape, copy=False)
    except ValueError:
        with pytest.raises(ValueError, match=r"compact\(\)"):
            ours.reshape(shape)
        return ours, ref
    return ours.reshape(*shape), expected


@st.composite
def views(draw, max_ops: int = 4):
    """``(base, view, ref)``: a compact NDArray, a random chain of views of it, and numpy's view."""
    base, ref = draw(arrays(nonempty_shapes))
    view = base
    for _ in range(draw(st.integers(1, max_ops))):
        view, ref = apply_view(draw, view, ref)
    return base, view, ref


@examples
@given(st.data())
def test_view_chains_agree_with_numpy_and_share_storage(data):
    base, ref = data.draw(arrays(shapes | nonempty_shapes))
    view = base
    for _ in range(data.draw(st.integers(1, 4))):
        view, ref = apply_view(data.draw, view, ref)
        assert view.storage is base.storage
        assert_same_view(view, ref)


@examples
@given(views())
def test_compact_is_a_fresh_row_major_copy(case):
    _, view, ref = case
    assert view.is_compact() == ref.flags.c_contiguous
    compact = view.compact()
    expected = np.array(ref, order="C")  # np.ascontiguousarray, but keeping 0-d arrays 0-d
    assert compact.storage is not view.storage and not np.shares_memory(compact.storage, view.storage)
    assert compact.is_compact() and compact.offset == 0 and compact.storage.size == ref.size
    assert compact.strides == tuple(s // expected.itemsize for s in expected.strides)
    np.testing.assert_array_equal(compact.numpy(), expected)


@examples
@given(views(), st.data())
def test_setitem_through_views_matches_numpy(case, data):
    base, view, _ = case
    ref_base = base.numpy()
    # Mirror the view on ref_base through numpy's reading of our strides: a numpy view of ref_base.
    ref_view = np.ndarray(view.shape, ref_base.dtype, buffer=ref_base.reshape(-1),
                          offset=view.offset * ref_base.itemsize,
                          strides=tuple(s * ref_base.itemsize for s in view.strides))
    if any(s == 0 and n > 1 for s, n in zip(view.strides, view.shape)):
        return  # numpy refuses to write through broadcast axes; tested below
    key = data.draw(hnp.basic_indices(view.shape, allow_newaxis=True, allow_ellipsis=True))
    target_shape = np.asarray(ref_view[key]).shape
    kind = data.draw(st.sampled_from(["scalar", "numpy", "ndarray"]))
    if kind == "scalar":
        value = data.draw(st.floats(-10, 10, width=32))
    else:
        values = np.random.default_rng(data.draw(st.integers(0, 99))).standard_normal(
            data.draw(broadcast_sources(target_shape))).astype(np.float32)
        value = values if kind == "numpy" else array(values)
    view[key] = value
    ref_view[key] = value if kind != "ndarray" else values
    np.testing.assert_array_equal(base.numpy(), ref_base)


def test_setitem_with_overlap_reads_before_writing():
    ours, ref = array(np.arange(10)), np.arange(10)
    ours[1:] = ours[:-1]
    ref[1:] = ref[:-1].copy()
    np.testing.assert_array_equal(ours.numpy(), ref)
    ours[::-1] = ours
    ref[::-1] = ref.copy()
    np.testing.assert_array_equal(ours.numpy(), ref)


def test_setitem_casts_and_broadcasts_like_numpy():
    ours, ref = array(np.zeros((2, 3), np.int64)), np.zeros((2, 3), np.int64)
    for key, value in [((0,), 2.7), ((slice(None), 1), np.array([5.5, -1.5])), ((..., 2), np.ones((1, 2)))]:
        ours[key] = value
        ref[key] = value
    np.testing.assert_array_equal(ours.numpy(), ref)
    with pytest.raises(ValueError, match=r"\(2,\).*\(3,\)"):
        ours[0] = np.ones(2)


@settings(max_examples=150, deadline=None)
@given(st.integers(1, 40), hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=4),
       st.lists(st.integers(-4, 4), min_size=3, max_size=3), st.integers(-2, 42))
def test_make_accepts_exactly_the_views_numpy_accepts(storage_size, shape, strides, offset):
    # (storage_size >= 1: numpy skips its bounds check for an empty buffer)
    storage = np.arange(storage_size, dtype=np.float64)
    strides = strides[:len(shape)]
    try:
        expected = np.ndarray(shape, storage.dtype, buffer=storage, offset=offset * storage.itemsize,
                              strides=[s * storage.itemsize for s in strides])
    except (ValueError, TypeError):
        with pytest.raises(ValueError, match=f"storage of size {storage_size}"):
            NDArray.make(storage, shape, strides, offset)
        return
    view = NDArray.make(storage, shape, strides, offset)
    np.testing.assert_array_equal(view.numpy(), expected)
    assert view.storage is storage


def test_lecture_example_strides():
    x = array(np.zeros((5, 2, 3, 4), np.float32))
    assert x.strides == (24, 12, 4, 1)
    y = x.permute(1, 2, 3, 0)
    assert y.shape == (2, 3, 4, 5) and y.strides == (12, 4, 1, 24) and y.storage is x.storage
    assert array(np.zeros((2, 9, 1))).strides == (9, 1, 1)


def test_view_attributes_match_numpy():
    ref = np.arange(60, dtype=np.int32).reshape(3, 4, 5)
    view, expected = array(ref)[1:, ::-2].T, ref[1:, ::-2].T
    assert (view.ndim, view.size, view.itemsize, view.nbytes, view.dtype) == \
           (expected.ndim, expected.size, expected.itemsize, expected.nbytes, expected.dtype)
    assert view.offset == 1 * 20 + 3 * 5
    assert len(view) == 5 and not view.is_compact()
    assert [row.numpy().tolist() for row in view] == expected.tolist() == view.tolist()


def test_reshape_needing_a_copy_says_call_compact():
    x = array(np.arange(6.0).reshape(2, 3)).T
    with pytest.raises(ValueError, match=r"not compact.*compact\(\)"):
        x.reshape(6)
    np.testing.assert_array_equal(x.compact().reshape(6).numpy(), np.arange(6.0).reshape(2, 3).T.reshape(6))


def test_reshape_infers_minus_one():
    x = array(np.arange(24.0))
    assert x.reshape(2, -1, 4).shape == (2, 3, 4)
    assert x.reshape((-1,)).shape == (24,)
    for bad in [(-1, -1), (5, -1), (-2, 12)]:
        with pytest.raises(ValueError, match="shape"):
            x.reshape(bad)
    with pytest.raises(ValueError, match=r"size 24"):
        x.reshape(5, 5)


def test_permute_and_transpose_check_axes():
    x = array(np.zeros((2, 3, 4)))
    with pytest.raises(ValueError, match="not a permutation"):
        x.permute(0, 0, 1)
    with pytest.raises(ValueError, match="not a permutation"):
        x.permute(1, 0)
    with pytest.raises(ValueError, match="dimension 3"):
        x.permute(0, 1, 3)
    with pytest.raises(ValueError, match="dimension 1"):
        array(np.zeros(3)).transpose()


def test_basic_indexing_only():
    x = array(np.zeros((2, 3)))
    with pytest.raises(TypeError, match="basic indexing"):
        x[[0, 1]]
    with pytest.raises(IndexError, match="axis 1 with size 3"):
        x[0, 3]


def test_broadcast_to_rejects_incompatible_shapes():
    with pytest.raises(ValueError, match=r"\(2, 3\).*\(4, 3\)"):
        array(np.zeros((2, 3))).broadcast_to((4, 3))


def test_as_strided_shares_storage_and_checks_bounds():
    x = array(np.arange(6.0))
    window = x.as_strided((4, 3), (1, 1), 0)  # sliding windows of 3
    np.testing.assert_array_equal(window.numpy(), np.lib.stride_tricks.sliding_window_view(np.arange(6.0), 3))
    assert window.storage is x.storage
    with pytest.raises(ValueError, match="storage of size 6"):
        x.as_strided((5, 3), (1, 1))


def test_storage_is_validated():
    with pytest.raises(TypeError, match="numpy array"):
        NDArray([1.0, 2.0], (2,))
    with pytest.raises(ValueError, match="1-D"):
        NDArray(np.zeros((2, 2)), (4,))
    with pytest.raises(TypeError, match="float16"):
        NDArray(np.zeros(4, np.float16), (4,))
    with pytest.raises(ValueError, match="one entry per axis"):
        NDArray(np.zeros(4), (2, 2), (2,))
    with pytest.raises(ValueError, match="negative"):
        NDArray(np.zeros(4), (-1,))


def test_array_copies_and_infers_dtype():
    data = np.arange(6, dtype=np.int32).reshape(2, 3)
    x = array(data)
    assert x.dtype == np.int32 and not np.shares_memory(x.storage, data)
    assert array([1.5, 2.0]).dtype == np.float64 and array([1, 2]).dtype == np.int64
    assert array([True]).dtype == np.bool_ and array([1, 2], dtype=np.float32).dtype == np.float32
    y = array(x.T)
    assert y.is_compact() and y.storage is not x.storage
    np.testing.assert_array_equal(y.numpy(), data.T)
    with pytest.raises(TypeError, match="complex128"):
        array([1j])


def test_from_numpy_shares_memory_only_when_c_contiguous():
    data = np.arange(12.0).reshape(3, 4)
    shared = from_numpy(data)
    shared[0, 0] = 100.0
    assert data[0, 0] == 100.0 and np.shares_memory(shared.storage, data)
    copied = from_numpy(data.T)
    assert not np.shares_memory(copied.storage, data)
    np.testing.assert_array_equal(copied.numpy(), data.T)


def test_numpy_interop():
    x = array(np.arange(12.0).reshape(3, 4))[:, ::-2]
    copy = np.asarray(x)
    np.testing.assert_array_equal(copy, np.arange(12.0).reshape(3, 4)[:, ::-2])
    assert not np.shares_memory(copy, x.storage)
    view = np.asarray(x, copy=False)
    assert np.shares_memory(view, x.storage)
    np.testing.assert_array_equal(view, copy)
    with pytest.raises(ValueError, match="without a copy"):
        np.asarray(x, dtype=np.float32, copy=False)
    assert np.asarray(x, dtype=np.float32).dtype == np.float32


def test_repr_bool_and_item():
    x = array(np.arange(4.0).reshape(2, 2))
    assert "strides=(2, 1)" in repr(x) and "shape=(2, 2)" in repr(x)
    assert x[1, 1].item() == 3.0 and x[1, 1].shape == ()
    assert bool(x[0, 1]) and not bool(x[0, 0])
    with pytest.raises(ValueError, match="ambiguous"):
        bool(x)
    with pytest.raises(TypeError, match="0-d"):
        len(x[0, 0])
    assert math.isclose(float(x.sum().item()), 6.0)

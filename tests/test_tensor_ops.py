"""NDArray arithmetic (elementwise, reductions, @) against numpy on the same, non-compact data."""

from __future__ import annotations

import operator
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from mlsys_lib.tensor import NDArray, array, maximum, minimum

examples = settings(max_examples=60, deadline=None)
shapes = hnp.array_shapes(min_dims=0, max_dims=4, min_side=0, max_side=4)

F32, F64, I32, I64, BOOL = (np.dtype(t) for t in (np.float32, np.float64, np.int32, np.int64, np.bool_))
#: Operand dtype pairs exercised (each pair compiles the kernels once; keep the list short).
DTYPE_PAIRS = [(F32, F32), (F64, F64), (I64, I64), (I32, F32), (F32, F64), (I32, I64)]


def random_values(seed: int, shape: tuple[int, ...], dtype: np.dtype, domain: str = "any") -> np.ndarray:
    """Random values in a domain: "any", "nonzero", "positive" or "exponent" (small, >= 0)."""
    rng = np.random.default_rng(seed)
    if dtype == BOOL:
        return rng.random(shape) < 0.5
    if dtype.kind == "i":
        low, high = {"any": (-5, 6), "nonzero": (1, 6), "positive": (1, 6), "exponent": (0, 4)}[domain]
        values = rng.integers(low, high, shape)
        return (values * (rng.choice([-1, 1], shape) if domain == "nonzero" else 1)).astype(dtype)
    values = rng.standard_normal(shape)
    return (np.abs(values) + 0.5 if domain == "positive" else values).astype(dtype)


@st.composite
def operands(draw, shape: tuple[int, ...], dtype: np.dtype, domain: str = "any") -> tuple[NDArray, np.ndarray]:
    """``(ours, ref)``: a non-compact NDArray of ``shape`` and a numpy array with its values.

    ``ours`` is a permuted, step-sliced (negative steps too) view of a larger compact array.
    """
    ndim = len(shape)
    order = draw(st.permutations(range(ndim)))
    steps = draw(st.lists(st.sampled_from([1, 2, -1, -2]), min_size=ndim, max_size=ndim))
    big = [n * abs(step) for n, step in zip(shape, steps)]
    stored = random_values(draw(st.integers(0, 2**32 - 1)), tuple(big[d] for d in order), dtype, domain)
    inverse = tuple(np.argsort(order))
    key = tuple(slice(None, None, step) for step in steps)
    ref = stored.transpose(inverse)[key]
    ours = array(stored).permute(*inverse)[key]
    assert ours.shape == ref.shape == shape
    return ours, np.array(ref)


BINARY = {
    "add": (operator.add, "any", "any"), "sub": (operator.sub, "any", "any"),
    "mul": (operator.mul, "any", "any"), "truediv": (operator.truediv, "any", "nonzero"),
    "pow": (operator.pow, "positive", "exponent"),
    "maximum": ((maximum, np.maximum), "any", "any"), "minimum": ((minimum, np.minimum), "any", "any"),
    "eq": (operator.eq, "any", "any"), "ne": (operator.ne, "any", "any"), "lt": (operator.lt, "any", "any"),
    "le": (operator.le, "any", "any"), "gt": (operator.gt, "any", "any"), "ge": (operator.ge, "any", "any"),
}


def assert_matches(ours: NDArray, expected: np.ndarray, rtol: float = 1e-6, atol: float = 0.0) -> None:
    assert isinstance(ours, NDArray)
    expected = np.asarray(expected)
    assert ours.shape == expected.shape and ours.dtype == expected.dtype, (ours, expected)
    np.testing.assert_allclose(ours.numpy(), expected, rtol=rtol, atol=atol)


@examples
@given(st.data(), hnp.mutually_broadcastable_shapes(num_shapes=2, min_dims=0, max_dims=4, min_side=0, max_side=4),
       st.sampled_from(DTYPE_PAIRS), st.sampled_from(sorted(BINARY)))
def test_binary_ops_broadcast_like_numpy(data, case, dtypes, name):
    op, domain_a, domain_b = BINARY[name]
    ours_op, numpy_op = op if isinstance(op, tuple) else (op, op)
    a, a_ref = data.draw(operands(case.input_shapes[0], dtypes[0], domain_a))
    b, b_ref = data.draw(operands(case.input_shapes[1], dtypes[1], domain_b))
    assert_matches(ours_op(a, b), numpy_op(a_ref, b_ref))


@pytest.mark.parametrize("dtype", [F32, I32])
@pytest.mark.parametrize("scalar", [2, 2.5, True])
@pytest.mark.parametrize("op", [operator.add, operator.sub, operator.mul, operator.truediv, operator.lt])
def test_python_scalars_follow_numpy_promotion(dtype, scalar, op):
    ref = random_values(7, (3, 4), dtype, "positive")
    ours = array(ref)[::-1]
    ref = ref[::-1]
    assert_matches(op(ours, scalar), op(ref, scalar))
    assert_matches(op(scalar, ours), op(scalar, ref))


def test_numpy_operands_on_either_side():
    ref = random_values(3, (2, 3), F32)
    ours = array(ref)
    other = random_values(4, (3,), F64)
    assert_matches(other + ours, other + ref)
    assert_matches(ours * np.float32(3), ref * np.float32(3))
    assert_matches(ours ** 2, ref ** 2)


def test_nan_propagates_like_numpy():
    a = np.array([np.nan, 1.0, 2.0, np.nan])
    b = np.array([0.0, np.nan, 1.0, np.nan])
    for ours, theirs in [(maximum, np.maximum), (minimum, np.minimum)]:
        np.testing.assert_array_equal(ours(array(a), array(b)).numpy(), theirs(a, b))
    grid = np.array([[1.0, np.nan, 3.0], [4.0, 5.0, 6.0]])
    for name in ["max", "min", "sum"]:
        np.testing.assert_array_equal(getattr(array(grid), name)(axis=1).numpy(), getattr(grid, name)(axis=1))


def test_shape_mismatch_names_both_shapes():
    with pytest.raises(ValueError, match=r"\(2, 3\).*\(4,\)"):
        array(np.zeros((2, 3))) + array(np.zeros(4))
    with pytest.raises(ValueError, match=r"\(2, 3\).*\(2,\)"):
        maximum(array(np.zeros((2, 3))), np.zeros(2))


UNARY = {"neg": (operator.neg, np.negative, "any"), "abs": (abs, np.abs, "any"),
         "exp": (NDArray.exp, np.exp, "any"), "log": (NDArray.log, np.log, "positive"),
         "tanh": (NDArray.tanh, np.tanh, "any")}


@examples
@given(st.data(), shapes,
       st.sampled_from([F32, F64, I64]), st.sampled_from(sorted(UNARY)))
def test_unary_ops_match_numpy(data, shape, dtype, name):
    ours_op, numpy_op, domain = UNARY[name]
    a, ref = data.draw(operands(shape, dtype, domain))
    assert_matches(ours_op(a), numpy_op(ref), rtol=2e-6)


def test_negating_bools_is_refused():
    with pytest.raises(TypeError, match="bool"):
        -array([True, False])


@st.composite
def axes(draw, ndim: int):
    """None, an int or a tuple of ints, sometimes out of range or repeated (numpy must agree).

    (numpy lets a 0-d array be reduced over axis 0 or -1; NDArray does not follow that quirk.)
    """
    if ndim == 0:
        return draw(st.sampled_from([None, ()]))
    axis = st.integers(-ndim - 1, ndim)
    return draw(st.none() | axis | st.lists(axis, max_size=ndim + 1).map(tuple))


@examples
@given(st.data(), shapes, st.sampled_from([F32, F64, I32, I64, BOOL]), st.sampled_from(["sum", "mean", "max", "min"]),
       st.booleans())
def test_reductions_match_numpy(data, shape, dtype, name, keepdims):
    a, ref = data.draw(operands(shape, dtype))
    axis = data.draw(axes(len(shape)))
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # mean of an empty slice
            expected = np.asarray(getattr(ref, name)(axis=axis, keepdims=keepdims))
            # float sums are compared with an exact float64 sum: ours accumulates in float64
            exact = np.asarray(getattr(ref.astype(np.float64) if dtype.kind == "f" else ref, name)(
                axis=axis, keepdims=keepdims))
    except ValueError:  # bad or repeated axis, or max/min of an empty axis
        with pytest.raises(ValueError):
            getattr(a, name)(axis=axis, keepdims=keepdims)
        return
    ours = getattr(a, name)(axis=axis, keepdims=keepdims)
    assert ours.shape == expected.shape and ours.dtype == expected.dtype
    np.testing.assert_allclose(ours.numpy(), exact.astype(expected.dtype), rtol=1e-6, atol=1e-6)


def test_bad_axis_names_the_dimension():
    with pytest.raises(ValueError, match="dimension 2"):
        array(np.zeros((2, 3))).sum(axis=2)
    with pytest.raises(ValueError, match="duplicate"):
        array(np.zeros((2, 3))).max(axis=(0, -2))
    with pytest.raises(ValueError, match="empty"):
        array(np.zeros((0, 3))).max(axis=0)


@st.composite
def matmul_shapes(draw) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Shapes for numpy's matmul: 1-D or matrices with broadcast batch axes, inner sizes equal."""
    m, n, p = draw(st.integers(1, 5)), draw(st.integers(1, 6)), draw(st.integers(1, 5))
    batches = draw(hnp.mutually_broadcastable_shapes(num_shapes=2, max_dims=2, max_side=3))
    a = (n,) if draw(st.booleans()) and not batches.input_shapes[0] else batches.input_shapes[0] + (m, n)
    b = (n,) if draw(st.booleans()) and not batches.input_shapes[1] else batches.input_shapes[1] + (n, p)
    return a, b


@examples
@given(st.data(), matmul_shapes(), st.sampled_from([(F32, F32), (F64, F64), (F32, F64)]))
def test_matmul_operator_matches_numpy(data, case, dtypes):
    a, a_ref = data.draw(operands(case[0], dtypes[0]))
    b, b_ref = data.draw(operands(case[1], dtypes[1]))
    assert_matches(a @ b, a_ref @ b_ref, rtol=1e-5, atol=1e-5)


def test_matmul_errors():
    a, b = array(np.zeros((2, 3))), array(np.zeros((4, 5)))
    with pytest.raises(ValueError, match=r"\(2, 3\) and \(4, 5\)"):
        a @ b
    with pytest.raises(ValueError, match=r"batch axes.*\(2, 2, 3\).*\(3, 3, 5\)"):
        array(np.zeros((2, 2, 3))) @ array(np.zeros((3, 3, 5)))
    with pytest.raises(TypeError, match="int64"):
        array(np.zeros((2, 3), np.int64)) @ array(np.zeros((3, 2), np.int64))
    with pytest.raises(ValueError, match="at least one axis"):
        a @ 2.0

"""The four matmul steps against numpy's ``A @ B``, at sizes that are not multiples of the tile."""

from __future__ import annotations

import functools
import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mlsys_lib.tensor import MATMUL_STEPS, matmul_naive, matmul_parallel, matmul_tiled, time_best

RTOL = {np.float32: 2e-5, np.float64: 1e-12}
SIZES = [1, 7, 33, 65, 130]


def random_matrices(m: int, n: int, p: int, dtype=np.float32, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.standard_normal((m, n)).astype(dtype), rng.standard_normal((n, p)).astype(dtype)


def assert_matmul(C: np.ndarray, A: np.ndarray, B: np.ndarray) -> None:
    expected = A.astype(np.float64) @ B.astype(np.float64)
    assert C.shape == expected.shape and C.dtype == A.dtype
    # Scale the tolerance by the size of the terms summed, not of their (possibly tiny) sum.
    scale = np.abs(A).astype(np.float64) @ np.abs(B).astype(np.float64)
    assert np.all(np.abs(C - expected) <= RTOL[A.dtype.type] * scale + 1e-30)


def test_steps_are_in_lecture_order():
    assert list(MATMUL_STEPS) == ["naive", "reordered", "tiled", "parallel"]


@pytest.mark.parametrize("step", MATMUL_STEPS)
@pytest.mark.parametrize("m, n, p", [(1, 1, 1), (7, 33, 65), (130, 7, 33), (65, 130, 1), (33, 65, 130)])
def test_steps_match_numpy_on_ragged_sizes(step, m, n, p):
    A, B = random_matrices(m, n, p)
    assert_matmul(MATMUL_STEPS[step](A, B), A, B)


@pytest.mark.parametrize("step", MATMUL_STEPS)
def test_steps_in_float64(step):
    A, B = random_matrices(65, 33, 130, np.float64)
    assert_matmul(MATMUL_STEPS[step](A, B), A, B)


@settings(max_examples=40, deadline=None)
@given(st.sampled_from(SIZES), st.sampled_from(SIZES), st.sampled_from(SIZES),
       st.tuples(*[st.integers(1, 9)] * 3), st.sampled_from([matmul_tiled, matmul_parallel]))
def test_tiled_steps_handle_any_tile(m, n, p, tile, matmul):
    A, B = random_matrices(m, n, p, seed=m * n * p)
    assert_matmul(matmul(A, B, tile=tile), A, B)


def test_edge_shapes_and_layouts():
    for step, (m, n, p) in itertools.product(MATMUL_STEPS.values(), [(0, 3, 2), (2, 0, 3), (3, 2, 0)]):
        A, B = random_matrices(m, n, p)
        np.testing.assert_array_equal(step(A, B), np.zeros((m, p), np.float32))
    A, B = random_matrices(9, 10, 11)
    At, Bt = np.asfortranarray(A), B.T.copy().T  # non-C-contiguous inputs
    for step in MATMUL_STEPS.values():
        assert_matmul(step(At, Bt), A, B)


def test_input_errors():
    A, B = random_matrices(2, 3, 4)
    with pytest.raises(ValueError, match=r"\(2, 3\).*\(2, 4\)"):
        matmul_tiled(A, B[:2])
    with pytest.raises(ValueError, match="2-D"):
        matmul_naive(A[0], B)
    with pytest.raises(TypeError, match="int64"):
        matmul_naive(A.astype(np.int64), B)
    with pytest.raises(TypeError, match="same dtype"):
        matmul_parallel(A, B.astype(np.float64))
    with pytest.raises(TypeError, match="numpy array"):
        matmul_tiled(A.tolist(), B)
    for bad_tile in [0, (4, 4), (4, -1, 4), 2.5]:
        with pytest.raises(ValueError, match="tile"):
            matmul_tiled(A, B, tile=bad_tile)


def test_tiled_is_much_faster_than_naive():
    A, B = random_matrices(256, 256, 256)
    naive = time_best(functools.partial(matmul_naive, A, B), 2)
    tiled = time_best(functools.partial(matmul_tiled, A, B), 3)
    assert naive / tiled >= 5, f"tiled is only {naive / tiled:.1f}x faster than naive"

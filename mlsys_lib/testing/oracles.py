"""Independent oracles for tests: numpy's view of a strided array, storage sharing, tolerances."""

from __future__ import annotations

import numpy as np

#: Relative tolerance by dtype for results that sum many products (matmul, reductions).
RTOL = {np.dtype(np.float16): 1e-2, np.dtype(np.float32): 1e-4, np.dtype(np.float64): 1e-10}


def numpy_view(array) -> np.ndarray:
    """numpy's own view of a strided array (anything with storage, shape, strides in elements, offset).

    Built by ``np.ndarray`` over the same buffer, which checks every reachable element lies inside
    the storage. Reads through it never touch the array's own methods.
    """
    storage = array.storage
    itemsize = storage.dtype.itemsize
    return np.ndarray(tuple(array.shape), dtype=storage.dtype, buffer=storage,
                      offset=int(array.offset) * itemsize,
                      strides=tuple(int(s) * itemsize for s in array.strides))


def shares_storage(a, b) -> bool:
    """True if the two strided arrays are views of the same storage buffer."""
    return np.shares_memory(a.storage, b.storage) or a.storage is b.storage


def assert_close(actual, expected, rtol: float | None = None, atol: float = 0.0) -> None:
    """``np.testing.assert_allclose`` with the tolerance of the less precise dtype; shapes must match."""
    actual, expected = np.asarray(actual), np.asarray(expected)
    if actual.shape != expected.shape:
        raise AssertionError(f"shape {actual.shape} != expected {expected.shape}")
    if rtol is None:
        rtol = max(RTOL.get(actual.dtype, 1e-6), RTOL.get(expected.dtype, 1e-6))
    np.testing.assert_allclose(actual, expected, rtol=rtol, atol=atol)

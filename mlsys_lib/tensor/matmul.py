"""Matrix multiplication ``C = A @ B`` in the four steps of the lecture, each a Numba kernel.

Shapes: ``A`` is (m, n), ``B`` is (n, p), ``C`` is (m, p); float32 or float64 (both the same).

1. **naive** (i-j-k): ``C[i, j] += A[i, k] * B[k, j]``; the inner loop walks down a column of B,
   one cache line per multiply-add.
2. **reordered** (i-k-j): ``C[i, :] += A[i, k] * B[k, :]``; the inner loop is contiguous in C and
   B, so LLVM vectorizes it.
3. **tiled**: the loops are blocked into ``(rows, cols, depth)`` tiles so that the operands of a
   tile stay in cache while they are reused. Inside a tile a 4x4 *micro-kernel* keeps 16 entries
   of C in registers and streams 4 rows of A and 4 rows of B^T along contiguous k (B is packed
   transposed once, O(np) work against the O(mnp) product). Tiles and blocks at the ragged edges
   (sizes that are not multiples of the tile or of 4) fall back to one dot product per entry.
4. **parallel**: the tiled kernel with the row tiles of C spread over the cores (``prange``);
   each thread writes disjoint rows, so no two threads touch the same entry.

The kernels use ``fastmath`` so that LLVM may reassociate the float sums it vectorizes; results
therefore differ from numpy's only by rounding.
"""

from __future__ import annotations

import operator
from typing import Callable

import numpy as np
from numba import njit, prange

__all__ = ["matmul_naive", "matmul_reordered", "matmul_tiled", "matmul_parallel", "MATMUL_STEPS",
           "DEFAULT_TILE"]

#: Default (rows, cols, depth) tile of C and of the k range, measured best on a 2-core Xeon with
#: 48 KiB L1d and 2 MiB L2 per core at n = 512..2048: a 4 x 512 strip of A and of B^T (8 KiB each
#: in float32) stays in L1 while the 64 x 512 block of B^T (128 KiB) stays in L2.
DEFAULT_TILE = (64, 64, 512)

_PACK_BLOCK = 64  # columns of B transposed per block while packing (keeps reads and writes in cache)


# ---- the four kernels: (A, B, C[, tile]) with C zero-filled, accumulated in place ----------------

@njit(cache=True, fastmath=True)
def _naive_kernel(A, B, C):
    m, n = A.shape
    p = B.shape[1]
    for i in range(m):
        for j in range(p):
            for k in range(n):
                C[i, j] += A[i, k] * B[k, j]


@njit(cache=True, fastmath=True)
def _reordered_kernel(A, B, C):
    m, n = A.shape
    p = B.shape[1]
    for i in range(m):
        for k in range(n):
            a = A[i, k]
            for j in range(p):
                C[i, j] += a * B[k, j]


@njit(cache=True)
def _pack_transposed(B, Bt, j0, j1):
    """``Bt[j, :] = B[:, j]`` for columns ``j0 <= j < j1``, blocked over k."""
    n = B.shape[0]
    for k0 in range(0, n, _PACK_BLOCK):
        for j in range(j0, j1):
            for k in range(k0, min(k0 + _PACK_BLOCK, n)):
                Bt[j, k] = B[k, j]


@njit(inline="always", fastmath=True)
def _dot(a, b):
    """Dot product of two 1-D arrays of the same nonzero length."""
    acc = a[0] * b[0]
    for k in range(1, a.size):
        acc += a[k] * b[k]
    return acc


@njit(inline="always", fastmath=True)
def _micro_kernel_4x4(A, Bt, C, i, j, k0, k1):
    """``C[i:i+4, j:j+4] += A[i:i+4, k0:k1] @ Bt[j:j+4, k0:k1].T`` with 16 register accumulators."""
    a0, a1, a2, a3 = A[i, k0:k1], A[i + 1, k0:k1], A[i + 2, k0:k1], A[i + 3, k0:k1]
    b0, b1, b2, b3 = Bt[j, k0:k1], Bt[j + 1, k0:k1], Bt[j + 2, k0:k1], Bt[j + 3, k0:k1]
    zero = C.dtype.type(0)
    c00 = c01 = c02 = c03 = c10 = c11 = c12 = c13 = zero
    c20 = c21 = c22 = c23 = c30 = c31 = c32 = c33 = zero
    for k in range(k1 - k0):
        x0, x1, x2, x3 = a0[k], a1[k], a2[k], a3[k]
        y0, y1, y2, y3 = b0[k], b1[k], b2[k], b3[k]
        c00 += x0 * y0
        c01 += x0 * y1
        c02 += x0 * y2
        c03 += x0 * y3
        c10 += x1 * y0
        c11 += x1 * y1
        c12 += x1 * y2
        c13 += x1 * y3
        c20 += x2 * y0
        c21 += x2 * y1
        c22 += x2 * y2
        c23 += x2 * y3
        c30 += x3 * y0
        c31 += x3 * y1
        c32 += x3 * y2
        c33 += x3 * y3
    C[i, j] += c00
    C[i, j + 1] += c01
    C[i, j + 2] += c02
    C[i, j + 3] += c03
    C[i + 1, j] += c10
    C[i + 1, j + 1] += c11
    C[i + 1, j + 2] += c12
    C[i + 1, j + 3] += c13
    C[i + 2, j] += c20
    C[i + 2, j + 1] += c21
    C[i + 2, j + 2] += c22
    C[i + 2, j + 3] += c23
    C[i + 3, j] += c30
    C[i + 3, j + 1] += c31
    C[i + 3, j + 2] += c32
    C[i + 3, j + 3] += c33


@njit(inline="always", fastmath=True)
def _tile(A, Bt, C, i0, i1, j0, j1, k0, k1):
    """``C[i0:i1, j0:j1] += A[i0:i1, k0:k1] @ Bt[j0:j1, k0:k1].T`` in 4x4 blocks (k1 > k0)."""
    for i in range(i0, i1, 4):
        for j in range(j0, j1, 4):
            if i + 4 <= i1 and j + 4 <= j1:
                _micro_kernel_4x4(A, Bt, C, i, j, k0, k1)
            else:  # ragged edge block
                for ii in range(i, min(i + 4, i1)):
                    for jj in range(j, min(j + 4, j1)):
                        C[ii, jj] += _dot(A[ii, k0:k1], Bt[jj, k0:k1])


@njit(cache=True, fastmath=True)
def _row_tile(A, Bt, C, i0, i1, tile_cols, tile_depth):
    """All of ``C[i0:i1, :] += A[i0:i1, :] @ Bt.T``, one (depth, cols) tile at a time.

    A compiled function of its own (not inlined) that both kernels call: the parallel kernel's
    prange loop then stays small, which keeps its compile time short; LLVM still inlines it.
    """
    n = A.shape[1]
    p = Bt.shape[0]
    for k0 in range(0, n, tile_depth):
        for j0 in range(0, p, tile_cols):
            _tile(A, Bt, C, i0, i1, j0, min(j0 + tile_cols, p), k0, min(k0 + tile_depth, n))


@njit(cache=True, fastmath=True)
def _tiled_kernel(A, B, C, tile_rows, tile_cols, tile_depth):
    m, n = A.shape
    p = B.shape[1]
    Bt = np.empty((p, n), B.dtype)
    _pack_transposed(B, Bt, 0, p)
    for i0 in range(0, m, tile_rows):
        _row_tile(A, Bt, C, i0, min(i0 + tile_rows, m), tile_cols, tile_depth)


@njit(cache=True, fastmath=True, parallel=True)
def _parallel_kernel(A, B, C, tile_rows, tile_cols, tile_depth):
    m, n = A.shape
    p = B.shape[1]
    Bt = np.empty((p, n), B.dtype)
    for t in prange((p + _PACK_BLOCK - 1) // _PACK_BLOCK):
        _pack_transposed(B, Bt, t * _PACK_BLOCK, min((t + 1) * _PACK_BLOCK, p))
    for t in prange((m + tile_rows - 1) // tile_rows):
        i0 = t * tile_rows
        _row_tile(A, Bt, C, i0, min(i0 + tile_rows, m), tile_cols, tile_depth)


# ---- public wrappers: check the inputs, allocate C, run a kernel ---------------------------------

def _launch(kernel: Callable, A: np.ndarray, B: np.ndarray, *tile: int) -> np.ndarray:
    """Check ``A`` (m, n) and ``B`` (n, p), then return ``C`` (m, p) computed by ``kernel``."""
    for name, X in (("A", A), ("B", B)):
        if not isinstance(X, np.ndarray):
            raise TypeError(f"matmul: {name} must be a numpy array, got {type(X).__name__}")
        if X.ndim != 2:
            raise ValueError(f"matmul: {name} must be 2-D, got shape {X.shape}")
        if X.dtype not in (np.float32, np.float64):
            raise TypeError(f"matmul: {name} must be float32 or float64, got {X.dtype}")
    if A.dtype != B.dtype:
        raise TypeError(f"matmul: A and B must have the same dtype, got {A.dtype} and {B.dtype}")
    if A.shape[1] != B.shape[0]:
        raise ValueError(f"matmul: inner dimensions differ: A {A.shape} @ B {B.shape} "
                         f"({A.shape[1]} != {B.shape[0]})")
    C = np.zeros((A.shape[0], B.shape[1]), A.dtype)
    kernel(np.ascontiguousarray(A), np.ascontiguousarray(B), C, *tile)
    return C


def _tile_sizes(tile: int | tuple[int, int, int]) -> tuple[int, int, int]:
    """``(rows, cols, depth)`` from an int or a triple; ValueError unless all are positive ints."""
    try:
        sizes = tuple(operator.index(t) for t in (tile if isinstance(tile, (tuple, list)) else (tile,) * 3))
    except TypeError:
        sizes = ()
    if len(sizes) != 3 or min(sizes) <= 0:
        raise ValueError(f"tile must be a positive int or a (rows, cols, depth) triple of them, got {tile!r}")
    return sizes


def matmul_naive(A: np.ndarray, B: np.ndarray) -> np.ndarray:
    """Step 1: ``A @ B`` with the i-j-k loop order. A (m, n), B (n, p) -> C (m, p)."""
    return _launch(_naive_kernel, A, B)


def matmul_reordered(A: np.ndarray, B: np.ndarray) -> np.ndarray:
    """Step 2: ``A @ B`` with the i-k-j loop order (contiguous, vectorized inner loop)."""
    return _launch(_reordered_kernel, A, B)


def matmul_tiled(A: np.ndarray, B: np.ndarray, tile: int | tuple[int, int, int] = DEFAULT_TILE) -> np.ndarray:
    """Step 3: cache-tiled ``A @ B`` with a 4x4 register micro-kernel; any sizes, any tile.

    ``tile`` is ``(rows, cols, depth)``: the block of C and the slice of k computed at a time
    (an int means the same for all three).
    """
    return _launch(_tiled_kernel, A, B, *_tile_sizes(tile))


def matmul_parallel(A: np.ndarray, B: np.ndarray, tile: int | tuple[int, int, int] = DEFAULT_TILE) -> np.ndarray:
    """Step 4: :func:`matmul_tiled` with the row tiles of C computed in parallel (Numba ``prange``)."""
    return _launch(_parallel_kernel, A, B, *_tile_sizes(tile))


#: The four steps, in the lecture's order: name -> function(A, B) -> C.
MATMUL_STEPS: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    "naive": matmul_naive,
    "reordered": matmul_reordered,
    "tiled": matmul_tiled,
    "parallel": matmul_parallel,
}

"""GPU matmul ``C = A @ B`` in the lecture's three steps, counting global reads as the lecture does.

Shapes: ``A`` is (M, K), ``B`` is (K, P), ``C`` is (M, P), all float32. For square N x N inputs:

* **naive**: one thread per entry of C, ``2N`` global reads each, ``N^2`` threads:
  ``2N^3`` global reads.
* **register-blocked** (the lecture's "thread tiling" with partial sums): each thread computes a
  V x V sub-block of C in registers; for every k it loads V values of A's column k and V values of
  B's row k and does the V x V outer product. ``2NV`` reads per thread, ``N^2 / V^2`` threads:
  ``2N^3 / V`` global reads.
* **tiled** (shared memory): a block of L x L threads computes an L x L tile of C; it walks the
  k dimension in steps of L, each step copying an L x L tile of A and one of B into shared memory
  (one element per thread), ``__syncthreads()``, then L multiply-adds per thread from shared
  memory, ``__syncthreads()`` again before the tiles are overwritten. ``2LN`` global reads per
  block, ``N^2 / L^2`` blocks: ``2N^3 / L`` global reads; ``2N`` shared reads per thread.

For any M, K, P (not only multiples of L or V) the bound guards read nothing outside A and B, and
the counts are exactly ``M K ceil(P / t) + K P ceil(M / t)`` for tile ``t`` (``t = 1`` naive).
"""

from __future__ import annotations

import functools

import numpy as np
from numba import cuda, float32

from .checks import block_threads, ceil_div, float32_array, positive_int
from .plan import HostOp, KernelPlan, KernelStep
from .tiles import block_thread_id, load_tile

_ZERO = float32(0.0)


@cuda.jit
def matmul_naive_kernel(A, B, C):
    col, row = cuda.grid(2)  # x runs along a row of C: neighbouring threads read neighbouring B entries
    if row < C.shape[0] and col < C.shape[1]:
        acc = _ZERO
        for k in range(A.shape[1]):
            acc += A[row, k] * B[k, col]
        C[row, col] = acc


@functools.lru_cache(maxsize=None)
def _matmul_tiled_kernel(tile: int):
    """The shared-memory kernel for ``tile`` x ``tile`` blocks (the tile size is fixed at compile time)."""
    threads = tile * tile

    @cuda.jit
    def matmul_tiled_kernel(A, B, C):
        sA = cuda.shared.array((tile, tile), float32)
        sB = cuda.shared.array((tile, tile), float32)
        tx = cuda.threadIdx.x
        ty = cuda.threadIdx.y
        row0 = cuda.blockIdx.y * tile
        col0 = cuda.blockIdx.x * tile
        tid = block_thread_id()
        acc = _ZERO
        for k0 in range(0, A.shape[1], tile):
            load_tile(sA, A, row0, k0, tid, threads)
            load_tile(sB, B, k0, col0, tid, threads)
            cuda.syncthreads()
            for k in range(tile):
                acc += sA[ty, k] * sB[k, tx]
            cuda.syncthreads()  # everyone is done with these tiles before the next ones overwrite them
        if row0 + ty < C.shape[0] and col0 + tx < C.shape[1]:
            C[row0 + ty, col0 + tx] = acc

    return matmul_tiled_kernel


@functools.lru_cache(maxsize=None)
def _matmul_register_kernel(v: int):
    """The register-blocked kernel: each thread a ``v`` x ``v`` sub-block of C (``v`` fixed at compile time)."""

    @cuda.jit
    def matmul_register_kernel(A, B, C):
        tcol, trow = cuda.grid(2)
        r0 = trow * v
        c0 = tcol * v
        M, P = C.shape
        if r0 >= M or c0 >= P:
            return
        acc = cuda.local.array((v, v), float32)
        a = cuda.local.array(v, float32)
        b = cuda.local.array(v, float32)
        for x in range(v):
            for y in range(v):
                acc[x, y] = _ZERO
        for k in range(A.shape[1]):
            for x in range(v):
                if r0 + x < M:
                    a[x] = A[r0 + x, k]
                else:
                    a[x] = _ZERO
            for y in range(v):
                if c0 + y < P:
                    b[y] = B[k, c0 + y]
                else:
                    b[y] = _ZERO
            for x in range(v):
                for y in range(v):
                    acc[x, y] += a[x] * b[y]
        for x in range(v):
            for y in range(v):
                if r0 + x < M and c0 + y < P:
                    C[r0 + x, c0 + y] = acc[x, y]

    return matmul_register_kernel


def checked_operands(A: np.ndarray, B: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Validated ``(A, B, C)`` with C the (M, P) output, allocated."""
    A = float32_array("A", A, 2)
    B = float32_array("B", B, 2)
    if A.shape[1] != B.shape[0]:
        raise ValueError(f"A @ B needs A's columns to match B's rows, got A {A.shape} and B {B.shape}")
    return A, B, np.empty((A.shape[0], B.shape[1]), dtype=np.float32)


def matmul_modeled_bytes(M: int, K: int, P: int, tile: int | tuple[int, int]) -> int:
    """Global traffic [bytes] of a kernel reusing each loaded value ``tile`` times (``tile = 1``: naive).

    ``M K ceil(P / tile)`` reads of A, ``K P ceil(M / tile)`` reads of B, ``M P`` writes of C;
    ``2N^3 / tile`` reads for square matrices whose size is a multiple of ``tile``. A rectangular
    ``tile = (rows, cols)`` of C reads A ``ceil(P / cols)`` times and B ``ceil(M / rows)`` times.
    """
    rows, cols = (tile, tile) if isinstance(tile, int) else tile
    return 4 * (M * K * ceil_div(P, cols) + K * P * ceil_div(M, rows) + M * P)


def matmul_plan(name: str, kernel: object, grid: tuple[int, ...], block: tuple[int, ...], A: np.ndarray,
                B: np.ndarray, C: np.ndarray, reuse: int | tuple[int, int]) -> KernelPlan:
    """The one-launch plan ``kernel[grid, block](A, B, C)``: ``2 M K P`` FLOPs, the traffic of a ``reuse`` tile.

    Compulsory traffic: A and B read once, C written once, ``4 (M K + K P + M P)`` bytes.
    """
    M, K = A.shape
    P = B.shape[1]
    return KernelPlan(name, (KernelStep(kernel, grid, block, (A, B, C)),), C, flops=2 * M * K * P,
                      modeled_bytes=matmul_modeled_bytes(M, K, P, reuse),
                      compulsory_bytes=4 * (M * K + K * P + M * P))


@HostOp
def matmul_naive(A: np.ndarray, B: np.ndarray, block: int = 16) -> KernelPlan:
    """``A @ B`` for float32 A (M, K) and B (K, P) -> (M, P); one thread per output, ``block`` x ``block`` blocks."""
    A, B, C = checked_operands(A, B)
    block = positive_int("block", block)
    block_threads(f"block={block} ({block} x {block})", block * block)
    grid = (ceil_div(C.shape[1], block), ceil_div(C.shape[0], block))
    return matmul_plan("matmul_naive", matmul_naive_kernel, grid, (block, block), A, B, C, reuse=1)


@HostOp
def matmul_tiled(A: np.ndarray, B: np.ndarray, tile: int = 16) -> KernelPlan:
    """``A @ B`` (float32, (M, K) @ (K, P) -> (M, P)) with ``tile`` x ``tile`` shared-memory tiles.

    One block of ``tile`` x ``tile`` threads per tile of C; ``2 * tile^2 * 4`` bytes of shared memory.
    """
    A, B, C = checked_operands(A, B)
    tile = positive_int("tile", tile)
    block_threads(f"tile={tile} ({tile} x {tile} threads)", tile * tile)
    grid = (ceil_div(C.shape[1], tile), ceil_div(C.shape[0], tile))
    return matmul_plan("matmul_tiled", _matmul_tiled_kernel(tile), grid, (tile, tile), A, B, C, reuse=tile)


@HostOp
def matmul_register_blocked(A: np.ndarray, B: np.ndarray, v: int = 4, block: int = 8) -> KernelPlan:
    """``A @ B`` (float32, (M, K) @ (K, P) -> (M, P)), each thread a ``v`` x ``v`` sub-block of C in registers.

    Blocks of ``block`` x ``block`` threads, so one block covers ``block * v`` rows and columns of C.
    """
    A, B, C = checked_operands(A, B)
    v = positive_int("v", v)
    block = positive_int("block", block)
    block_threads(f"block={block} ({block} x {block})", block * block)
    threads = (ceil_div(C.shape[1], v), ceil_div(C.shape[0], v))
    grid = (ceil_div(threads[0], block), ceil_div(threads[1], block))
    return matmul_plan("matmul_register_blocked", _matmul_register_kernel(v), grid, (block, block), A, B, C, reuse=v)

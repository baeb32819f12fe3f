"""The fast GPU matmul ``C = A @ B``: 2-D block tiling with register blocking (the step after ``matmul``'s three).

Shapes: ``A`` is (M, K), ``B`` is (K, P), ``C`` is (M, P), all float32. It combines the lecture's two
reuse tricks (Simon Boehm's SGEMM worklog, kernels 4 and 5):

* **block tile in shared memory**: a block of ``(bm / tm) x (bn / tn)`` threads owns a ``bm x bn``
  tile of C; it walks k in steps of ``bk``, copying a ``bm x bk`` slab of A (stored transposed,
  ``sA[k, m]``) and a ``bk x bn`` slab of B into shared memory with coalesced reads (consecutive
  threads read consecutive addresses of a row), ``syncthreads()``, computes, ``syncthreads()``;
* **register tile per thread**: thread ``(ty, tx)`` computes the ``tm x tn`` entries of C at rows
  ``ty + i * (bm / tm)`` and columns ``tx + j * (bn / tn)``. For every k it loads ``tm`` values of
  A and ``tn`` of B from shared memory into registers and does the ``tm x tn`` outer product:
  ``tm tn`` multiply-adds for ``tm + tn`` shared loads (64 for 16 with 8 x 8).

The *strided* register tile (not ``tm`` adjacent rows) keeps shared reads free of bank conflicts
without vector loads: the 16 threads of a warp that share a ``ty`` read 16 consecutive words of
``sB``, and their stores of C are coalesced. Global reads: every element of A is read
``ceil(P / bn)`` times, of B ``ceil(M / bm)`` times, so for N x N inputs ``N^3 (1/bm + 1/bn)``
reads, 64x fewer than the naive kernel's ``2 N^3`` with 128 x 128 tiles. Default tile: 128 x 128,
``bk = 8``, 8 x 8 per thread, 256 threads (8 warps), ``2 * 8 * 128 * 4 = 8 KiB`` of shared memory.
Any M, K, P: loads outside A or B fill zeros, stores outside C are skipped.
"""

from __future__ import annotations

import functools

import numpy as np
from numba import cuda, float32

from .gpu.device import launch_bounds
from .checks import block_threads, ceil_div, positive_int, shared_bytes
from .matmul import checked_operands, matmul_plan
from .plan import HostOp, KernelPlan
from .tiles import load_tile

_ZERO = float32(0.0)


@functools.lru_cache(maxsize=None)
def _matmul_block_tiled_kernel(bm: int, bn: int, bk: int, tm: int, tn: int):
    """The kernel for ``bm x bn`` block tiles, ``bk`` deep, ``tm x tn`` per thread (all fixed at compile time)."""
    ty_count, tx_count = bm // tm, bn // tn  # threads along the rows and the columns of the tile
    threads = ty_count * tx_count

    @cuda.jit(**launch_bounds(threads, 2))
    def matmul_block_tiled_kernel(A, B, C):
        sA = cuda.shared.array((bk, bm), float32)  # A's slab transposed: sA[k, row]
        sB = cuda.shared.array((bk, bn), float32)
        acc = cuda.local.array((tm, tn), float32)
        a = cuda.local.array(tm, float32)
        b = cuda.local.array(tn, float32)
        tid = cuda.threadIdx.x
        ty = tid // tx_count
        tx = tid - ty * tx_count
        row0 = cuda.blockIdx.y * bm
        col0 = cuda.blockIdx.x * bn
        M, K = A.shape
        P = B.shape[1]
        for i in range(tm):
            for j in range(tn):
                acc[i, j] = _ZERO
        for k0 in range(0, K, bk):
            for e in range(tid, bm * bk, threads):  # consecutive threads: consecutive k of one row of A
                r = e // bk
                c = e - r * bk
                if row0 + r < M and k0 + c < K:
                    sA[c, r] = A[row0 + r, k0 + c]
                else:
                    sA[c, r] = _ZERO
            load_tile(sB, B, k0, col0, tid, threads)  # consecutive threads: consecutive columns of B
            cuda.syncthreads()
            for k in range(bk):
                for i in range(tm):
                    a[i] = sA[k, ty + i * ty_count]
                for j in range(tn):
                    b[j] = sB[k, tx + j * tx_count]
                for i in range(tm):
                    for j in range(tn):
                        acc[i, j] += a[i] * b[j]
            cuda.syncthreads()  # every thread is done with the slabs before the next ones overwrite them
        for i in range(tm):
            row = row0 + ty + i * ty_count
            for j in range(tn):
                col = col0 + tx + j * tx_count
                if row < M and col < P:
                    C[row, col] = acc[i, j]

    return matmul_block_tiled_kernel


@HostOp
def matmul_block_tiled(A: np.ndarray, B: np.ndarray, bm: int = 128, bn: int = 128, bk: int = 8, tm: int = 8,
                       tn: int = 8) -> KernelPlan:
    """``A @ B`` (float32, (M, K) @ (K, P) -> (M, P)) with ``bm x bn`` block tiles and ``tm x tn`` outputs per thread.

    Blocks of ``(bm / tm) * (bn / tn)`` threads (one dimension), a grid of ``ceil(P / bn) x ceil(M / bm)``;
    ``4 bk (bm + bn)`` bytes of shared memory per block. ``tm`` must divide ``bm`` and ``tn`` divide ``bn``.
    """
    A, B, C = checked_operands(A, B)
    bm, bn, bk, tm, tn = (positive_int(name, v) for name, v in
                          (("bm", bm), ("bn", bn), ("bk", bk), ("tm", tm), ("tn", tn)))
    if bm % tm or bn % tn:
        raise ValueError(f"the register tile must divide the block tile: got bm={bm}, tm={tm}, bn={bn}, tn={tn}")
    threads = (bm // tm) * (bn // tn)
    block_threads(f"bm={bm}, bn={bn}, tm={tm}, tn={tn}", threads)
    shared_bytes(f"bm={bm}, bn={bn}, bk={bk}", 4 * bk * (bm + bn))
    kernel = _matmul_block_tiled_kernel(bm, bn, bk, tm, tn)
    grid = (ceil_div(C.shape[1], bn), ceil_div(C.shape[0], bm))
    return matmul_plan("matmul_block_tiled", kernel, grid, (threads,), A, B, C, reuse=(bm, bn))

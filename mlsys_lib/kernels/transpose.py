"""Matrix transpose ``out = a.T`` in three steps: naive, shared-memory tile, padded tile.

Shapes: ``a`` is (R, C) float32, ``out`` is (C, R). Every kernel moves ``tile`` x ``tile`` pieces
with blocks of ``tile`` x ``rows`` threads (``blockDim = (tile, rows)``): thread ``(tx, ty)``
handles rows ``ty, ty + rows, ...`` of its block's tile, so a block of 32 x 8 = 256 threads moves a
32 x 32 tile (the loop of Harris's "An Efficient Matrix Transpose in CUDA C/C++"). With ``tile =
32`` a warp is one ``ty`` (32 consecutive ``tx``): it touches one row of the tile per request.

Costs per full warp request, float32, ``tile = 32`` (the warp-level instrument counts them):

* **naive**: the warp reads ``a[r, c0:c0+32]`` (128 contiguous bytes: 4 sectors) and writes
  ``out[c0:c0+32, r]``, a column: 32 addresses ``4 R`` bytes apart, 32 sectors when ``R >= 8``.
  Stores use 8x the sectors of the data they carry.
* **shared**: the block copies its tile into ``tile[32][32]`` in shared memory with coalesced
  reads (4 sectors), ``syncthreads``, then each warp reads a *column* of the shared tile and writes
  a row of ``out`` (4 sectors). The column read touches words ``32 x + y``, all in bank ``y``: a
  32-way bank conflict, 31 extra wavefronts per request.
* **padded**: the tile is ``[32][33]``; word ``33 x + y`` is in bank ``(x + y) % 32``, every lane
  in its own bank: no conflicts, one extra column of 32 floats (128 bytes) per block.

Global traffic is the same for the three (every element read once and written once: ``8 R C``
bytes); what changes is how many sectors carry it and how many shared wavefronts the tile costs.
Sizes that are not multiples of the tile are handled by bound guards (edge warps are partial).
"""

from __future__ import annotations

import functools

import numpy as np
from numba import cuda, float32

from .checks import block_threads, ceil_div, float32_array, positive_int, shared_bytes
from .plan import HostOp, KernelPlan, KernelStep


@functools.lru_cache(maxsize=None)
def _transpose_naive_kernel(tile: int, rows: int):
    """Each thread copies ``a[r, c]`` straight to ``out[c, r]`` (tile and rows fixed at compile time)."""

    @cuda.jit
    def transpose_naive_kernel(a, out):
        c = cuda.blockIdx.x * tile + cuda.threadIdx.x
        for r in range(cuda.blockIdx.y * tile + cuda.threadIdx.y, min((cuda.blockIdx.y + 1) * tile, a.shape[0]),
                       rows):
            if c < a.shape[1]:
                out[c, r] = a[r, c]

    return transpose_naive_kernel


@functools.lru_cache(maxsize=None)
def _transpose_tile_kernel(tile: int, rows: int, width: int):
    """The tile staged in a ``tile`` x ``width`` shared array (sizes fixed at compile time); the column read
    touches words ``tx * width + y``: all in one bank for ``width = 32``, 32 banks for ``width = 33``."""

    @cuda.jit
    def transpose_tile_kernel(a, out):
        buf = cuda.shared.array((tile, width), float32)
        tx = cuda.threadIdx.x
        r0 = cuda.blockIdx.y * tile
        c0 = cuda.blockIdx.x * tile
        for y in range(cuda.threadIdx.y, tile, rows):  # coalesced: a warp reads a row of a
            if r0 + y < a.shape[0] and c0 + tx < a.shape[1]:
                buf[y, tx] = a[r0 + y, c0 + tx]
        cuda.syncthreads()
        for y in range(cuda.threadIdx.y, tile, rows):  # coalesced: a warp writes a row of out
            if c0 + y < a.shape[1] and r0 + tx < a.shape[0]:
                out[c0 + y, r0 + tx] = buf[tx, y]  # a column of buf

    return transpose_tile_kernel


def _plan(name: str, a: np.ndarray, tile: int, rows: int, pad: int | None) -> KernelPlan:
    """The launch of the naive kernel (``pad`` None) or of the shared tile ``tile`` x ``(tile + pad)``."""
    a = float32_array("a", a, 2)
    tile = positive_int("tile", tile)
    rows = positive_int("rows", rows)
    if rows > tile:
        raise ValueError(f"rows must be at most tile: a block of tile x rows threads moves a tile x tile tile, "
                         f"got tile={tile}, rows={rows}")
    block_threads(f"tile={tile}, rows={rows} ({tile} x {rows} threads)", tile * rows)
    if pad is None:
        kernel = _transpose_naive_kernel(tile, rows)
    else:
        shared_bytes(f"tile={tile}", 4 * tile * (tile + pad))
        kernel = _transpose_tile_kernel(tile, rows, tile + pad)
    R, C = a.shape
    out = np.empty((C, R), dtype=np.float32)
    step = KernelStep(kernel, (ceil_div(C, tile), ceil_div(R, tile)), (tile, rows), (a, out))
    return KernelPlan(name, (step,), out, flops=0, modeled_bytes=8 * R * C,
                      compulsory_bytes=8 * R * C)


@HostOp
def transpose_naive(a: np.ndarray, tile: int = 32, rows: int = 8) -> KernelPlan:
    """``a.T`` for float32 ``a`` (R, C) -> (C, R): reads coalesced, stores strided (32 sectors per warp store).

    Blocks of ``tile`` x ``rows`` threads, one ``tile`` x ``tile`` piece each. Global traffic ``8 R C`` bytes.
    """
    return _plan("transpose_naive", a, tile, rows, pad=None)


@HostOp
def transpose_shared(a: np.ndarray, tile: int = 32, rows: int = 8) -> KernelPlan:
    """``a.T`` (float32, (R, C) -> (C, R)) through a ``tile`` x ``tile`` shared tile: coalesced loads and stores,
    but the tile's column read is a 32-way bank conflict (``tile = 32``: 31 extra wavefronts per warp).

    Shared memory: ``4 tile^2`` bytes per block. Global traffic ``8 R C`` bytes.
    """
    return _plan("transpose_shared", a, tile, rows, pad=0)


@HostOp
def transpose_padded(a: np.ndarray, tile: int = 32, rows: int = 8) -> KernelPlan:
    """``a.T`` (float32, (R, C) -> (C, R)) through a ``tile`` x ``(tile + 1)`` shared tile: coalesced and,
    for ``tile = 32``, free of bank conflicts (the padding column shifts each row by one bank).

    Shared memory: ``4 tile (tile + 1)`` bytes per block. Global traffic ``8 R C`` bytes.
    """
    return _plan("transpose_padded", a, tile, rows, pad=1)

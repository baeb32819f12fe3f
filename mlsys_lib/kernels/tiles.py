"""Cooperative loads from global into shared memory, written once and used by every tiled kernel.

In the lecture's shared-memory kernels the threads of a block first copy a piece of global memory
into a ``__shared__`` buffer together ("the fetching has to be implemented cooperatively":
``tid = threadIdx.y * blockDim.x + threadIdx.x``, thread ``tid`` copies elements ``tid``,
``tid + nthreads``, ...), then ``__syncthreads()``, then compute from the buffer. These device
functions are that copy, with the bound guards that make any array size work: elements outside the
source are filled with zeros and never read from global memory, so each in-bounds source element
is read exactly once per call. The caller still has to call ``cuda.syncthreads()`` afterwards.
"""

from __future__ import annotations

from numba import cuda, float32

_ZERO = float32(0.0)


@cuda.jit(device=True)
def block_thread_id():
    """Linear id of this thread in its block: ``x + blockDim.x * (y + blockDim.y * z)``."""
    return cuda.threadIdx.x + cuda.blockDim.x * (cuda.threadIdx.y + cuda.blockDim.y * cuda.threadIdx.z)


@cuda.jit(device=True)
def load_span(buf, src, start, tid, nthreads):
    """Copy ``src[start : start + len(buf)]`` (1D) into ``buf``; zeros past the end of ``src``.

    Thread ``tid`` of ``nthreads`` copies positions ``tid, tid + nthreads, ...``.
    """
    for e in range(tid, buf.shape[0], nthreads):
        g = start + e
        if g < src.shape[0]:
            buf[e] = src[g]
        else:
            buf[e] = _ZERO


@cuda.jit(device=True)
def load_tile(tile, src, row0, col0, tid, nthreads):
    """Copy the (R, C) window of the 2D ``src`` at ``(row0, col0)`` into ``tile`` (R, C); zeros outside ``src``.

    Thread ``tid`` of ``nthreads`` copies the row-major positions ``tid, tid + nthreads, ...``, so
    consecutive threads read consecutive columns (coalesced global reads).
    """
    rows, cols = tile.shape
    for e in range(tid, rows * cols, nthreads):
        r = e // cols
        c = e - r * cols
        gr = row0 + r
        gc = col0 + c
        if gr < src.shape[0] and gc < src.shape[1]:
            tile[r, c] = src[gr, gc]
        else:
            tile[r, c] = _ZERO

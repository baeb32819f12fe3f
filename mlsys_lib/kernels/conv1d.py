"""1D convolution ``y[i] = sum_k w[k] * x[i + k]``, naive and with shared memory (the lecture's window average).

Shapes: ``x`` is (n,), ``w`` is (width,) with ``width <= n``, ``y`` is (n - width + 1,) ("valid"
convolution, as deep-learning libraries compute it: no flip, no padding). The lecture's window
average ``output[i] = (input[i] + input[i+1] + input[i+2]) / 3`` is ``w = [1/3, 1/3, 1/3]``.

* **naive**: thread ``i`` reads its ``width`` inputs and the ``width`` weights from global memory,
  so every input element is read up to ``width`` times: ``2 * width`` global reads per output.
* **shared**: the threads of a block first copy the block's inputs *plus the halo* (the
  ``width - 1`` inputs past its end that its last outputs need) and the weights into shared
  memory, ``__syncthreads()``, then compute from shared memory. The lecture's kernel for width 3
  lets threads ``tid < 2`` load the halo; here the copy is the cooperative loop of
  :func:`~mlsys_lib.kernels.tiles.load_span`, which works for any width (even a halo longer than
  the block) and any n (bound guards, no ``N + 2`` padding needed). Global reads per block:
  ``min(block + width - 1, n - start)`` inputs + ``width`` weights.
"""

from __future__ import annotations

import functools

import numpy as np
from numba import cuda, float32

from .checks import block_threads, ceil_div, float32_array, positive_int, shared_bytes
from .plan import HostOp, KernelPlan, KernelStep
from .tiles import load_span


@cuda.jit
def _conv1d_naive_kernel(x, w, y):
    i = cuda.grid(1)
    if i < y.shape[0]:
        acc = float32(0.0)
        for k in range(w.shape[0]):
            acc += w[k] * x[i + k]
        y[i] = acc


@functools.lru_cache(maxsize=None)
def _conv1d_shared_kernel(block: int, width: int):
    """The shared-memory kernel for ``block`` threads and a ``width``-tap filter (sizes fixed at compile time)."""
    span = block + width - 1

    @cuda.jit
    def conv1d_shared_kernel(x, w, y):
        support = cuda.shared.array(span, float32)
        weights = cuda.shared.array(width, float32)
        tid = cuda.threadIdx.x
        start = cuda.blockIdx.x * block
        load_span(support, x, start, tid, block)
        load_span(weights, w, 0, tid, block)
        cuda.syncthreads()
        i = start + tid
        if i < y.shape[0]:
            acc = float32(0.0)
            for k in range(width):
                acc += weights[k] * support[tid + k]
            y[i] = acc

    return conv1d_shared_kernel


def _checked(x: np.ndarray, w: np.ndarray, block: int) -> tuple[np.ndarray, np.ndarray, int, np.ndarray]:
    """Validated ``(x, w, block, y)`` with ``y`` the (n - width + 1,) output, allocated."""
    x = float32_array("x", x, 1)
    w = float32_array("w", w, 1)
    if w.shape[0] > x.shape[0]:
        raise ValueError(f"filter w of width {w.shape[0]} is longer than the input x of length {x.shape[0]}")
    block = positive_int("block", block)
    block_threads("block", block)
    return x, w, block, np.empty(x.shape[0] - w.shape[0] + 1, dtype=np.float32)


@HostOp
def conv1d_naive(x: np.ndarray, w: np.ndarray, block: int = 128) -> KernelPlan:
    """``y[i] = sum_k w[k] x[i+k]``: x (n,), w (width,), y (n - width + 1,), float32; one thread per output.

    Global traffic: ``2 * width`` reads per output (``width`` inputs, ``width`` weights), one write.
    """
    x, w, block, y = _checked(x, w, block)
    width, n_out = w.shape[0], y.shape[0]
    step = KernelStep(_conv1d_naive_kernel, (ceil_div(n_out, block),), (block,), (x, w, y))
    return KernelPlan("conv1d_naive", (step,), y, flops=2 * width * n_out,
                      modeled_bytes=4 * (2 * width * n_out + n_out),
                      compulsory_bytes=4 * (x.shape[0] + width + n_out))


@HostOp
def conv1d_shared(x: np.ndarray, w: np.ndarray, block: int = 128) -> KernelPlan:
    """Same result as :func:`conv1d_naive`, with each block's inputs, halo and weights staged in shared memory.

    Global traffic per block starting at ``start``: ``min(block + width - 1, n - start)`` input
    reads, ``width`` weight reads, one write per output; in total ``n + (blocks - 1)(width - 1)``
    input reads against ``width * (n - width + 1)`` for the naive kernel. Shared memory: ``(block + 2 width - 1)``
    floats per block.
    """
    x, w, block, y = _checked(x, w, block)
    n, width, n_out = x.shape[0], w.shape[0], y.shape[0]
    shared_bytes(f"block={block} with width={width}", 4 * (block + 2 * width - 1))
    blocks = ceil_div(n_out, block)
    # every block but the last reads its full span; together: each input once, plus the halo of
    # width - 1 inputs at each of the blocks - 1 boundaries; and the weights once per block.
    reads = n + (blocks - 1) * (width - 1) + blocks * width
    step = KernelStep(_conv1d_shared_kernel(block, width), (blocks,), (block,), (x, w, y))
    return KernelPlan("conv1d_shared", (step,), y, flops=2 * width * n_out, modeled_bytes=4 * (reads + n_out),
                      compulsory_bytes=4 * (n + width + n_out))

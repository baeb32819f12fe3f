"""Row softmax and LayerNorm as memory-bound kernels: one block per row, each row read once and written once.

Input ``x`` (rows, d) float32, output (rows, d) float32. Block ``r`` of ``B = block`` threads (a
power of two, 32..1024) owns row ``r``; thread ``tid`` handles columns ``tid, tid + B, ...``, so a
warp reads and writes 32 consecutive floats at a time (coalesced). The row is **staged in shared
memory** as it is read, and every later pass (subtract the max and exponentiate, divide by the
sum; or centre, square, scale) works on that copy: global traffic is exactly one read and one
write of the row, ``8 d`` bytes per row, ``8 rows d`` in all (``modeled_bytes``). Reading the row
again from global memory for each pass, as a naive kernel does, costs 2 or 3 reads instead.

The statistics come from block reductions: each thread folds its columns into a register, writes
it to a buffer of ``B`` floats, and the block halves the buffer with sequential addressing (no
bank conflicts, divergence only in warp 0's last 5 steps) -- :mod:`mlsys_lib.kernels.reduce`'s
``sequential`` tree.

* **softmax**: max (subtracted before ``exp``: no overflow for large inputs, and ``-inf``
  entries give 0), then the sum of the exponentials. A row of ``-inf`` only has no softmax
  (0 / 0: NaN, as in numpy). FLOPs: about 4 per element (compare, subtract, exp, divide).
* **layernorm**: mean, then the variance as the mean of ``(x - mean)^2`` from the staged row
  (two passes over shared memory, numerically stable, still one global read), ``y = (x - mean) /
  sqrt(var + eps)`` (biased variance, as ``torch.nn.LayerNorm``; no affine ``gamma``, ``beta``:
  those would add ``8 d`` bytes read per row). FLOPs: about 6 per element.

Shared memory: ``4 (d + B)`` bytes per block, so ``d`` is limited to about 12K floats.
"""

from __future__ import annotations

import functools
import math

import numpy as np
from numba import cuda, float32

from .checks import float32_array, positive_int, shared_bytes
from .plan import HostOp, KernelPlan, KernelStep

_ZERO = float32(0.0)
_NEG_INF = float32(-math.inf)


@cuda.jit(device=True)
def _block_sum(buf, tid, value):
    """Sum of every thread's ``value`` (all threads of the block call it); ``buf`` holds one float per thread."""
    buf[tid] = value
    cuda.syncthreads()
    s = buf.shape[0] // 2
    while s > 0:
        if tid < s:
            buf[tid] += buf[tid + s]
        cuda.syncthreads()
        s //= 2
    total = buf[0]
    cuda.syncthreads()  # everyone has read buf[0] before the buffer is used again
    return total


@cuda.jit(device=True)
def _block_max(buf, tid, value):
    """Largest of every thread's ``value`` (all threads of the block call it), as :func:`_block_sum`."""
    buf[tid] = value
    cuda.syncthreads()
    s = buf.shape[0] // 2
    while s > 0:
        if tid < s:
            buf[tid] = max(buf[tid], buf[tid + s])
        cuda.syncthreads()
        s //= 2
    top = buf[0]
    cuda.syncthreads()
    return top


@functools.lru_cache(maxsize=None)
def _softmax_kernel(block: int, d: int):
    """Softmax of row ``blockIdx.x`` with ``block`` threads, rows of ``d`` (sizes fixed at compile time)."""

    @cuda.jit
    def softmax_rows_kernel(x, y):
        row = cuda.shared.array(d, float32)
        buf = cuda.shared.array(block, float32)
        r = cuda.blockIdx.x
        tid = cuda.threadIdx.x
        m = _NEG_INF
        for j in range(tid, d, block):
            v = x[r, j]
            row[j] = v
            m = max(m, v)
        m = _block_max(buf, tid, m)
        total = _ZERO
        for j in range(tid, d, block):
            e = math.exp(row[j] - m)
            row[j] = e
            total += e
        total = _block_sum(buf, tid, total)
        for j in range(tid, d, block):
            y[r, j] = row[j] / total

    return softmax_rows_kernel


@functools.lru_cache(maxsize=None)
def _layernorm_kernel(block: int, d: int, eps: float):
    """LayerNorm of row ``blockIdx.x`` with ``block`` threads, rows of ``d``, ``eps`` (fixed at compile time)."""
    inv_d = float32(1.0 / d)
    eps32 = float32(eps)

    @cuda.jit
    def layernorm_rows_kernel(x, y):
        row = cuda.shared.array(d, float32)
        buf = cuda.shared.array(block, float32)
        r = cuda.blockIdx.x
        tid = cuda.threadIdx.x
        acc = _ZERO
        for j in range(tid, d, block):
            v = x[r, j]
            row[j] = v
            acc += v
        mean = _block_sum(buf, tid, acc) * inv_d
        acc = _ZERO
        for j in range(tid, d, block):
            c = row[j] - mean
            acc += c * c
        scale = float32(1.0) / math.sqrt(_block_sum(buf, tid, acc) * inv_d + eps32)
        for j in range(tid, d, block):
            y[r, j] = (row[j] - mean) * scale

    return layernorm_rows_kernel


def _rows_plan(name: str, kernel_of, x: np.ndarray, block: int, flops_per_element: int) -> KernelPlan:
    x = float32_array("x", x, 2)
    block = positive_int("block", block)
    if block < 32 or block > 1024 or block & (block - 1):
        raise ValueError(f"block must be a power of two from 32 to 1024 (the block reduction halves it), got {block}")
    rows, d = x.shape
    shared_bytes(f"rows of d={d} with block={block}", 4 * (d + block))
    y = np.empty_like(x)
    step = KernelStep(kernel_of(block, d), (rows,), (block,), (x, y))
    return KernelPlan(name, (step,), y, flops=flops_per_element * rows * d, modeled_bytes=8 * rows * d,
                      compulsory_bytes=8 * rows * d)


@HostOp
def softmax_rows(x: np.ndarray, block: int = 128) -> KernelPlan:
    """Softmax of each row of float32 ``x`` (rows, d) -> (rows, d): ``exp(x - max) / sum``, one block per row.

    Reads each row once (staged in shared memory) and writes it once: ``8 rows d`` bytes.
    """
    return _rows_plan("softmax_rows", _softmax_kernel, x, block, 4)


@HostOp
def layernorm_rows(x: np.ndarray, eps: float = 1e-5, block: int = 128) -> KernelPlan:
    """``(x - mean) / sqrt(var + eps)`` per row of float32 ``x`` (rows, d) -> (rows, d), one block per row.

    Biased variance over the row, no affine parameters. Reads each row once (staged in shared
    memory) and writes it once: ``8 rows d`` bytes.
    """
    if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not 0 < eps < math.inf:
        raise ValueError(f"eps must be a positive finite number, got {eps!r}")
    eps = float(eps)
    return _rows_plan("layernorm_rows", functools.partial(_layernorm_kernel, eps=eps), x, block, 6)

"""Sum of a float32 vector in the sequence of Harris's "Optimizing Parallel Reduction in CUDA".

Input ``x`` (n,) float32, result a 0-d float32 array. Each block of ``block`` threads (a power of
two, 64 to 1024) reduces its piece of ``x`` in a shared buffer of ``block`` floats and writes one
partial sum; the *same kernel* is launched again on the partial sums until one value is left (all
launches on the device, no host sum), so a plan has ``ceil(log_{per block} n)`` launches. Threads
past the end of ``x`` load 0.

The variants differ only in how a block's tree of adds walks the shared buffer (``B = block``,
counts for full blocks, float32):

* **interleaved** (Harris 1): step ``s = 1, 2, 4, ..., B/2``: ``if tid % (2s) == 0: buf[tid] +=
  buf[tid + s]``. Active lanes are spread over every warp, so every warp that has one diverges at
  every step: ``3 x`` (warps with an active lane) divergent requests per step (two loads, one
  store). Each warp touches its own 32 words: no bank conflicts.
* **interleaved_strided** (Harris 2): ``i = 2 s tid; if i < B: buf[i] += buf[i + s]``: the active
  threads are the first ``B / 2s``, so whole warps stay together until fewer than 32 are active,
  but lane ``l`` touches word ``2 s l``: the lanes of a request crowd onto ``32 / 2s`` banks
  (one bank from ``s = 16`` on), several distinct words each: bank conflicts (for ``B = 64``: 1
  extra wavefront per request at ``s = 1 .. 16``, 15 per block; for ``B = 128``: 45 per block).
* **sequential** (Harris 3): ``s = B/2, ..., 1``: ``if tid < s: buf[tid] += buf[tid + s]``:
  contiguous words (no conflicts), whole warps active until ``s < 32``: divergence only in the
  last 5 steps (``s = 16 .. 1``, warp 0): 15 divergent requests per block.
* **first_add** (Harris 4): as sequential, but each thread adds two elements ``x[i] + x[i + B]``
  while loading, so a block covers ``2B`` elements: half the blocks (and threads) for the same
  ``n`` global reads.
* **warp_unrolled** (Harris 5): first add, sequential steps while ``s > 32``, then warp 0 does the
  last six steps (``s = 32 .. 1``) with all 32 lanes, without ``if`` and without block barriers:
  no divergent step at all. Harris's version relies on ``volatile`` shared memory and a warp
  executing in lockstep; since Volta, warps may not run in lockstep, so each step here reads into
  a register, ``__syncwarp()``, writes, ``__syncwarp()`` (``cuda.syncwarp()``). From ``s = 16``
  on, lanes ``s .. 31`` add values nobody needs: more shared accesses than ``first_add``, but fewer
  requests and barriers. Numba's simulator has no ``syncwarp``: under it the kernel calls
  ``cuda.syncthreads()`` there instead, which the simulator releases once every thread still
  running (warp 0: the other warps have exited) has arrived, the same ordering.

In every variant thread 0 writes the block's sum (2 divergent requests per block: a load of
``buf[0]`` and the store). Global traffic: each launch reads its ``m`` inputs once and writes one
float per block: ``4 (m + blocks)`` bytes; FLOPs: ``n - 1`` useful adds.
"""

from __future__ import annotations

import functools

import numpy as np
from numba import cuda, float32

from .checks import ceil_div, float32_array, positive_int
from .gpu.device import current_backend
from .plan import HostOp, KernelPlan, KernelStep

_ZERO = float32(0.0)


@cuda.jit(device=True)
def _load(x, i):
    """``x[i]``, or 0 past the end of ``x``."""
    if i < x.shape[0]:
        return x[i]
    return _ZERO


@cuda.jit(device=True)
def _halve(buf, tid, stop):
    """Sequential addressing: ``buf[tid] += buf[tid + s]`` for ``s = B/2, B/4, ...`` while ``s > stop``."""
    s = buf.shape[0] // 2
    while s > stop:
        if tid < s:
            buf[tid] += buf[tid + s]
        cuda.syncthreads()
        s //= 2


@cuda.jit(device=True)
def _interleaved_tree(buf, tid):
    """Harris 1: ``if tid % 2s == 0: buf[tid] += buf[tid + s]``, ``s = 1, 2, ..., B/2``."""
    s = 1
    while s < buf.shape[0]:
        if tid % (2 * s) == 0:
            buf[tid] += buf[tid + s]
        cuda.syncthreads()
        s *= 2


@cuda.jit(device=True)
def _strided_tree(buf, tid):
    """Harris 2: ``k = 2 s tid; if k < B: buf[k] += buf[k + s]``, ``s = 1, 2, ..., B/2``."""
    s = 1
    while s < buf.shape[0]:
        k = 2 * s * tid
        if k < buf.shape[0]:
            buf[k] += buf[k + s]
        cuda.syncthreads()
        s *= 2


@cuda.jit(device=True)
def _sequential_tree(buf, tid):
    """Harris 3: ``if tid < s: buf[tid] += buf[tid + s]``, ``s = B/2, ..., 1``."""
    _halve(buf, tid, 0)


@cuda.jit(device=True)
def _warp_sync_gpu():
    cuda.syncwarp()


@cuda.jit(device=True)
def _warp_sync_sim():
    cuda.syncthreads()  # the simulator has no syncwarp; only warp 0 is still running here


_warp_sync = _warp_sync_gpu if current_backend() == "gpu" else _warp_sync_sim


@cuda.jit(device=True)
def _warp_unrolled_tree(buf, tid):
    """Harris 5: sequential steps while ``s > 32``, then warp 0 alone, all 32 lanes, ``s = 32 .. 1``."""
    _halve(buf, tid, 32)
    if tid < 32:  # the whole of warp 0: no divergence
        v = buf[tid]
        s = 32
        while s > 0:
            v += buf[tid + s]
            _warp_sync()  # every lane has read before any lane writes
            buf[tid] = v
            _warp_sync()  # every lane has written before the next read
            s //= 2


@functools.lru_cache(maxsize=None)
def _reduce_kernel(block: int, first_add: bool, tree):
    """A block-sum kernel for ``block`` threads: load one element (two, added, if ``first_add``), ``tree``,
    thread 0 writes the block's sum (all fixed at compile time)."""
    per_block = 2 * block if first_add else block

    @cuda.jit
    def reduce_kernel(x, partial):
        buf = cuda.shared.array(block, float32)
        tid = cuda.threadIdx.x
        i = cuda.blockIdx.x * per_block + tid
        v = _load(x, i)
        if first_add:
            v += _load(x, i + block)
        buf[tid] = v
        cuda.syncthreads()
        tree(buf, tid)
        if tid == 0:
            partial[cuda.blockIdx.x] = buf[0]

    return reduce_kernel


def _reduce_plan(name: str, x: np.ndarray, block: int, first_add: bool, tree) -> KernelPlan:
    """Launch the kernel of ``tree`` on ``x``, then on its partial sums, until one value is left."""
    x = float32_array("x", x, 1)
    block = positive_int("block", block)
    if block < 64 or block > 1024 or block & (block - 1):
        raise ValueError(f"block must be a power of two from 64 to 1024 (the tree halves it down to one warp), "
                         f"got {block}")
    kernel = _reduce_kernel(block, first_add, tree)
    steps, nbytes, src = [], 0, x
    while True:
        blocks = ceil_div(src.shape[0], 2 * block if first_add else block)
        partial = np.empty(blocks, dtype=np.float32)
        steps.append(KernelStep(kernel, (blocks,), (block,), (src, partial)))
        nbytes += 4 * (src.shape[0] + blocks)
        if blocks == 1:
            break
        src = partial
    return KernelPlan(name, tuple(steps), partial, flops=x.shape[0] - 1, modeled_bytes=nbytes, shape=(),
                      compulsory_bytes=4 * (x.shape[0] + 1))


@HostOp
def reduce_interleaved(x: np.ndarray, block: int = 256) -> KernelPlan:
    """Sum of float32 ``x`` (n,) -> 0-d float32 array; interleaved addressing (``tid % 2s == 0``: divergent warps).

    Blocks of ``block`` threads (a power of two, 64..1024), one partial sum each, relaunched on the
    partial sums until one is left. Counted costs: see :mod:`mlsys_lib.kernels.reduce`.
    """
    return _reduce_plan("reduce_interleaved", x, block, False, _interleaved_tree)


@HostOp
def reduce_interleaved_strided(x: np.ndarray, block: int = 256) -> KernelPlan:
    """Sum of float32 ``x`` (n,) -> 0-d float32 array; interleaved addressing with the strided index ``2 s tid``
    (whole warps, but bank conflicts). Blocks as :func:`reduce_interleaved`.
    """
    return _reduce_plan("reduce_interleaved_strided", x, block, False, _strided_tree)


@HostOp
def reduce_sequential(x: np.ndarray, block: int = 256) -> KernelPlan:
    """Sum of float32 ``x`` (n,) -> 0-d float32 array; sequential addressing (no bank conflicts, divergence in
    warp 0's last 5 steps only). Blocks as :func:`reduce_interleaved`.
    """
    return _reduce_plan("reduce_sequential", x, block, False, _sequential_tree)


@HostOp
def reduce_first_add(x: np.ndarray, block: int = 256) -> KernelPlan:
    """Sum of float32 ``x`` (n,) -> 0-d float32 array; sequential addressing with the first add during the load:
    each block of ``block`` threads covers ``2 block`` elements (half the blocks).
    """
    return _reduce_plan("reduce_first_add", x, block, True, _sequential_tree)


@HostOp
def reduce_warp_unrolled(x: np.ndarray, block: int = 256) -> KernelPlan:
    """Sum of float32 ``x`` (n,) -> 0-d float32 array; first add, and the last warp's six steps unrolled with
    ``syncwarp`` between reads and writes (no divergent step). Blocks as :func:`reduce_first_add`.
    """
    return _reduce_plan("reduce_warp_unrolled", x, block, True, _warp_unrolled_tree)

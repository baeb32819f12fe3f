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
from .device import current_backend
from .plan import HostOp, KernelPlan, KernelStep

VARIANTS = ("interleaved", "interleaved_strided", "sequential", "first_add", "warp_unrolled")
_ZERO = float32(0.0)


@cuda.jit(device=True)
def _warp_sync_gpu():
    cuda.syncwarp()


@cuda.jit(device=True)
def _warp_sync_sim():
    cuda.syncthreads()  # the simulator has no syncwarp; only warp 0 is still running here


@functools.lru_cache(maxsize=None)
def _reduce_kernel(variant: str, block: int, backend: str):
    """The block-sum kernel of ``variant`` for ``block`` threads (fixed at compile time)."""
    first_add = variant in ("first_add", "warp_unrolled")
    per_block = 2 * block if first_add else block
    last_tree_step = 32 if variant == "warp_unrolled" else 0  # the tree's loop stops at s > last_tree_step
    warp_sync = _warp_sync_gpu if backend == "gpu" else _warp_sync_sim
    tree = {"interleaved": 0, "interleaved_strided": 1}.get(variant, 2)  # an int: GPU code cannot compare strings

    @cuda.jit
    def reduce_kernel(x, partial):
        buf = cuda.shared.array(block, float32)
        tid = cuda.threadIdx.x
        i = cuda.blockIdx.x * per_block + tid
        v = _ZERO
        if i < x.shape[0]:
            v = x[i]
        if first_add and i + block < x.shape[0]:
            v += x[i + block]
        buf[tid] = v
        cuda.syncthreads()
        if tree == 0:
            s = 1
            while s < block:
                if tid % (2 * s) == 0:
                    buf[tid] += buf[tid + s]
                cuda.syncthreads()
                s *= 2
        elif tree == 1:
            s = 1
            while s < block:
                k = 2 * s * tid
                if k < block:
                    buf[k] += buf[k + s]
                cuda.syncthreads()
                s *= 2
        else:
            s = block // 2
            while s > last_tree_step:
                if tid < s:
                    buf[tid] += buf[tid + s]
                cuda.syncthreads()
                s //= 2
            if last_tree_step and tid < 32:
                v = buf[tid]
                s = 32
                while s > 0:
                    v += buf[tid + s]
                    warp_sync()
                    buf[tid] = v
                    warp_sync()
                    s //= 2
        if tid == 0:
            partial[cuda.blockIdx.x] = buf[0]

    return reduce_kernel


def _reduce_plan(variant: str, x: np.ndarray, block: int) -> KernelPlan:
    x = float32_array("x", x, 1)
    block = positive_int("block", block)
    if block < 64 or block > 1024 or block & (block - 1):
        raise ValueError(f"block must be a power of two from 64 to 1024 (the tree halves it down to one warp), "
                         f"got {block}")
    kernel = _reduce_kernel(variant, block, current_backend())
    per_block = 2 * block if variant in ("first_add", "warp_unrolled") else block
    steps, nbytes, src = [], 0, x
    while True:
        blocks = ceil_div(src.shape[0], per_block)
        partial = np.empty(blocks, dtype=np.float32)
        steps.append(KernelStep(kernel, (blocks,), (block,), (src, partial)))
        nbytes += 4 * (src.shape[0] + blocks)
        if blocks == 1:
            break
        src = partial
    return KernelPlan(f"reduce_{variant}", tuple(steps), partial, flops=x.shape[0] - 1, modeled_bytes=nbytes,
                      shape=())


def _host_op(variant: str, summary: str) -> HostOp:
    def plan(x: np.ndarray, block: int = 256) -> KernelPlan:
        return _reduce_plan(variant, x, block)

    plan.__name__ = plan.__qualname__ = f"reduce_{variant}"
    plan.__doc__ = (f"Sum of the float32 vector ``x`` (n,) -> 0-d float32 array, {summary}\n\n"
                    "Blocks of ``block`` threads (a power of two, 64..1024), one partial sum each; the kernel is "
                    "launched again on the partial sums until one is left. See :mod:`mlsys_lib.kernels.reduce` "
                    "for the counted costs.")
    return HostOp(plan)


reduce_interleaved = _host_op("interleaved", "interleaved addressing (``tid % 2s == 0``: divergent warps).")
reduce_interleaved_strided = _host_op("interleaved_strided",
                                      "interleaved addressing with a strided index (``2 s tid``: bank conflicts).")
reduce_sequential = _host_op("sequential", "sequential addressing (no conflicts; divergence in the last warp only).")
reduce_first_add = _host_op("first_add", "sequential addressing, first add during the load (half the blocks).")
reduce_warp_unrolled = _host_op("warp_unrolled", "first add, and the last warp unrolled with ``syncwarp``.")

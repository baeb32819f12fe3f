"""Inclusive prefix sum ``y = cumsum(x)`` of a float32 vector: Hillis-Steele and Blelloch, any length.

Input ``x`` (n,) float32, output ``y`` (n,) float32, ``y[i] = x[0] + ... + x[i]``. A block of
``B = block`` threads (a power of two) scans ``B`` consecutive elements in shared memory, one per
thread (threads past the end of ``x`` scan zeros). Several blocks: each also writes its total to
``sums``; the same scan runs on ``sums`` (recursively, until one block holds them all), and a
last launch adds the scanned total of blocks ``0 .. b-1`` to every element of block ``b``.

Work (adds) and depth (steps, one ``syncthreads`` each) of one block of ``B`` (``scan_work_depth``):

* **Hillis-Steele**: step ``d = 0 .. log2 B - 1``: every thread with ``tid >= 2^d`` adds the value
  ``2^d`` places back. Depth ``log2 B``, work ``sum_d (B - 2^d) = B log2 B - (B - 1)``:
  ``O(B log B)``, more adds than the sequential scan's ``B - 1``. Each thread keeps its running
  value in a register and the step reads the partner from one shared buffer and writes into the
  other (double buffering: no one overwrites a value another thread of the same step still
  reads), so its shared reads are exactly the adds.
* **Blelloch** (work-efficient): an up-sweep builds partial sums in a tree (``B/2, B/4, .., 1``
  adds: ``B - 1``), the root is saved and cleared, a down-sweep pushes prefixes back down (``B - 1``
  adds, and as many swaps) giving the *exclusive* scan; the inclusive one is that shifted left by
  one, the saved root last. Work ``2 (B - 1)``, depth ``2 log2 B``. In place in one buffer; its
  tree indices ``(tid + 1) 2^(d+1) - 1`` are a stride of ``2^(d+1)`` words: bank conflicts grow
  with the stride (GPU Gems 3, ch. 39, pads them away; not done here).

Global traffic of one block level: ``x`` read once, ``y`` written once, one total per block; the
add launch reads and writes ``y`` past the first block and reads one total per element.
"""

from __future__ import annotations

import functools

import numpy as np
from numba import cuda, float32

from .checks import ceil_div, float32_array, positive_int
from .plan import HostOp, KernelPlan, KernelStep

ALGORITHMS = ("hillis_steele", "blelloch")
_ZERO = float32(0.0)


def scan_work_depth(n: int, algorithm: str) -> tuple[int, int]:
    """``(adds, steps)`` of one block scanning ``n`` elements (``n`` a power of two) with ``algorithm``.

    Hillis-Steele: ``(n log2 n - n + 1, log2 n)``; Blelloch: ``(2 (n - 1), 2 log2 n)``.
    """
    n = _power_of_two("n", n)
    levels = n.bit_length() - 1
    if algorithm == "hillis_steele":
        return n * levels - n + 1, levels
    if algorithm == "blelloch":
        return 2 * (n - 1), 2 * levels
    raise ValueError(f"unknown scan algorithm {algorithm!r}; expected one of {', '.join(ALGORITHMS)}")


def _power_of_two(name: str, value: object) -> int:
    value = positive_int(name, value)
    if value & (value - 1):
        raise ValueError(f"{name} must be a power of two, got {value}")
    return value


@functools.lru_cache(maxsize=None)
def _hillis_steele_kernel(block: int):
    """One block scans ``block`` elements, double-buffered (size fixed at compile time)."""

    @cuda.jit
    def hillis_steele_kernel(x, y, sums):
        buf = cuda.shared.array((2, block), float32)
        tid = cuda.threadIdx.x
        i = cuda.blockIdx.x * block + tid
        v = _ZERO
        if i < x.shape[0]:
            v = x[i]
        buf[0, tid] = v
        cuda.syncthreads()
        src = 0
        offset = 1
        while offset < block:
            if tid >= offset:
                v += buf[src, tid - offset]
            buf[1 - src, tid] = v
            cuda.syncthreads()
            src = 1 - src
            offset *= 2
        if i < y.shape[0]:
            y[i] = v
        if tid == block - 1 and cuda.gridDim.x > 1:
            sums[cuda.blockIdx.x] = v

    return hillis_steele_kernel


@functools.lru_cache(maxsize=None)
def _blelloch_kernel(block: int):
    """One block scans ``block`` elements in place: up-sweep, down-sweep, shift (size fixed at compile time)."""

    @cuda.jit
    def blelloch_kernel(x, y, sums):
        buf = cuda.shared.array(block, float32)
        tid = cuda.threadIdx.x
        i = cuda.blockIdx.x * block + tid
        v = _ZERO
        if i < x.shape[0]:
            v = x[i]
        buf[tid] = v
        cuda.syncthreads()
        stride = 2
        while stride <= block:  # up-sweep: node k gets the sum of its subtree
            k = (tid + 1) * stride - 1
            if k < block:
                buf[k] += buf[k - stride // 2]
            cuda.syncthreads()
            stride *= 2
        total = _ZERO
        if tid == block - 1:
            total = buf[block - 1]
            buf[block - 1] = _ZERO
        cuda.syncthreads()
        stride = block
        while stride >= 2:  # down-sweep: left child gets the parent's prefix, right child adds the left sum
            k = (tid + 1) * stride - 1
            if k < block:
                left = buf[k - stride // 2]
                parent = buf[k]
                buf[k - stride // 2] = parent
                buf[k] = parent + left
            cuda.syncthreads()
            stride //= 2
        if tid < block - 1:  # exclusive -> inclusive: the next slot holds this one's inclusive sum
            total = buf[tid + 1]
        if i < y.shape[0]:
            y[i] = total
        if tid == block - 1 and cuda.gridDim.x > 1:
            sums[cuda.blockIdx.x] = total

    return blelloch_kernel


@cuda.jit
def _add_block_offsets_kernel(y, scanned_sums):
    """Block ``b`` of this launch covers scan block ``b + 1``: add the total of scan blocks ``0 .. b``."""
    i = (cuda.blockIdx.x + 1) * cuda.blockDim.x + cuda.threadIdx.x
    if i < y.shape[0]:
        y[i] += scanned_sums[cuda.blockIdx.x]


def _scan_steps(algorithm: str, kernel_of, x: np.ndarray, block: int) -> tuple[list[KernelStep], np.ndarray, int, int]:
    """``(steps, y, modeled bytes, adds)`` scanning ``x`` with ``kernel_of(block)``, recursing on the block sums."""
    n = x.shape[0]
    blocks = ceil_div(n, block)
    y = np.empty(n, dtype=np.float32)
    sums = np.empty(blocks, dtype=np.float32)
    steps = [KernelStep(kernel_of(block), (blocks,), (block,), (x, y, sums))]
    adds = blocks * scan_work_depth(block, algorithm)[0]
    if blocks == 1:
        return steps, y, 4 * 2 * n, adds
    inner, scanned, inner_bytes, inner_adds = _scan_steps(algorithm, kernel_of, sums, block)
    rest = n - block  # elements past the first block: each read, written, and given its block's offset
    steps += [*inner, KernelStep(_add_block_offsets_kernel, (blocks - 1,), (block,), (y, scanned))]
    return steps, y, 4 * (2 * n + blocks) + inner_bytes + 4 * 3 * rest, adds + inner_adds + rest


def _scan_plan(algorithm: str, kernel_of, x: np.ndarray, block: int) -> KernelPlan:
    x = float32_array("x", x, 1)
    block = _power_of_two("block", block)
    if block > 1024:
        raise ValueError(f"block must be at most 1024 threads, got {block}")
    steps, y, nbytes, adds = _scan_steps(algorithm, kernel_of, x, block)
    return KernelPlan(f"scan_{algorithm}", tuple(steps), y, flops=adds, modeled_bytes=nbytes,
                      compulsory_bytes=8 * x.shape[0])


@HostOp
def scan_hillis_steele(x: np.ndarray, block: int = 256) -> KernelPlan:
    """Inclusive prefix sum of float32 ``x`` (n,) -> (n,): Hillis-Steele in blocks of ``block`` (a power of two).

    ``log2 block`` steps, ``block log2 block - block + 1`` adds per block (``flops`` counts every add
    launched, padding included); shared memory ``8 block`` bytes.
    """
    return _scan_plan("hillis_steele", _hillis_steele_kernel, x, block)


@HostOp
def scan_blelloch(x: np.ndarray, block: int = 256) -> KernelPlan:
    """Inclusive prefix sum of float32 ``x`` (n,) -> (n,): Blelloch's work-efficient scan in blocks of ``block``.

    ``2 log2 block`` steps, ``2 (block - 1)`` adds per block (``flops`` counts every add launched);
    shared memory ``4 block`` bytes.
    """
    return _scan_plan("blelloch", _blelloch_kernel, x, block)


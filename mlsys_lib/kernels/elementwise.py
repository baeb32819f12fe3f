"""Elementwise map: ``out[i] = fn(x[i])``, one CUDA thread per element (the lecture's first kernel).

Thread ``i = blockIdx.x * blockDim.x + threadIdx.x`` handles element ``i``; the grid has
``ceil(n / block)`` blocks, so the threads of the last block past the end do nothing (the bound
guard ``if i < n``). Arrays of any shape are mapped through their flat, contiguous view.
"""

from __future__ import annotations

import functools
import types
from typing import Callable

import numpy as np
from numba import cuda

from .checks import block_threads, ceil_div, float32_array, positive_int
from .plan import HostOp, KernelPlan, KernelStep


@functools.lru_cache(maxsize=None)
def _map_kernel(fn: Callable[[float], float]):
    """The kernel for ``fn``, compiled once per function (``fn`` becomes a CUDA device function)."""
    device_fn = cuda.jit(device=True)(fn)

    @cuda.jit
    def map_kernel(x, out):
        i = cuda.grid(1)
        if i < x.shape[0]:
            out[i] = device_fn(x[i])

    return map_kernel


@HostOp
def elementwise_map(fn: Callable[[float], float], x: np.ndarray, block: int = 128) -> KernelPlan:
    """``fn`` applied to every element of the float32 array ``x`` (any shape); same shape, float32.

    ``fn`` is a scalar Python function Numba can compile for the GPU (``lambda v: 2 * v + 1``,
    ``lambda v: math.tanh(v)``; a built-in such as ``math.tanh`` must be wrapped so). It is
    compiled once per function object. ``block`` is the number of threads per block. Roofline
    accounting: one FLOP per element, one 4-byte read and one 4-byte write per element.
    """
    if not isinstance(fn, types.FunctionType):
        raise TypeError(f"fn must be a Python function (def or lambda) Numba can compile, got {type(fn).__name__}; "
                        "wrap built-ins: lambda v: math.tanh(v)")
    if not isinstance(x, np.ndarray):
        raise TypeError(f"x must be a numpy.ndarray, got {type(x).__name__}")
    flat = float32_array("x", x.reshape(-1), 1)
    block = positive_int("block", block)
    block_threads("block", block)
    n = flat.shape[0]
    out = np.empty(n, dtype=np.float32)
    step = KernelStep(_map_kernel(fn), (ceil_div(n, block),), (block,), (flat, out))
    return KernelPlan("elementwise_map", (step,), out, flops=n, modeled_bytes=2 * n * 4, shape=x.shape,
                      compulsory_bytes=2 * n * 4)

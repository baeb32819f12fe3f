"""Input checks the host wrappers run before any launch, so a bad call fails with a clear message.

A kernel launched with a wrong shape or dtype does not fail on a GPU: it reads past an array or
reinterprets its bits. The host wrappers therefore check everything first, with these helpers.
"""

from __future__ import annotations

import numpy as np

#: Most threads one block may hold on every CUDA GPU since compute capability 2.0.
MAX_THREADS_PER_BLOCK = 1024
#: Static shared memory one block may declare [bytes] (48 KiB on every CUDA GPU).
MAX_SHARED_BYTES = 48 * 1024
#: 32-bit registers one block may use (64K on every CUDA GPU from compute capability 5.0 to 9.0).
MAX_REGISTERS_PER_BLOCK = 64 * 1024


def float32_array(name: str, a: object, ndim: int) -> np.ndarray:
    """``a`` as a C-contiguous float32 array of rank ``ndim``; TypeError/ValueError otherwise.

    The dtype is checked, never converted: the kernels compute in float32, and a silent cast of a
    float64 input would hide a precision change from the caller. Empty arrays are refused (a grid
    of zero blocks is not a valid launch).
    """
    if not isinstance(a, np.ndarray):
        raise TypeError(f"{name} must be a numpy.ndarray, got {type(a).__name__}")
    if a.dtype != np.float32:
        raise TypeError(f"{name} must have dtype float32, got {a.dtype} (convert with .astype(np.float32))")
    if a.ndim != ndim:
        raise ValueError(f"{name} must have {ndim} dimension(s), got shape {a.shape}")
    if a.size == 0:
        raise ValueError(f"{name} must not be empty, got shape {a.shape}")
    return np.ascontiguousarray(a)


def positive_int(name: str, value: object) -> int:
    """``value`` as an int >= 1 (bools refused); TypeError/ValueError otherwise."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value < 1:
        raise ValueError(f"{name} must be at least 1, got {value}")
    return int(value)


def block_threads(name: str, threads: int) -> None:
    """ValueError if a block of ``threads`` threads exceeds :data:`MAX_THREADS_PER_BLOCK`."""
    if threads > MAX_THREADS_PER_BLOCK:
        raise ValueError(f"{name} gives {threads} threads per block; a CUDA block holds at most "
                         f"{MAX_THREADS_PER_BLOCK}")


def shared_bytes(name: str, nbytes: int) -> None:
    """ValueError if ``nbytes`` of static shared memory exceed :data:`MAX_SHARED_BYTES`."""
    if nbytes > MAX_SHARED_BYTES:
        raise ValueError(f"{name} needs {nbytes} bytes of shared memory per block; at most "
                         f"{MAX_SHARED_BYTES} can be declared statically")


def block_registers(name: str, threads: int, registers_per_thread: int) -> None:
    """ValueError if ``threads`` threads of ``registers_per_thread`` registers each overflow the register file.

    A block's threads share one register file of :data:`MAX_REGISTERS_PER_BLOCK` 32-bit registers;
    a launch needing more fails on the GPU ("too many resources requested for launch").
    """
    registers_per_thread = positive_int("registers_per_thread", registers_per_thread)
    needed = threads * registers_per_thread
    if needed > MAX_REGISTERS_PER_BLOCK:
        most = MAX_REGISTERS_PER_BLOCK // registers_per_thread
        raise ValueError(f"{name}: {threads} threads x {registers_per_thread} registers = {needed} registers per "
                         f"block; a block may use at most {MAX_REGISTERS_PER_BLOCK}, so at most {most} threads")


def ceil_div(a: int, b: int) -> int:
    """``ceil(a / b)`` for positive ints: how many blocks of ``b`` cover ``a`` items."""
    return -(-a // b)

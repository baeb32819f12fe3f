"""Timing kernels on a real GPU with CUDA events, and cuBLAS (through CuPy) as the yardstick.

CUDA launches are asynchronous: a host clock around ``kernel[grid, block](...)`` measures the launch,
not the kernel. CUDA events are recorded into the GPU's stream before and after the launches and
the GPU itself stamps them, so ``event_elapsed_time`` is the time the kernels ran. Inputs are
copied to the device once, before timing, so transfers over PCIe are not counted either.
"""

from __future__ import annotations

import numpy as np
from numba import cuda

from ..checks import float32_array, positive_int
from .device import current_backend
from ..plan import KernelPlan


def gpu_available() -> bool:
    """True when kernels run on a real GPU (the simulator also says ``cuda.is_available()``)."""
    return current_backend() == "gpu" and cuda.is_available()


def _require_gpu() -> None:
    if not gpu_available():
        raise RuntimeError("timing needs a real GPU; under the simulator count traffic with instrument() instead")


def time_plan(plan: KernelPlan, repeats: int = 10) -> float:
    """Mean time [s] of one run of ``plan`` (all its launches) on the GPU, by CUDA events.

    One untimed run first compiles the kernels and warms the GPU up. RuntimeError without a GPU.
    """
    repeats = positive_int("repeats", repeats)
    _require_gpu()
    launches, _ = plan.device_steps()

    def run() -> None:
        for kernel, grid, block, args in launches:
            kernel[grid, block](*args)

    run()
    cuda.synchronize()
    start, end = cuda.event(), cuda.event()
    start.record()
    for _ in range(repeats):
        run()
    end.record()
    end.synchronize()
    return cuda.event_elapsed_time(start, end) / 1e3 / repeats


def time_cupy_matmul(A: np.ndarray, B: np.ndarray, repeats: int = 10) -> float | None:
    """Mean time [s] of CuPy's ``A @ B`` (cuBLAS) for float32 A (M, K), B (K, P); None if CuPy is not installed."""
    A = float32_array("A", A, 2)
    B = float32_array("B", B, 2)
    repeats = positive_int("repeats", repeats)
    _require_gpu()
    try:
        import cupy
    except ImportError:
        return None
    a, b = cupy.asarray(A), cupy.asarray(B)
    a @ b
    cupy.cuda.Device().synchronize()
    start, end = cupy.cuda.Event(), cupy.cuda.Event()
    start.record()
    for _ in range(repeats):
        a @ b
    end.record()
    end.synchronize()
    return cupy.cuda.get_elapsed_time(start, end) / 1e3 / repeats

"""Arithmetic intensity and the roofline model.

*Arithmetic intensity* is the work a kernel does per byte it moves to or from memory
(FLOP/byte). A machine with peak compute ``peak_flops`` (FLOP/s) and memory bandwidth
``bandwidth`` (byte/s) can run a kernel of intensity ``I`` at most at::

    attainable(I) = min(peak_flops, I * bandwidth)         [FLOP/s]

Kernels left of the *ridge point* ``peak_flops / bandwidth`` are memory-bound, kernels right of it
compute-bound. Matmul of (m, n) by (n, p) does ``2mnp`` FLOPs on ``mn + np + mp`` elements (high
intensity); an elementwise add does 1 FLOP per 2 loads and 1 store (intensity 1/3 per element).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable

import numpy as np

__all__ = ["arithmetic_intensity", "matmul_flops_bytes", "elementwise_flops_bytes", "Roofline",
           "measure_roofline", "time_best"]


def arithmetic_intensity(flops: float, bytes_moved: float) -> float:
    """FLOPs per byte moved. ValueError for ``bytes_moved <= 0`` or ``flops < 0``."""
    if bytes_moved <= 0:
        raise ValueError(f"bytes_moved must be positive, got {bytes_moved}")
    if flops < 0:
        raise ValueError(f"flops must be non-negative, got {flops}")
    return flops / bytes_moved


def matmul_flops_bytes(m: int, n: int, p: int, itemsize: int = 4) -> tuple[int, int]:
    """``(FLOPs, bytes)`` of ``(m, n) @ (n, p)``: ``2mnp`` FLOPs; read A and B, write C once each."""
    return 2 * m * n * p, (m * n + n * p + m * p) * itemsize


def elementwise_flops_bytes(n: int, itemsize: int = 4) -> tuple[int, int]:
    """``(FLOPs, bytes)`` of an elementwise binary op on n elements: n FLOPs, 2 loads + 1 store each."""
    return n, 3 * n * itemsize


@dataclass(frozen=True)
class Roofline:
    """A machine's roof: ``peak_flops`` [FLOP/s] and memory ``bandwidth`` [byte/s]."""

    peak_flops: float
    bandwidth: float

    def __post_init__(self) -> None:
        if not (self.peak_flops > 0 and self.bandwidth > 0):
            raise ValueError(f"peak_flops and bandwidth must be positive, got {self.peak_flops} and {self.bandwidth}")

    @property
    def ridge_point(self) -> float:
        """The intensity [FLOP/byte] where the memory slope meets the compute ceiling."""
        return self.peak_flops / self.bandwidth

    def attainable(self, intensity: float | np.ndarray) -> float | np.ndarray:
        """Attainable FLOP/s at ``intensity`` [FLOP/byte]: ``min(peak_flops, intensity * bandwidth)``.

        Works elementwise on numpy arrays; a scalar gives a float.
        """
        result = np.minimum(self.peak_flops, np.asarray(intensity, dtype=np.float64) * self.bandwidth)
        return float(result) if result.ndim == 0 else result


def time_best(fn: Callable[[], object], repeats: int = 3) -> float:
    """Best wall-clock time of ``repeats`` calls of ``fn()``, in seconds (warm ``fn`` up first)."""
    if repeats < 1:
        raise ValueError(f"repeats must be at least 1, got {repeats}")
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def _repeats_within(fn: Callable[[], object], seconds: float) -> int:
    """Warm ``fn`` up once and return how many calls fit in ``seconds`` (at least 2, at most 20)."""
    start = time.perf_counter()
    fn()
    return int(min(20, max(2, seconds / max(time.perf_counter() - start, 1e-9))))


def measure_roofline(seconds: float = 2.0, matmul_n: int = 1024, stream_bytes: int = 256 * 2**20) -> Roofline:
    """Measure this machine's roof in about ``seconds`` (plus allocation).

    - peak: the best of repeated float32 numpy matmuls ``(n, n) @ (n, n)``, ``2n^3`` FLOPs each;
    - bandwidth: a STREAM-like copy of a ``stream_bytes`` float32 array, counting the bytes read
      and the bytes written (``2 * stream_bytes``), best of repeats.
    """
    rng = np.random.default_rng(0)
    A = rng.random((matmul_n, matmul_n), dtype=np.float32)
    B = rng.random((matmul_n, matmul_n), dtype=np.float32)

    def matmul() -> None:
        A @ B
    flops = 2 * matmul_n ** 3 / time_best(matmul, _repeats_within(matmul, seconds / 2))

    src = np.ones(stream_bytes // 4, dtype=np.float32)
    dst = np.empty_like(src)

    def copy() -> None:
        np.copyto(dst, src)
    bandwidth = 2 * src.nbytes / time_best(copy, _repeats_within(copy, seconds / 2))
    return Roofline(peak_flops=flops, bandwidth=bandwidth)

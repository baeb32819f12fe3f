"""The GPU lab session: time the course's kernels on a real GPU against the device's own peak.

``mlsys course figures --gpu`` (``make plots-gpu``) calls :func:`gpu_figures` on a machine with an
NVIDIA GPU: every kernel of lecture 6's roofline and of lecture 12's warp-level sequences (transpose,
the five reductions, the two scans, softmax and LayerNorm) is run at GPU sizes and timed with CUDA
events (:func:`~mlsys_lib.kernels.measure`), and a line per kernel says the global-memory bandwidth
and FLOP/s it achieved against the peak of the device it ran on. Three figures are written next to
the simulator's (``lec06_roofline_gpu.png``, ``lec06_attention_gpu.png``,
``lec12_warp_kernels_gpu.png``). Without a GPU it says so in one line and exits 0: the simulator's
figures count work, they cannot time it.

The peak is computed from what the device reports (:func:`device_peak`), as NVIDIA's datasheets do:

* bandwidth = 2 (double data rate) × memory clock × bus width / 8  [byte/s];
* FP32 = SMs × FP32 lanes per SM × 2 (a fused multiply-add is 2 FLOPs) × SM clock  [FLOP/s], with
  the lanes per SM of the CUDA C++ Programming Guide's throughput table (:data:`FP32_LANES_PER_SM`).

Bandwidth here is each kernel's *modeled* global traffic (the lecture's count, which the tests check
against the simulator's count) per second, so a kernel that re-reads from global memory may show
more than the bytes it needed: compare kernels by time, and use the line to see how far from the roof
each one is.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Iterable

import numpy as np

from ...tensor.roofline import Roofline
from .roofline import KernelMeasurement, measure, roofline_points
from .timing import gpu_available

#: FP32 results per clock per SM (CUDA C++ Programming Guide, "Arithmetic Instructions" throughput table).
FP32_LANES_PER_SM = {(6, 0): 64, (6, 1): 128, (7, 0): 64, (7, 5): 64, (8, 0): 64, (8, 6): 128, (8, 7): 128,
                     (8, 9): 128, (9, 0): 128, (10, 0): 128, (12, 0): 128}
NO_GPU = "no NVIDIA GPU here ({reason}): the GPU figures need one; the simulator's figures are in lectures/figures/"


@dataclass(frozen=True)
class DevicePeak:
    """What a GPU reports about itself: SMs, clocks [Hz], memory bus width [bits], compute capability."""

    name: str
    compute_capability: tuple[int, int]
    sms: int
    clock_hz: float
    memory_clock_hz: float
    bus_bits: int

    @property
    def bandwidth(self) -> float:
        """Peak global-memory bandwidth [byte/s]."""
        return 2 * self.memory_clock_hz * self.bus_bits / 8

    @property
    def fp32_flops(self) -> float:
        """Peak FP32 throughput [FLOP/s] (FMA = 2 FLOPs); ValueError for an unknown compute capability."""
        if self.compute_capability not in FP32_LANES_PER_SM:
            raise ValueError(f"{self.name}: no FP32 lanes-per-SM figure for compute capability "
                             f"{self.compute_capability}; add it to FP32_LANES_PER_SM")
        return self.sms * FP32_LANES_PER_SM[self.compute_capability] * 2 * self.clock_hz

    @property
    def roofline(self) -> Roofline:
        return Roofline(peak_flops=self.fp32_flops, bandwidth=self.bandwidth)


def device_peak(device: Any = None) -> DevicePeak:
    """The :class:`DevicePeak` of ``device`` (default: numba.cuda's current device).

    ``device`` needs numba's attribute names: ``name``, ``compute_capability``, ``MULTIPROCESSOR_COUNT``,
    ``CLOCK_RATE`` and ``MEMORY_CLOCK_RATE`` (kHz), ``GLOBAL_MEMORY_BUS_WIDTH`` (bits).
    """
    if device is None:
        from numba import cuda

        device = cuda.get_current_device()
    name = device.name.decode() if isinstance(device.name, bytes) else str(device.name)
    return DevicePeak(name, tuple(device.compute_capability), int(device.MULTIPROCESSOR_COUNT),
                      1e3 * device.CLOCK_RATE, 1e3 * device.MEMORY_CLOCK_RATE, int(device.GLOBAL_MEMORY_BUS_WIDTH))


def report_lines(measurements: Iterable[KernelMeasurement], peak: DevicePeak) -> list[str]:
    """One line per timed kernel: time, achieved bandwidth and FLOP/s, each against the device's peak."""
    lines = [f"{peak.name} (sm_{peak.compute_capability[0]}{peak.compute_capability[1]}): peak "
             f"{peak.bandwidth / 1e9:.0f} GB/s, {peak.fp32_flops / 1e12:.1f} TFLOP/s FP32"]
    for m in measurements:
        if m.seconds is None:
            raise ValueError(f"{m.name} was not timed (measured under the simulator?)")
        lines.append(f"{m.name:>32}: {m.seconds * 1e3:9.3f} ms  {m.gbps:8.1f} GB/s "
                     f"({100 * m.gbps * 1e9 / peak.bandwidth:5.1f}% of peak)  {m.gflops:9.1f} GFLOP/s "
                     f"({100 * m.gflops * 1e9 / peak.fp32_flops:5.1f}%)")
    return lines


def plot_session(measurements: list[KernelMeasurement], attention: dict[str, list[tuple[int, float]]],
                 warp: list[KernelMeasurement], peak: DevicePeak, out_dir: Path) -> list[Path]:
    """Draw the timed kernels on ``peak``'s roofline, attention's time vs length, and the warp-level
    kernels' bandwidth against the peak; return the three files.

    ``attention``: ``{"naive" | "fused": [(sequence length, seconds), ...]}``; ``warp``: lecture 12's kernels,
    timed, in the order drawn (top to bottom).
    """
    import matplotlib.pyplot as plt

    from ...viz import plot_roofline

    out_dir.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=(7.5, 4.8))
    plot_roofline(peak.roofline, roofline_points(measurements, peak.roofline), ax=ax)
    ax.legend(loc="upper left", fontsize=8)  # the slow kernels sit low on the right
    ax.set_title(f"The course's kernels timed on {peak.name}")
    fig.tight_layout()
    roofline_png = out_dir / "lec06_roofline_gpu.png"
    fig.savefig(roofline_png, dpi=120)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    for (name, points), marker in zip(sorted(attention.items()), "os"):
        lengths, seconds = zip(*points)
        ax.loglog(lengths, [1e3 * s for s in seconds], marker + "-", label=name)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("sequence length n")
    ax.set_ylabel("time (ms, CUDA events)")
    ax.set_title(f"Attention on {peak.name}: naive vs fused")
    ax.legend()
    ax.grid(alpha=0.3, which="both")
    fig.tight_layout()
    attention_png = out_dir / "lec06_attention_gpu.png"
    fig.savefig(attention_png, dpi=120)
    plt.close(fig)
    return [roofline_png, attention_png, _plot_warp_kernels(warp, peak, out_dir / "lec12_warp_kernels_gpu.png")]


def _plot_warp_kernels(warp: list[KernelMeasurement], peak: DevicePeak, path: Path) -> Path:
    """One bar per kernel: achieved bandwidth as a share of ``peak``'s, the time written beside it."""
    import matplotlib.pyplot as plt

    shares = [100 * m.gbps * 1e9 / peak.bandwidth for m in warp]
    fig, ax = plt.subplots(figsize=(7.5, 0.35 * len(warp) + 1.2))
    rows = range(len(warp))[::-1]
    ax.barh(rows, shares, color="C0")
    for row, share, m in zip(rows, shares, warp):
        ax.text(share + 1, row, f"{m.seconds * 1e3:.3f} ms", va="center", fontsize=8)
    ax.set_yticks(list(rows), [m.name for m in warp], fontsize=8)
    ax.axvline(100, color="gray", linestyle="--", label=f"peak {peak.bandwidth / 1e9:.0f} GB/s")
    ax.set_xlabel("modeled global traffic / time, % of peak bandwidth (CUDA events)")
    ax.set_title(f"Lecture 12's kernels on {peak.name}")
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def _plans(rng: np.random.Generator) -> list[tuple[str, Any]]:
    """The lecture's roofline kernels at sizes that keep a GPU busy for a few milliseconds."""
    from ..attention import attention_fused, attention_naive
    from ..conv1d import conv1d_naive, conv1d_shared
    from ..matmul import matmul_naive, matmul_register_blocked, matmul_tiled

    x = rng.standard_normal(1 << 24).astype(np.float32)
    w = np.full(3, 1 / 3, dtype=np.float32)
    A, B = (rng.standard_normal((1024, 1024)).astype(np.float32) for _ in range(2))
    Q, K, V = (rng.standard_normal((1024, 64)).astype(np.float32) for _ in range(3))
    return [("conv1d naive", conv1d_naive.plan(x, w)), ("conv1d shared", conv1d_shared.plan(x, w)),
            ("matmul naive", matmul_naive.plan(A, B)), ("matmul tiled L=16", matmul_tiled.plan(A, B, tile=16)),
            ("matmul tiled L=32", matmul_tiled.plan(A, B, tile=32)),
            ("matmul register-blocked V=4", matmul_register_blocked.plan(A, B, v=4, block=8)),
            ("attention naive", attention_naive.plan(Q, K, V)), ("attention fused", attention_fused.plan(Q, K, V))]


def _warp_plans(rng: np.random.Generator) -> list[tuple[str, Any]]:
    """Lecture 12's kernels (and Lab 12's) at GPU sizes: each sequence in the lecture's order."""
    from ..norms import layernorm_rows, softmax_rows
    from ..reduce import (reduce_first_add, reduce_interleaved, reduce_interleaved_strided, reduce_sequential,
                         reduce_warp_unrolled)
    from ..scan import scan_blelloch, scan_hillis_steele
    from ..transpose import transpose_naive, transpose_padded, transpose_shared

    a = rng.standard_normal((4096, 4096)).astype(np.float32)
    x = rng.standard_normal(1 << 24).astype(np.float32)
    rows = rng.standard_normal((8192, 1024)).astype(np.float32)
    plans = [(f"transpose {name} 4096²", op.plan(a)) for name, op in
             (("naive", transpose_naive), ("shared tile", transpose_shared), ("padded tile", transpose_padded))]
    plans += [(f"sum {name} 2²⁴", op.plan(x)) for name, op in
              (("interleaved", reduce_interleaved), ("strided index", reduce_interleaved_strided),
               ("sequential", reduce_sequential), ("first add", reduce_first_add),
               ("warp-unrolled", reduce_warp_unrolled))]
    plans += [(f"scan {name} 2²⁴", op.plan(x)) for name, op in
              (("Hillis-Steele", scan_hillis_steele), ("Blelloch", scan_blelloch))]
    return plans + [("softmax 8192x1024", softmax_rows.plan(rows)), ("LayerNorm 8192x1024", layernorm_rows.plan(rows))]


def _attention_times(rng: np.random.Generator, repeats: int) -> dict[str, list[tuple[int, float]]]:
    from ..attention import attention_fused, attention_naive

    times: dict[str, list[tuple[int, float]]] = {"naive": [], "fused": []}
    for n in (256, 512, 1024, 2048, 4096):
        Q, K, V = (rng.standard_normal((n, 64)).astype(np.float32) for _ in range(3))
        for name, op in (("naive", attention_naive), ("fused", attention_fused)):
            times[name].append((n, measure(op.plan(Q, K, V), repeats).seconds))
    return times


def gpu_figures(out_dir: Path, repeats: int = 20) -> list[Path]:
    """Time the course's kernels on this GPU, print a line each against its peak, write the three figures.

    RuntimeError without a GPU (the CLI checks :func:`~mlsys_lib.kernels.gpu_available` first).
    """
    if not gpu_available():
        from .device import device_info

        raise RuntimeError(NO_GPU.format(reason=device_info()["reason"]))
    rng = np.random.default_rng(0)
    peak = device_peak()
    measurements = [replace(measure(plan, repeats), name=name) for name, plan in _plans(rng)]
    warp = [replace(measure(plan, repeats), name=name) for name, plan in _warp_plans(rng)]
    for line in report_lines(measurements + warp, peak):
        print(line)
    return plot_session(measurements, _attention_times(rng, repeats), warp, peak, Path(out_dir))

"""The GPU lab session: time the course's kernels on a real GPU against the device's own peak.

``mlsys course figures --gpu`` (``make plots-gpu``) calls :func:`gpu_figures` on a machine with an
NVIDIA GPU: every benchmark of :mod:`~mlsys_lib.kernels.gpu.suite` (lecture 6's roofline kernels,
the fast matmul and attention, lecture 12's warp-level sequences) is run at GPU sizes and timed with
CUDA events (:func:`~mlsys_lib.kernels.measure`); a table row per kernel gives its time, the
bandwidth it achieved on its *compulsory* traffic, its FLOP/s, and its time as a percentage of the
roofline bound (:mod:`~mlsys_lib.kernels.gpu.bound`), all against the peaks of the device it ran on;
then every claim of the suite prints "claim holds: ..." or "claim does not hold: ...". Three figures
are written next to the simulator's (``lec06_roofline_gpu.png``, ``lec06_attention_gpu.png``,
``lec12_warp_kernels_gpu.png``). Without a GPU it says so in one line and exits 0: the simulator's
figures count work, they cannot time it, so no claim can be measured.

The peak is computed from what the device reports (:func:`device_peak`), as NVIDIA's datasheets do:

* bandwidth = 2 (double data rate) × memory clock × bus width / 8  [byte/s];
* FP32 = SMs × FP32 lanes per SM × 2 (a fused multiply-add is 2 FLOPs) × SM clock  [FLOP/s], with
  the lanes per SM of the CUDA C++ Programming Guide's throughput table (:data:`FP32_LANES_PER_SM`).

Bandwidth here is each kernel's *compulsory* traffic (inputs read once, result written once) per
second: what the kernel had to move, never above the physical peak (re-reads the caches absorbed
are not counted; ``KernelPlan.modeled_bytes`` counts them).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

import numpy as np

from ...tensor.roofline import Roofline
from ...viz.claims import Claim
from .bound import percent_of_bound, roofline_seconds
from .roofline import KernelMeasurement, measure, roofline_points
from .suite import BENCHMARKS, HEADS, Benchmark, Timing, check_claims
from .timing import gpu_available

#: FP32 results per clock per SM (CUDA C++ Programming Guide, "Arithmetic Instructions" throughput table).
FP32_LANES_PER_SM = {(6, 0): 64, (6, 1): 128, (7, 0): 64, (7, 5): 64, (8, 0): 64, (8, 6): 128, (8, 7): 128,
                     (8, 9): 128, (9, 0): 128, (10, 0): 128, (12, 0): 128}
NO_GPU = ("no NVIDIA GPU here ({reason}): cannot measure the GPU figures and claims; the simulator's figures are in "
          "lectures/figures/")


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


def report_lines(timings: Iterable[Timing], peak: DevicePeak) -> list[str]:
    """The benchmark table: a header naming the device, then per kernel its time, the bandwidth achieved on
    its compulsory bytes and its FLOP/s (each against the device's peak) and its % of the roofline bound."""
    lines = [f"{peak.name} (sm_{peak.compute_capability[0]}{peak.compute_capability[1]}): peak "
             f"{peak.bandwidth / 1e9:.0f} GB/s, {peak.fp32_flops / 1e12:.1f} TFLOP/s FP32",
             f"{'kernel':>36}  {'time':>9}  {'compulsory GB/s':>21}  {'GFLOP/s':>17}  {'% of bound':>10}"]
    for t in timings:
        gbps = t.compulsory_bytes / t.seconds / 1e9
        gflops = t.flops / t.seconds / 1e9
        bound = roofline_seconds(t.flops, t.compulsory_bytes, peak.fp32_flops, peak.bandwidth)
        lines.append(f"{t.name:>36}  {t.seconds * 1e3:6.3f} ms  {gbps:8.1f} ({100 * gbps * 1e9 / peak.bandwidth:5.1f}%)"
                     f"  {gflops:9.1f} ({100 * gflops * 1e9 / peak.fp32_flops:4.1f}%)"
                     f"  {percent_of_bound(t.seconds, bound):9.1f}%")
    return lines


def benchmark_timing(bench: Benchmark, measured: KernelMeasurement, compulsory: int) -> Timing:
    """The :class:`Timing` of ``bench``'s stated work from one measured run of its plan (``compulsory`` bytes)."""
    if measured.seconds is None:
        raise ValueError(f"{bench.name} was not timed (measured under the simulator?)")
    return Timing(bench.name, measured.seconds * bench.copies, measured.flops * bench.copies,
                  compulsory * bench.copies)


def _as_measurement(t: Timing) -> KernelMeasurement:
    return KernelMeasurement(t.name, t.flops, t.compulsory_bytes, t.seconds, "compulsory")


def plot_session(lec06: list[Timing], attention: dict[str, list[tuple[int, float]]], lec12: list[Timing],
                 peak: DevicePeak, out_dir: Path) -> list[Path]:
    """Draw lecture 6's timed kernels on ``peak``'s roofline (intensity from compulsory traffic), attention's
    time vs length, and lecture 12's kernels' compulsory bandwidth against the peak; return the three files.

    ``attention``: ``{"naive" | "fused" | "flash": [(sequence length, seconds for 32 heads), ...]}``;
    ``lec12`` in the order drawn (top to bottom). Kernels without FLOPs are left off the roofline.
    """
    import matplotlib.pyplot as plt

    from ...viz import plot_roofline

    out_dir.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=(7.5, 4.8))
    plot_roofline(peak.roofline, roofline_points([_as_measurement(t) for t in lec06 if t.flops > 0], peak.roofline),
                  ax=ax)
    ax.legend(loc="upper left", fontsize=7)  # the slow kernels sit low on the right
    ax.set_xlabel("arithmetic intensity (FLOP / compulsory byte)")
    ax.set_title(f"The course's kernels timed on {peak.name}")
    fig.tight_layout()
    roofline_png = out_dir / "lec06_roofline_gpu.png"
    fig.savefig(roofline_png, dpi=120)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    for (name, points), marker in zip(sorted(attention.items()), "os^"):
        lengths, seconds = zip(*points)
        ax.loglog(lengths, [1e3 * s for s in seconds], marker + "-", label=name)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("sequence length n")
    ax.set_ylabel(f"time for {HEADS} heads (ms, CUDA events)")
    ax.set_title(f"Attention on {peak.name}, d = 64: naive, fused, flash")
    ax.legend()
    ax.grid(alpha=0.3, which="both")
    fig.tight_layout()
    attention_png = out_dir / "lec06_attention_gpu.png"
    fig.savefig(attention_png, dpi=120)
    plt.close(fig)
    return [roofline_png, attention_png, _plot_bandwidth(lec12, peak, out_dir / "lec12_warp_kernels_gpu.png")]


def _plot_bandwidth(timings: list[Timing], peak: DevicePeak, path: Path) -> Path:
    """One bar per kernel: bandwidth achieved on its compulsory bytes as a share of ``peak``'s, its time beside it."""
    import matplotlib.pyplot as plt

    shares = [100 * t.compulsory_bytes / t.seconds / peak.bandwidth for t in timings]
    fig, ax = plt.subplots(figsize=(7.5, 0.35 * len(timings) + 1.2))
    rows = range(len(timings))[::-1]
    ax.barh(rows, shares, color="C0")
    for row, share, t in zip(rows, shares, timings):
        ax.text(share + 1, row, f"{t.seconds * 1e3:.3f} ms", va="center", fontsize=8)
    ax.set_yticks(list(rows), [t.name for t in timings], fontsize=8)
    ax.axvline(100, color="gray", linestyle="--", label=f"peak {peak.bandwidth / 1e9:.0f} GB/s")
    ax.set_xlim(0, 115)
    ax.set_xlabel("compulsory traffic / time, % of peak bandwidth (CUDA events)")
    ax.set_title(f"Lecture 12's kernels on {peak.name}")
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def _time(bench: Benchmark, rng: np.random.Generator, repeats: int) -> Timing:
    plan = bench.build(rng)
    return benchmark_timing(bench, measure(plan, repeats), plan.compulsory_bytes)


def _attention_times(rng: np.random.Generator, repeats: int) -> dict[str, list[tuple[int, float]]]:
    """Attention at n = 256 ... 4096 (d = 64) for 32 heads: flash on all of them, the single-head kernels x 32."""
    from ..attention import attention_fused, attention_naive
    from ..attention_fast import attention_flash

    times: dict[str, list[tuple[int, float]]] = {"naive": [], "fused": [], "flash": []}
    for n in (256, 512, 1024, 2048, 4096):
        Q, K, V = (rng.standard_normal((HEADS, n, 64), dtype=np.float32) for _ in range(3))
        times["flash"].append((n, measure(attention_flash.plan(Q, K, V), repeats).seconds))
        for name, op in (("naive", attention_naive), ("fused", attention_fused)):
            times[name].append((n, HEADS * measure(op.plan(Q[0], K[0], V[0]), repeats).seconds))
    return times


def gpu_figures(out_dir: Path, repeats: int = 20) -> tuple[list[Path], list[Claim]]:
    """Time every benchmark on this GPU, print the table and the claims, write the three figures.

    Returns ``(figures, claims)``. RuntimeError without a GPU (the CLI checks
    :func:`~mlsys_lib.kernels.gpu_available` first).
    """
    if not gpu_available():
        from .device import device_info

        raise RuntimeError(NO_GPU.format(reason=device_info()["reason"]))
    rng = np.random.default_rng(0)
    peak = device_peak()
    timings = {b.name: _time(b, rng, repeats) for b in BENCHMARKS}
    for line in report_lines(timings.values(), peak):
        print(line)
    claims = check_claims(timings, peak.fp32_flops, peak.bandwidth)
    by_figure = {fig: [timings[b.name] for b in BENCHMARKS if b.figure == fig] for fig in ("lec06", "lec12")}
    figures = plot_session(by_figure["lec06"], _attention_times(rng, repeats), by_figure["lec12"], peak, Path(out_dir))
    return figures, claims

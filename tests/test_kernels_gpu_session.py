"""The GPU lab session (``mlsys course figures --gpu``): the device's peak against NVIDIA's datasheets, the
report's arithmetic, the figures, and one line and exit 0 without a GPU; the timing itself only on a GPU."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

import mlsys_lib  # noqa: F401 - chooses the backend first
from autograder.cli import main
from mlsys_lib.kernels import KernelMeasurement, gpu_available
from mlsys_lib.kernels.gpu.gpu_session import DevicePeak, device_peak, gpu_figures, plot_session, report_lines

# What numba reports for these boards (clocks in kHz), and their datasheets' peaks.
A100 = SimpleNamespace(name=b"NVIDIA A100-SXM4-80GB", compute_capability=(8, 0), MULTIPROCESSOR_COUNT=108,
                       CLOCK_RATE=1_410_000, MEMORY_CLOCK_RATE=1_593_000, GLOBAL_MEMORY_BUS_WIDTH=5120)
H100 = SimpleNamespace(name="NVIDIA H100 80GB HBM3", compute_capability=(9, 0), MULTIPROCESSOR_COUNT=132,
                       CLOCK_RATE=1_980_000, MEMORY_CLOCK_RATE=2_619_000, GLOBAL_MEMORY_BUS_WIDTH=5120)


@pytest.mark.parametrize("device, gbps, tflops", [(A100, 2039, 19.5), (H100, 3352, 67.0)])
def test_peak_from_the_device_attributes_matches_the_datasheet(device, gbps, tflops):
    peak = device_peak(device)
    assert peak.bandwidth / 1e9 == pytest.approx(gbps, rel=0.005)
    assert peak.fp32_flops / 1e12 == pytest.approx(tflops, rel=0.005)
    assert peak.roofline.ridge_point == pytest.approx(peak.fp32_flops / peak.bandwidth)
    assert peak.name.startswith("NVIDIA")


def test_an_unknown_compute_capability_is_named():
    peak = DevicePeak("future GPU", (42, 0), 10, 1e9, 1e9, 64)
    with pytest.raises(ValueError, match=r"compute capability \(42, 0\)"):
        peak.fp32_flops


def test_report_lines_against_the_peak():
    peak = device_peak(A100)
    at_the_roof = KernelMeasurement("copy", flops=0, bytes=int(peak.bandwidth * 1e-3), seconds=1e-3,
                                    source="modeled")
    half_compute = KernelMeasurement("gemm", flops=int(peak.fp32_flops * 2e-3 / 2), bytes=1, seconds=2e-3,
                                     source="modeled")
    header, copy, gemm = report_lines([at_the_roof, half_compute], peak)
    assert "sm_80" in header and "2039 GB/s" in header and "19.5 TFLOP/s" in header
    assert "1.000 ms" in copy and "(100.0% of peak)" in copy
    assert "2.000 ms" in gemm and "( 50.0%)" in gemm
    with pytest.raises(ValueError, match="not timed"):
        report_lines([KernelMeasurement("counted", 1, 1, None, "counted")], peak)


def test_the_figures_are_drawn_from_timings(tmp_path):
    peak = device_peak(H100)
    timed = [KernelMeasurement("matmul tiled", 2 * 1024 ** 3, 8 << 20, 1e-4, "modeled"),
             KernelMeasurement("conv1d naive", 6 << 24, 16 << 24, 1e-4, "modeled")]
    attention = {"naive": [(256, 1e-4), (512, 4e-4)], "fused": [(256, 5e-5), (512, 1e-4)]}
    warp = [KernelMeasurement("transpose naive", 0, 8 << 20, 2e-5, "modeled"),
            KernelMeasurement("sum first add", 2 ** 20, 4 << 20, 3e-6, "modeled")]
    written = plot_session(timed, attention, warp, peak, tmp_path / "figures")
    assert [p.name for p in written] == ["lec06_roofline_gpu.png", "lec06_attention_gpu.png",
                                         "lec12_warp_kernels_gpu.png"]
    assert all(p.stat().st_size > 10_000 for p in written)


@pytest.mark.skipif(gpu_available(), reason="this machine has a GPU")
def test_without_a_gpu_one_line_and_exit_0(capsys, tmp_path):
    assert main(["figures", "--gpu"]) == 0
    printed = capsys.readouterr().out.strip().splitlines()
    assert len(printed) == 1 and printed[0].startswith("no NVIDIA GPU here (")
    with pytest.raises(RuntimeError, match="no NVIDIA GPU here"):
        gpu_figures(tmp_path)


@pytest.mark.skipif(not gpu_available(), reason="needs an NVIDIA GPU")
def test_on_a_gpu_every_kernel_is_timed_and_drawn(tmp_path, capsys):
    written = gpu_figures(tmp_path, repeats=3)
    assert all(p.stat().st_size > 10_000 for p in written)
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 1 + 8 and all("GB/s" in line for line in lines)

"""The GPU lab session (``mlsys course figures --gpu``): the device's peak against NVIDIA's datasheets, the
report's arithmetic, the figures, and one line and exit 0 without a GPU; the timing itself only on a GPU."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

import mlsys_lib  # noqa: F401 - chooses the backend first
from autograder.cli import main
from mlsys_lib.kernels import KernelMeasurement, gpu_available
from mlsys_lib.kernels.gpu.gpu_session import (DevicePeak, benchmark_timing, device_peak, gpu_figures, plot_session,
                                               report_lines)
from mlsys_lib.kernels.gpu.suite import BENCHMARKS, SPEEDUPS, Timing, check_claims

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
    copy = Timing("copy", seconds=1e-3, flops=0, compulsory_bytes=int(peak.bandwidth * 1e-3))
    gemm = Timing("gemm", seconds=2e-3, flops=int(peak.fp32_flops * 2e-3 / 2), compulsory_bytes=1000)
    header, columns, copy_line, gemm_line = report_lines([copy, gemm], peak)
    assert "sm_80" in header and "2039 GB/s" in header and "19.5 TFLOP/s" in header
    assert "% of bound" in columns
    assert "1.000 ms" in copy_line and "(100.0%)" in copy_line and copy_line.endswith("100.0%")
    assert "2.000 ms" in gemm_line and "(50.0%)" in gemm_line and gemm_line.endswith("50.0%")


def _timings(peak, fraction_of_bound, speedup):
    """Fake timings of every benchmark: each at ``fraction_of_bound`` of its roofline bound on ``peak``,
    except that every "slower" kernel of a speed-up claim takes ``speedup`` times its faster one's time."""
    work = {"matmul": (2 * 4096 ** 3, 3 * 4 * 4096 ** 2),
            "attention": (32 * 4 * 4096 ** 2 * 64, 32 * 4 * 4 * 4096 * 64)}
    timings = {}
    for bench in BENCHMARKS:
        flops, nbytes = work.get(bench.name.split()[0], (0, 8 * 2 ** 26))
        fastest = max(flops / peak.fp32_flops, nbytes / peak.bandwidth)
        timings[bench.name] = Timing(bench.name, fastest / fraction_of_bound, flops, nbytes)
    for slower, faster in SPEEDUPS:
        old = timings[slower]
        timings[slower] = Timing(slower, timings[faster].seconds * speedup, old.flops, old.compulsory_bytes)
    return timings


def test_claims_hold_with_timings_that_meet_every_floor_and_speedup(capsys):
    peak = device_peak(H100)
    claims = check_claims(_timings(peak, 0.9, speedup=1.5), peak.fp32_flops, peak.bandwidth)
    floors = [b for b in BENCHMARKS if b.floor is not None]
    assert len(claims) == len(SPEEDUPS) + len(floors) and all(c.holds for c in claims)
    lines = capsys.readouterr().out.strip().splitlines()
    assert all(line.startswith("claim holds: ") for line in lines)
    assert "attention flash n=4096 x32 is faster than attention naive n=4096 x32: measured 1.5x" in lines[0]
    flash = next(line for line in lines if "attention flash n=4096 x32 reaches" in line)
    assert "(FP32 peak)" in flash and "measured 90% of bound (the text needs >= 25% of bound)" in flash
    transpose = next(line for line in lines if "transpose padded 8192^2 reaches" in line)
    assert "(peak bandwidth)" in transpose and ">= 70% of bound" in transpose


def test_claims_do_not_hold_with_slow_timings(capsys):
    peak = device_peak(A100)
    timings = _timings(peak, 0.2, speedup=0.5)  # 20% of every bound, every "faster" kernel twice as slow
    claims = check_claims(timings, peak.fp32_flops, peak.bandwidth)
    assert claims and not any(c.holds for c in claims)
    lines = capsys.readouterr().out.strip().splitlines()
    assert all(line.startswith("claim does not hold: ") for line in lines)
    assert any("matmul block-tiled 128x128 4096^3 reaches" in line and "measured 20% of bound" in line
               and ">= 40% of bound" in line for line in lines)
    assert any("measured 0.5x" in line for line in lines)
    # 30% of its bound: the attention's 25% floor holds, the matmul's 40% does not
    at_30 = _timings(peak, 0.3, speedup=2.0)
    verdicts = {c.statement.split(" reaches")[0]: c.holds for c in check_claims(at_30, peak.fp32_flops,
                                                                               peak.bandwidth)}
    assert verdicts["attention flash n=4096 x32"] and not verdicts["matmul block-tiled 128x128 4096^3"]


def test_a_stated_work_counts_every_copy():
    bench = next(b for b in BENCHMARKS if b.name == "attention naive n=4096 x32")
    measured = KernelMeasurement(bench.name, flops=10, bytes=99, seconds=1e-3, source="modeled")
    assert benchmark_timing(bench, measured, compulsory=7) == Timing(bench.name, 32e-3, 320, 224)
    with pytest.raises(ValueError, match="not timed"):
        benchmark_timing(bench, KernelMeasurement("x", 1, 1, None, "counted"), compulsory=1)


def test_the_figures_are_drawn_from_timings(tmp_path):
    peak = device_peak(H100)
    lec06 = [Timing("matmul tiled", 1e-3, 2 * 1024 ** 3, 12 << 20), Timing("conv1d naive", 1e-4, 6 << 24, 8 << 24)]
    attention = {"naive": [(256, 1e-4), (512, 4e-4)], "fused": [(256, 5e-5), (512, 1e-4)],
                 "flash": [(256, 2e-5), (512, 5e-5)]}
    lec12 = [Timing("transpose naive", 2e-5, 0, 8 << 20), Timing("sum first add", 3e-6, 2 ** 20, 4 << 20)]
    written = plot_session(lec06, attention, lec12, peak, tmp_path / "figures")
    assert [p.name for p in written] == ["lec06_roofline_gpu.png", "lec06_attention_gpu.png",
                                         "lec12_warp_kernels_gpu.png"]
    assert all(p.stat().st_size > 10_000 for p in written)


def test_achieved_bandwidth_on_compulsory_bytes_stays_under_the_roof():
    """A kernel's roofline point uses compulsory bytes: a time no shorter than the bound is under both roofs."""
    peak = device_peak(H100)
    for flops, nbytes in ((2 * 4096 ** 3, 3 * 4 * 4096 ** 2), (0, 8 << 26), (10 << 26, 8 << 26)):
        fastest = max(flops / peak.fp32_flops, nbytes / peak.bandwidth)
        t = Timing("k", fastest, flops, nbytes)
        assert nbytes / t.seconds <= peak.bandwidth * (1 + 1e-12)
        assert flops / t.seconds <= peak.roofline.attainable(flops / nbytes) * (1 + 1e-12)


@pytest.mark.skipif(gpu_available(), reason="this machine has a GPU")
def test_without_a_gpu_one_line_and_exit_0(capsys, tmp_path):
    assert main(["figures", "--gpu"]) == 0
    printed = capsys.readouterr().out.strip().splitlines()
    assert len(printed) == 1 and printed[0].startswith("no NVIDIA GPU here (")
    assert "cannot measure the GPU figures and claims" in printed[0]
    with pytest.raises(RuntimeError, match="no NVIDIA GPU here"):
        gpu_figures(tmp_path)


@pytest.mark.skipif(not gpu_available(), reason="needs an NVIDIA GPU")
def test_on_a_gpu_every_kernel_is_timed_and_drawn(tmp_path, capsys):
    written, claims = gpu_figures(tmp_path, repeats=3)
    assert all(p.stat().st_size > 10_000 for p in written)
    lines = capsys.readouterr().out.strip().splitlines()
    table = [line for line in lines if "GB/s" in line or "% of bound" in line]
    assert len(table) == 2 + len(BENCHMARKS)
    assert len([line for line in lines if line.startswith("claim ")]) == len(claims) > len(SPEEDUPS)

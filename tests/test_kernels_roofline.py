"""Kernels on a roofline: counted under the simulator, timed with CUDA events on a GPU."""

from __future__ import annotations

import matplotlib
import numpy as np
import pytest

from mlsys_lib.kernels import (KernelMeasurement, attention_fused, attention_naive, conv1d_naive, conv1d_shared,
                               gpu_available, matmul_naive, matmul_tiled, measure, roofline_points,
                               time_cupy_matmul, time_plan)
from mlsys_lib.tensor import Roofline
from mlsys_lib.viz import plot_roofline

matplotlib.use("Agg")
ROOF = Roofline(peak_flops=1e13, bandwidth=1e12)  # ridge at 10 FLOP/byte

rng = np.random.default_rng(0)
A, B = rng.random((8, 8), dtype=np.float32), rng.random((8, 8), dtype=np.float32)
X, W = rng.random(60, dtype=np.float32), rng.random(5, dtype=np.float32)
Q, K, V = (rng.random((12, 4), dtype=np.float32) for _ in range(3))


@pytest.mark.skipif(gpu_available(), reason="counting needs the simulator")
def test_simulator_counts_bytes_and_places_kernels_on_the_roof():
    plans = [matmul_naive.plan(A, B, block=4), matmul_tiled.plan(A, B, tile=4), conv1d_naive.plan(X, W, block=16),
             conv1d_shared.plan(X, W, block=16), attention_naive.plan(Q, K, V, block=4),
             attention_fused.plan(Q, K, V, block_q=4, block_k=4)]
    measured = {m.name: m for m in map(measure, plans)}
    for plan in plans:
        m = measured[plan.name]
        assert (m.source, m.seconds, m.gflops, m.gbps) == ("counted", None, None, None)
        assert m.bytes == plan.modeled_bytes and m.flops == plan.flops
    assert measured["matmul_naive"].bytes == 4 * (2 * 8 ** 3 + 8 ** 2)
    # reuse raises intensity: tiled / naive by about L for matmul; fused attention far above naive
    assert measured["matmul_tiled"].intensity > 3 * measured["matmul_naive"].intensity
    assert measured["conv1d_shared"].intensity > 3 * measured["conv1d_naive"].intensity
    assert measured["attention_fused"].intensity > 5 * measured["attention_naive"].intensity
    points = roofline_points(measured.values(), ROOF)
    for name, (intensity, flops) in points.items():
        assert intensity == measured[name].intensity and flops == ROOF.attainable(intensity)
    assert plot_roofline(ROOF, points).get_legend() is not None


def test_timed_measurements_sit_at_their_achieved_rate_and_labels_stay_unique():
    timed = KernelMeasurement("matmul_tiled", flops=2 * 10 ** 9, bytes=10 ** 8, seconds=0.01, source="modeled")
    counted = KernelMeasurement("matmul_tiled", flops=2 * 10 ** 9, bytes=10 ** 9, seconds=None, source="counted")
    assert timed.gflops == pytest.approx(200) and timed.gbps == pytest.approx(10) and timed.intensity == 20
    points = roofline_points([timed, counted, counted], ROOF)
    assert list(points) == ["matmul_tiled", "matmul_tiled #2", "matmul_tiled #3"]
    assert points["matmul_tiled"] == (20, pytest.approx(2e11))
    assert points["matmul_tiled #2"] == (2, ROOF.attainable(2))


@pytest.mark.skipif(gpu_available(), reason="checks the simulator's refusal")
def test_timing_needs_a_real_gpu():
    with pytest.raises(RuntimeError, match="needs a real GPU"):
        time_plan(matmul_tiled.plan(A, B))
    with pytest.raises(RuntimeError, match="needs a real GPU"):
        time_cupy_matmul(A, B)
    with pytest.raises(TypeError, match="float32"):  # inputs are checked first, GPU or not
        time_cupy_matmul(A.astype(np.float64), B)


@pytest.mark.skipif(not gpu_available(), reason="needs an NVIDIA GPU")
def test_gpu_timing_gives_rates_and_tiling_pays():
    rng = np.random.default_rng(1)
    A, B = rng.random((512, 512), dtype=np.float32), rng.random((512, 512), dtype=np.float32)
    naive, tiled = measure(matmul_naive.plan(A, B)), measure(matmul_tiled.plan(A, B))
    assert naive.source == tiled.source == "modeled" and naive.seconds > 0 and tiled.gflops > 0
    assert tiled.seconds < naive.seconds
    np.testing.assert_allclose(matmul_tiled(A, B), A @ B, rtol=1e-4)
    seconds = time_cupy_matmul(A, B)
    assert seconds is None or seconds > 0

"""Arithmetic intensity, the roofline model, its measurement and its plot."""

from __future__ import annotations

import time

import matplotlib.pyplot as plt
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mlsys_lib.tensor import (Roofline, arithmetic_intensity, elementwise_flops_bytes, matmul_flops_bytes,
                              measure_roofline, time_best)
from mlsys_lib.viz import plot_roofline

positive = st.floats(1e-3, 1e15, allow_nan=False, allow_infinity=False)


def test_matmul_intensity_from_the_lecture():
    # m = n = p = 2: 2*2*2*2 = 16 FLOPs on 4 + 4 + 4 = 12 elements -> 4/3 FLOP per element moved.
    assert matmul_flops_bytes(2, 2, 2, itemsize=1) == (16, 12)
    assert arithmetic_intensity(*matmul_flops_bytes(2, 2, 2, itemsize=1)) == pytest.approx(4 / 3)
    assert arithmetic_intensity(*matmul_flops_bytes(2, 2, 2)) == pytest.approx(1 / 3)  # float32 bytes
    # Square n: 2n^3 / 3n^2 elements = 2n/3 per element, so intensity grows with n.
    assert arithmetic_intensity(*matmul_flops_bytes(300, 300, 300, itemsize=1)) == pytest.approx(200)


def test_elementwise_intensity_from_the_lecture():
    # add: 1 FLOP per 2 loads + 1 store -> 1/3 per element moved, 1/12 per float32 byte.
    assert arithmetic_intensity(*elementwise_flops_bytes(1000, itemsize=1)) == pytest.approx(1 / 3)
    assert arithmetic_intensity(*elementwise_flops_bytes(1000)) == pytest.approx(1 / 12)


def test_intensity_rejects_bad_inputs():
    with pytest.raises(ValueError, match="bytes"):
        arithmetic_intensity(1.0, 0)
    with pytest.raises(ValueError, match="flops"):
        arithmetic_intensity(-1.0, 8)
    with pytest.raises(ValueError, match="positive"):
        Roofline(peak_flops=0.0, bandwidth=1e9)


@settings(max_examples=100, deadline=None)
@given(positive, positive, st.lists(positive, min_size=1, max_size=8))
def test_attainable_is_the_lower_of_the_two_roofs(peak, bandwidth, intensities):
    roof = Roofline(peak, bandwidth)
    for intensity in intensities:
        expected = intensity * bandwidth if intensity < peak / bandwidth else peak
        assert roof.attainable(intensity) == pytest.approx(expected, rel=1e-12)
        assert isinstance(roof.attainable(intensity), float)
    np.testing.assert_allclose(roof.attainable(np.array(intensities)),
                               [roof.attainable(i) for i in intensities], rtol=1e-15)
    assert roof.attainable(roof.ridge_point) == pytest.approx(peak, rel=1e-12)
    assert roof.ridge_point * bandwidth == pytest.approx(peak, rel=1e-12)


def test_time_best_keeps_the_fastest_call():
    delays = iter([0.03, 0.002, 0.02])
    best = time_best(lambda: time.sleep(next(delays)), repeats=3)
    assert 0.002 <= best < 0.02
    with pytest.raises(ValueError, match="repeats"):
        time_best(lambda: None, repeats=0)


def test_measure_roofline_ends_and_is_plausible():
    start = time.perf_counter()
    roof = measure_roofline()
    # a guard against a measurement that never ends (its budget is 2 s), not a speed claim: the
    # 5 s bound it had failed on a loaded 2-core machine
    assert time.perf_counter() - start < 60.0
    assert 1e9 < roof.peak_flops < 1e14  # between 1 GFLOP/s and 100 TFLOP/s
    assert 1e8 < roof.bandwidth < 1e13   # between 0.1 GB/s and 10 TB/s
    small = measure_roofline(seconds=0.1, matmul_n=128, stream_bytes=2**22)
    assert small.peak_flops > 0 and small.bandwidth > 0


def test_plot_roofline_draws_the_roof_the_ridge_and_the_points():
    roof = Roofline(peak_flops=1e11, bandwidth=1e10)
    points = {"add": (1 / 12, 5e8), "matmul": (100.0, 4e10)}
    ax = plot_roofline(roof, points)
    assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
    roof_line = ax.get_lines()[0]
    x, y = roof_line.get_data()
    np.testing.assert_allclose(y, np.minimum(1e11, x * 1e10))
    assert x.min() < 1 / 12 and x.max() > 100.0
    assert any(np.allclose(line.get_xdata(), [10.0]) for line in ax.get_lines())  # the ridge, at 1e11/1e10
    for name, (intensity, flops) in points.items():
        assert any(np.allclose(line.get_data(), [[intensity], [flops]]) for line in ax.get_lines())
        assert name in [text.get_text() for text in ax.get_legend().get_texts()]
    other = plt.figure().add_subplot()
    assert plot_roofline(roof, ax=other) is other
    with pytest.raises(ValueError, match="positive"):
        plot_roofline(roof, {"bad": (0.0, 1.0)})
    plt.close("all")

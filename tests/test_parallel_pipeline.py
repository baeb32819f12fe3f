"""Pipeline schedules: validity of every size, simulated bubbles against the closed forms, memory, errors."""

from __future__ import annotations

import math

import matplotlib.pyplot as plt
import pytest

from mlsys_lib.parallel.pipeline import (SCHEDULES, B, F, Schedule, ScheduleError, W, bubble_ratio,
                                         gpipe_bubble_fraction, make_schedule, share_of_total, simulate, validate)
from mlsys_lib.viz import plot_timeline


def sizes(name):
    """Every (p, m, v) with p in 1..8, m in 1..32, v in 1..4 that schedule ``name`` takes."""
    for p in range(1, 9):
        for m in range(1, 33):
            if name != "interleaved_1f1b":
                yield p, m, 1
            elif m % p == 0:
                yield from ((p, m, v) for v in range(1, 5))


@pytest.mark.parametrize("name", SCHEDULES)
def test_every_size_gives_a_valid_schedule(name):
    count = 0
    for p, m, v in sizes(name):
        schedule = make_schedule(name, p, m, v)
        assert len(schedule.stages) == p
        validate(schedule)
        count += 1
    assert count >= 8 * 32 // 4


def test_the_lecture_schedules_for_two_stages_and_three_microbatches():
    def listed(name):
        return [[str(a) for a in stage] for stage in make_schedule(name, 2, 3).stages]
    assert listed("naive") == [["F0", "B0", "F1", "B1", "F2", "B2"]] * 2
    assert listed("gpipe") == [["F0", "F1", "F2", "B0", "B1", "B2"]] * 2
    assert listed("1f1b") == [["F0", "F1", "B0", "F2", "B1", "B2"], ["F0", "B0", "F1", "B1", "F2", "B2"]]
    zb = listed("zb_h1")
    assert zb[0] == ["F0", "F1", "B0", "W0", "F2", "B1", "W1", "B2", "W2"]
    assert zb[1][:2] == ["F0", "B0"] and zb[1].index("W0") > zb[1].index("B1"), "the last stage defers one W"


@pytest.mark.parametrize("p, m", [(1, 5), (2, 1), (3, 7), (4, 4), (4, 16), (8, 3), (8, 32)])
@pytest.mark.parametrize("tf, tb", [(1.0, 1.0), (1.0, 2.0), (0.3, 0.5)])
def test_gpipe_and_1f1b_bubbles_match_the_closed_form(p, m, tf, tb):
    # p - 1 forward slots before the last stage starts and p - 1 backward slots after it ends, per stage.
    makespan = (m + p - 1) * (tf + tb)
    for name in ("gpipe", "1f1b"):
        timeline = simulate(make_schedule(name, p, m), tf, tb)
        assert math.isclose(timeline.makespan, makespan), (name, p, m)
        assert math.isclose(timeline.bubble_fraction, (p - 1) / (m + p - 1), abs_tol=1e-12)
        assert math.isclose(timeline.bubble_fraction, gpipe_bubble_fraction(p, m), abs_tol=1e-12)
        ideal = m * (tf + tb)
        assert math.isclose((timeline.makespan - ideal) / ideal, bubble_ratio(p, m), abs_tol=1e-12)


def test_naive_keeps_one_stage_busy_at_a_time():
    for p, m in [(1, 3), (4, 1), (4, 8), (8, 2)]:
        timeline = simulate(make_schedule("naive", p, m), 1.0, 3.0)
        assert math.isclose(timeline.makespan, m * p * 4.0)
        assert math.isclose(timeline.bubble_fraction, (p - 1) / p, abs_tol=1e-12)


def test_gpipe_with_send_latency_pays_it_twice_per_stage_boundary():
    p, m, tf, tb, latency = 4, 6, 1.0, 2.0, 0.25
    timeline = simulate(make_schedule("gpipe", p, m), tf, tb, latency=latency)
    assert math.isclose(timeline.makespan, (m + p - 1) * (tf + tb) + 2 * (p - 1) * latency)


@pytest.mark.parametrize("p, m, v", [(2, 2, 2), (2, 8, 3), (4, 4, 2), (4, 8, 4), (4, 12, 3), (8, 16, 2), (8, 64, 4)])
def test_interleaved_bubble_is_one_over_v_of_1f1b(p, m, v):
    tf, tb = 1.0, 2.0  # a whole stage; each of its v chunks takes 1/v of it
    timeline = simulate(make_schedule("interleaved_1f1b", p, m, v), tf / v, tb / v)
    ideal = m * (tf + tb)
    assert math.isclose(timeline.makespan, ideal + (p - 1) * (tf + tb) / v)
    ratio = (p - 1) / (v * m)
    assert math.isclose(bubble_ratio(p, m, v), ratio)
    assert math.isclose(timeline.bubble_fraction, ratio / (1 + ratio), abs_tol=1e-12)
    assert math.isclose(share_of_total(ratio), ratio / (1 + ratio))


@pytest.mark.parametrize("p, m", [(2, 2), (3, 5), (4, 4), (4, 10), (8, 8), (8, 32)])
def test_zero_bubble_h1_cuts_the_1f1b_bubble_to_a_third(p, m):
    # F = B = W = 1: 1F1B idles (p - 1)(F + B + W) per stage, ZB-H1 (p - 1)(F + B - W) (Qi et al. 2024).
    zb = simulate(make_schedule("zb_h1", p, m), 1.0, 1.0, 1.0)
    one_f_one_b = simulate(make_schedule("1f1b", p, m), 1.0, 1.0, 1.0)
    assert math.isclose(zb.makespan, 3 * m + (p - 1))
    assert math.isclose(one_f_one_b.makespan, 3 * m + 3 * (p - 1))
    assert math.isclose(zb.bubble_fraction, (p - 1) / (3 * m + p - 1), abs_tol=1e-12)


@pytest.mark.parametrize("p, m", [(1, 4), (4, 2), (4, 4), (4, 16), (8, 32)])
def test_peak_activations(p, m):
    assert simulate(make_schedule("gpipe", p, m)).peak_activations == [m] * p
    assert simulate(make_schedule("naive", p, m)).peak_activations == [1] * p
    assert make_schedule("1f1b", p, m).peak_activations() == [min(p - s, m) for s in range(p)]
    zb = make_schedule("zb_h1", p, m).peak_activations()
    assert max(zb) <= max(min(p - s, m) for s in range(p)), "ZB-H1 needs no more memory than 1F1B's peak"
    if m >= p:
        assert zb == [p] * p, "stage s holds its p - s - 1 warm-up forwards, the current one and s deferred Ws"
    if m % p == 0:
        for v in (2, 3):
            # Megatron: 2 (p - s - 1) + (v - 1) p warm-up forwards, then one more before the first backward.
            want = [m * v if m == p else min(2 * (p - s - 1) + (v - 1) * p + 1, m * v) for s in range(p)]
            assert make_schedule("interleaved_1f1b", p, m, v).peak_activations() == want


def test_validate_rejects_broken_schedules():
    def schedule(*stages, split=False):
        return Schedule("hand-made", len(stages), 2, 1, split, tuple(tuple(s) for s in stages))
    validate(schedule([F(0), F(1), B(0), B(1)], [F(0), B(0), F(1), B(1)]))
    with pytest.raises(ScheduleError, match="missing.*B1"):
        validate(schedule([F(0), F(1), B(0)], [F(0), B(0), F(1), B(1)]))
    with pytest.raises(ScheduleError, match="repeated"):
        validate(schedule([F(0), F(1), B(0), B(1), B(1)], [F(0), B(0), F(1), B(1)]))
    with pytest.raises(ScheduleError, match="runs B1 before F1"):
        validate(schedule([F(0), B(1), F(1), B(0)], [F(0), B(0), F(1), B(1)]))
    with pytest.raises(ScheduleError, match="deadlock"):
        validate(schedule([F(0), B(0), F(1), B(1)], [F(1), B(1), F(0), B(0)]))
    with pytest.raises(ScheduleError, match="runs W0 before B0"):
        validate(schedule([F(0), F(1), W(0), B(0), B(1), W(1)], [F(0), B(0), W(0), F(1), B(1), W(1)], split=True))
    with pytest.raises(ScheduleError, match="W0"):
        validate(schedule([F(0), F(1), B(0), W(0), B(1), W(1)], [F(0), B(0), W(0), F(1), B(1), W(1)]))


def test_bad_sizes_and_names_raise_clear_errors():
    with pytest.raises(ValueError, match="unknown schedule 'pipedream'"):
        make_schedule("pipedream", 4, 8)
    with pytest.raises(ValueError, match="num_microbatches=6 must be divisible by num_stages=4"):
        make_schedule("interleaved_1f1b", 4, 6, 2)
    with pytest.raises(ValueError, match="only interleaved_1f1b"):
        make_schedule("1f1b", 4, 8, 2)
    for bad in (0, -1, 2.0, True):
        with pytest.raises(ValueError, match="num_stages"):
            make_schedule("gpipe", bad, 4)
    with pytest.raises(ValueError, match="num_microbatches"):
        gpipe_bubble_fraction(4, 0)
    with pytest.raises(ValueError, match="forward"):
        simulate(make_schedule("gpipe", 2, 2), forward=-1.0)


def test_gantt_chart_draws_one_box_per_action():
    timeline = simulate(make_schedule("interleaved_1f1b", 2, 4, 2), 0.5, 0.5)
    ax = plot_timeline(timeline)
    assert len(ax.patches) == len(timeline.intervals) == 2 * (2 * 4 * 2)
    assert "bubble" in ax.get_title(loc="left")
    plt.close(ax.figure)

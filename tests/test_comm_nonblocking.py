"""Non-blocking collectives: the same results as the blocking ones, a lane clock that overlaps with compute,
order, byte counts, test() that never blocks, and the errors (sim backend; one run on real MPI).

α, β, γ are binary fractions and n is divisible by p, so the traced times are compared exactly with the
lecture's closed forms (an independent oracle: ``closed_form`` is the formula, not the trace).
"""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

from mlsys_lib.comm import (CollectiveMismatchError, CostModel, RankFailedError, UnfinishedRequestError, closed_form,
                            launch)
from mlsys_lib.comm.mpi import find_mpiexec

COST = CostModel(alpha=1000.0, beta=1.0, gamma=0.5)


def ring(op: str, nbytes: int, p: int) -> float:
    return closed_form(op, "ring", nbytes, p, COST.alpha, COST.beta, COST.gamma)


def same_results(g):
    """Every non-blocking collective, overlapped with each other, against its blocking twin."""
    rng = np.random.default_rng(g.rank)
    x = rng.standard_normal((7, 3)).astype(np.float32)  # 7 rows: ragged blocks for p = 3, 4
    y = rng.integers(-5, 5, size=11)
    pending = [g.iall_reduce(x), g.iall_reduce(y, op="max"), g.ireduce_scatter(x, op="mean"), g.iall_gather(y[:g.rank + 1])]
    x_before, y_before = x.copy(), y.copy()
    x[...] = 0  # the inputs are copied when issued
    y[...] = 0
    g.progress()
    got = [r.wait() for r in pending]
    want = [g.all_reduce(x_before), g.all_reduce(y_before, op="max"), g.reduce_scatter(x_before, op="mean"),
            g.all_gather(y_before[:g.rank + 1])]
    return got, want, [x_before, y_before]


@pytest.mark.parametrize("p", [1, 3, 4])
def test_results_equal_the_blocking_collectives_and_numpy(p):
    results = launch(same_results, p)
    inputs = [r[2] for r in results]
    total_x = sum(i[0] for i in inputs)
    for rank, (got, want, _) in enumerate(results):
        for a, b in zip(got, want):
            assert a.dtype == b.dtype and a.shape == b.shape
            np.testing.assert_array_equal(a, b)  # same ring, same order of additions
        np.testing.assert_allclose(got[0], total_x, rtol=1e-5)
        np.testing.assert_array_equal(got[1], np.max([i[1] for i in inputs], axis=0))
        np.testing.assert_allclose(got[2], np.array_split(total_x / p, p)[rank], rtol=1e-5)
        np.testing.assert_array_equal(got[3], np.concatenate([i[1][:r + 1] for r, i in enumerate(inputs)]))


def overlap(g, n: int, compute_s: float):
    """Issue an all-reduce of n float64, compute, wait; then two queued ones; return clocks and the lane."""
    x = np.ones(n)
    req = g.iall_reduce(x)
    g.compute(compute_s)
    before_wait = g.clock
    req.wait()
    after_one = g.clock
    sent = g.bytes_sent, g.messages_sent
    first, second = g.iall_reduce(x), g.iall_gather(x[: n // g.world_size])
    second.wait()
    assert first.test()  # done: waiting on the second ran the lane through the first
    first.wait()
    return before_wait, after_one, sent, g.clock, g.lane_history


@pytest.mark.parametrize("compute_s", [0.0, 5000.0, 1e6])
def test_the_lane_overlaps_communication_with_compute_on_the_clock(compute_s):
    p, n = 4, 64
    c = ring("all_reduce", 8 * n, p)
    g_bytes = ring("all_gather", 8 * n, p)
    for before_wait, after_one, sent, end, lane in launch(overlap, p, args=(n, compute_s), cost=COST):
        assert before_wait == compute_s  # issuing costs the rank nothing
        assert after_one == max(compute_s, c)  # max(compute, communication), not their sum
        assert sent == (2 * (p - 1) * 8 * n // p, 2 * (p - 1))  # the lane's messages count too
        assert [name for name, _, _ in lane] == ["iall_reduce", "iall_reduce", "iall_gather"]
        assert lane[0][1:] == (0.0, c)
        # issued at max(compute, c); the second starts when the first ends: the lane is FIFO
        assert lane[1][1:] == (after_one, after_one + c)
        assert lane[2][1:] == (after_one + c, after_one + c + g_bytes)
        assert end == after_one + c + g_bytes


def test_unoverlapped_blocking_collective_costs_the_sum():
    """The oracle of the overlap: the blocking collective then the same compute costs c + compute."""
    def blocking(g):
        g.all_reduce(np.ones(64))
        g.compute(5000.0)
        return g.clock
    assert launch(blocking, 4, cost=COST) == [ring("all_reduce", 512, 4) + 5000.0] * 4


def test_test_never_blocks_and_is_false_without_the_peers_progress():
    """test() never blocks: rank 0's all-reduce cannot finish while rank 1 waits for rank 0's message."""
    def fn(g):
        req = g.iall_reduce(np.full(4, float(g.rank + 1)))
        if g.rank == 0:
            stuck = [req.test() for _ in range(50)]
            g.send(np.zeros(1), 1)
            return stuck, req.wait()
        g.recv(0)
        return [], req.wait()
    (stuck, total), (_, other) = launch(fn, 2)
    assert not any(stuck)
    np.testing.assert_array_equal(total, [3.0] * 4)
    np.testing.assert_array_equal(other, [3.0] * 4)


def test_a_collective_never_waited_on_fails_the_rank():
    def forget(g):
        g.iall_reduce(np.ones(3))
    with pytest.raises(RankFailedError) as info:
        launch(forget, 2)
    assert isinstance(info.value.exception, UnfinishedRequestError)
    assert "iall_reduce of shape (3,)" in str(info.value)


def test_blocking_and_non_blocking_do_not_match():
    def mixed(g):
        if g.rank == 0:
            return g.iall_reduce(np.ones(3)).wait()
        return g.all_reduce(np.ones(3))
    with pytest.raises(RankFailedError) as info:
        launch(mixed, 2)
    assert isinstance(info.value.exception, CollectiveMismatchError)


def test_bad_arguments_are_named():
    def bad(g, what):
        if what == "compute":
            g.compute(-1.0)
        elif what == "reset":
            g.iall_reduce(np.ones(3))
            g.reset_trace()
        elif what == "op":
            g.iall_reduce(np.ones(3), op="median")
    for what, words in [("compute", "seconds must be a finite number"), ("reset", "still in flight"),
                        ("op", "median")]:
        with pytest.raises(RankFailedError, match=words):
            launch(bad, 2, args=(what,))


@pytest.mark.skipif(importlib.util.find_spec("mpi4py") is None or find_mpiexec() is None,
                    reason='needs mpi4py and mpiexec: pip install "mlsys_lib[mpi]"')
def test_same_results_and_clock_on_mpi():
    for got, want, _ in launch(same_results, 3, backend="mpi", timeout=240):
        for a, b in zip(got, want):
            np.testing.assert_array_equal(a, b)
    p, n = 4, 64
    for _, after_one, _, _, lane in launch(overlap, p, args=(n, 1e6), backend="mpi", cost=COST, timeout=240):
        assert after_one == 1e6 and lane[0][1:] == (0.0, ring("all_reduce", 8 * n, p))

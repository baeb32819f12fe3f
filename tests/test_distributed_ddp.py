"""DDP with gradient buckets: equality with plain data parallelism, no_sync, buckets, the overlap clock."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

from mlsys_lib.autodiff import cross_entropy, nn, optim
from mlsys_lib.comm import CostModel, ProcessGroup, closed_form, launch
from mlsys_lib.comm.mpi import find_mpiexec
from mlsys_lib.distributed.ddp import (DistributedDataParallel, LayerCost, all_reduce_gradients, assign_buckets,
                                       layer_costs, modelled_step_time, simulate_step, step_time_vs_bucket_size)
from mlsys_lib.distributed.timeline import plot_overlap

SIZES = [7, 13, 5, 3]  # ragged widths: every layer's gradient has another size
BATCH, STEPS = 8, 3


def data(seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.standard_normal((BATCH * STEPS, SIZES[0])), rng.integers(0, SIZES[-1], BATCH * STEPS)


def train(group: ProcessGroup | None, bucket_bytes: int | None, bucketed: bool) -> list[np.ndarray]:
    """STEPS Adam steps of the float64 MLP on this rank's shard of each batch; group None: one process.

    ``bucketed``: through DistributedDataParallel; otherwise plain DP (one all-reduce after backward).
    """
    X, y = data()
    model = nn.MLP(SIZES, rng=1, dtype=np.float64)
    ddp = DistributedDataParallel(model, group, bucket_bytes) if bucketed else None
    opt = optim.Adam(model.parameters(), lr=0.05)
    for step in range(STEPS):
        rows = np.arange(step * BATCH, (step + 1) * BATCH)
        if group is not None:
            rows = np.array_split(rows, group.world_size)[group.rank]
        opt.zero_grad()
        if ddp is not None:
            ddp.backward(cross_entropy(ddp(X[rows]), y[rows]))
        else:
            cross_entropy(model(X[rows]), y[rows]).backward()
            if group is not None:
                all_reduce_gradients(model.parameters(), group)
        opt.step()
    return [p.data for p in model.parameters()]


def ddp_and_plain(group: ProcessGroup, bucket_bytes: int) -> tuple[list[np.ndarray], list[np.ndarray]]:
    return train(group, bucket_bytes, True), train(group, bucket_bytes, False)


def check_equal_to_plain_dp(results: list, world_size: int) -> None:
    single = train(None, None, False)
    for ddp_params, plain_params in results:
        for a, b, c in zip(ddp_params, plain_params, single):
            if world_size <= 2:  # a sum of two numbers does not depend on the order
                np.testing.assert_array_equal(a, b)
            np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-13)  # buckets change the ring's block bounds
            np.testing.assert_allclose(a, c, rtol=1e-10, atol=1e-11)  # mean of shard means = batch mean
        for a, b in zip(ddp_params, results[0][0]):
            np.testing.assert_array_equal(a, b)  # every rank holds the same parameters


@pytest.mark.parametrize("world_size", [1, 2, 4])
def test_ddp_equals_plain_data_parallelism_on_sim(world_size):
    results = launch(ddp_and_plain, world_size, args=(300,), timeout=120)
    check_equal_to_plain_dp(results, world_size)


@pytest.mark.skipif(importlib.util.find_spec("mpi4py") is None or find_mpiexec() is None,
                    reason='needs mpi4py and mpiexec: pip install "mlsys_lib[mpi]"')
def test_ddp_equals_plain_data_parallelism_on_mpi():
    results = launch(ddp_and_plain, 4, backend="mpi", args=(300,), timeout=240)
    check_equal_to_plain_dp(results, 4)


def accumulate(group: ProcessGroup) -> tuple[list[np.ndarray], int, int]:
    """One SGD step from two micro-batches per rank, the first under no_sync; bytes sent in each."""
    X, y = data()
    model = nn.MLP(SIZES, rng=1, dtype=np.float64)
    ddp = DistributedDataParallel(model, group, 200)
    opt = optim.SGD(model.parameters(), lr=0.5)
    micro = np.array_split(np.array_split(np.arange(2 * BATCH), group.world_size)[group.rank], 2)
    sent = [group.bytes_sent]
    with ddp.no_sync():
        ddp.backward(cross_entropy(ddp(X[micro[0]]), y[micro[0]]) * 0.5)
    assert not ddp.timeline.lane("comm")
    sent.append(group.bytes_sent)
    ddp.backward(cross_entropy(ddp(X[micro[1]]), y[micro[1]]) * 0.5)
    sent.append(group.bytes_sent)
    opt.step()
    return [p.data for p in model.parameters()], sent[1] - sent[0], sent[2] - sent[1]


def test_no_sync_accumulation_equals_a_big_batch_step():
    X, y = data()
    model = nn.MLP(SIZES, rng=1, dtype=np.float64)
    cross_entropy(model(X[:2 * BATCH]), y[:2 * BATCH]).backward()
    optim.SGD(model.parameters(), lr=0.5).step()
    grad_bytes = sum(p.data.nbytes for p in model.parameters())
    for params, quiet, synced in launch(accumulate, 2, timeout=120):
        assert quiet == 0
        assert synced == 2 * (2 - 1) / 2 * grad_bytes  # ring all-reduce of every gradient, once
        for a, b in zip(params, model.parameters()):
            np.testing.assert_allclose(a, b.data, rtol=1e-12, atol=1e-13)


def test_buckets_in_reverse_order_sized_as_specified():
    sizes = [30, 8, 100, 4, 30, 6]
    assert assign_buckets(sizes, 40) == [[5, 4, 3], [2], [1, 0]]  # 100 > 40: alone
    assert assign_buckets(sizes, 1000) == [[5, 4, 3, 2, 1, 0]]
    assert assign_buckets(sizes, None) == [[5, 4, 3, 2, 1, 0]]
    assert assign_buckets(sizes, 1) == [[5], [4], [3], [2], [1], [0]]
    rng = np.random.default_rng(3)
    for _ in range(50):
        sizes = list(rng.integers(1, 100, rng.integers(1, 12)))
        cap = int(rng.integers(1, 150))
        buckets = assign_buckets(sizes, cap)
        assert [i for b in buckets for i in b] == list(reversed(range(len(sizes))))
        for b in buckets:
            assert sum(sizes[i] for i in b) <= cap or len(b) == 1
        for b, following in zip(buckets, buckets[1:]):  # greedy: the next parameter did not fit
            assert sum(sizes[i] for i in b) + sizes[following[0]] > cap
    with pytest.raises(ValueError, match="bucket_bytes"):
        assign_buckets(sizes, 0)


def test_ddp_rejects_what_it_cannot_wrap():
    with pytest.raises(TypeError, match="Sequential"):
        DistributedDataParallel(nn.Linear(2, 3), None, 100)


UNIFORM = [LayerCost(f"l{i}", 0.5e-3, 1e-3, (1 << 20,)) for i in range(8)]  # 8 equal layers of 1 MiB
COST = CostModel(alpha=5e-5, beta=1e-9, gamma=0.0)


def test_step_time_vs_bucket_size_matches_the_closed_form():
    for layers_per_bucket in (1, 2, 4, 8):
        simulated = simulate_step(UNIFORM, layers_per_bucket << 20, 4, COST).step_time
        modelled = modelled_step_time(4e-3, 8e-3, 8 << 20, 8 // layers_per_bucket, 4, COST)
        assert simulated == pytest.approx(modelled, rel=1e-12)
    # one bucket: no overlap, the same as all-reduce after backward
    c_all = closed_form("all_reduce", "ring", 8 << 20, 4, COST.alpha, COST.beta)
    assert simulate_step(UNIFORM, 8 << 20, 4, COST).step_time == pytest.approx(4e-3 + 8e-3 + c_all, rel=1e-12)
    assert simulate_step(UNIFORM, None, 4, COST).step_time == pytest.approx(4e-3 + 8e-3 + c_all, rel=1e-12)
    # 8 layers of 256 parameters of 4 KiB: 4 KiB buckets are α-bound, 8 MiB is one bucket (no overlap)
    fine = [LayerCost(f"l{i}", 0.5e-3, 1e-3, (1 << 12,) * 256) for i in range(8)]
    times = step_time_vs_bucket_size(fine, [1 << 12, 1 << 16, 1 << 20, 1 << 23], 4, COST)
    assert times[0] > times[1] > times[2] < times[3]
    k = 8 * 256
    c_k = closed_form("all_reduce", "ring", 1 << 12, 4, COST.alpha, COST.beta)
    assert times[0] == pytest.approx(4e-3 + 1e-3 + k * c_k, rel=1e-12)  # the lane never idles after layer 7
    assert times[0] == pytest.approx(modelled_step_time(4e-3, 8e-3, 8 << 20, k, 4, COST), rel=0.01)
    assert times[3] == pytest.approx(4e-3 + 8e-3 + c_all, rel=1e-12)

def ddp_timeline(group: ProcessGroup, bucket_bytes: int):
    X, y = data()
    model = nn.MLP([32, 64, 64, 64, 10], rng=1, dtype=np.float32)
    ddp = DistributedDataParallel(model, group, bucket_bytes, flops_per_s=1e9)
    group.reset_trace()  # the step starts at 0 (the constructor's broadcast is on the clock too)
    ddp.backward(cross_entropy(ddp(np.tile(X[:BATCH], (1, 5))[:, :32]), y[:BATCH]))
    return ddp.timeline, ddp.buckets, [p.data.nbytes for p in model.parameters()], group.clock


def test_timeline_comm_waits_for_gradients_and_overlaps():
    cost = CostModel(alpha=1e-5, beta=1e-8, gamma=0.0)
    timelines = launch(ddp_timeline, 4, args=(20_000,), cost=cost, timeout=120)
    timeline, buckets, nbytes, clock = timelines[0]
    ragged = 3 * 2 * (4 - 1) * 4 * cost.beta  # a ring block one float32 longer, in each of 3 buckets' 2(p-1) steps
    for other, *_ in timelines[1:]:  # the same lanes on every rank (a ragged ring block: to one element)
        assert [(iv.lane, iv.label) for iv in other.intervals] == [(iv.lane, iv.label) for iv in timeline.intervals]
        assert [iv.end for iv in other.intervals] == pytest.approx([iv.end for iv in timeline.intervals],
                                                                  rel=1e-12, abs=ragged)
    model = nn.MLP([32, 64, 64, 64, 10], rng=1)
    expected = simulate_step(layer_costs(model, BATCH, 1e9), 20_000, 4, cost)
    for lane in ("compute", "comm"):  # the executed α-β clock (non-blocking collectives) = the model
        measured, modelled = timeline.lane(lane), expected.lane(lane)
        assert [iv.label for iv in measured] == [iv.label for iv in modelled]
        for a, b in zip(measured, modelled):
            assert (a.start, a.end) == pytest.approx((b.start, b.end), rel=1e-12, abs=ragged)
    backward_end = {iv.label: iv.end for iv in timeline.lane("compute")}
    comm = timeline.lane("comm")
    assert len(comm) == len(buckets) > 2
    free = 0.0
    for interval, bucket in zip(comm, buckets):
        layer = 2 * (min(bucket) // 2)  # parameters 2l, 2l+1 are Linear layer l, which is module 2l
        ready = backward_end[f"B linear{layer}"]
        assert interval.start == max(ready, free)  # never before its gradients, never two at once
        assert interval.end - interval.start == pytest.approx(
            closed_form("all_reduce", "ring", sum(nbytes[i] for i in bucket), 4, cost.alpha, cost.beta), abs=ragged)
        free = interval.end
    assert timeline.step_time < timeline.busy("compute") + timeline.busy("comm")  # overlap
    assert clock == pytest.approx(timeline.step_time, rel=1e-12)  # the rank's clock after the step
    baseline = simulate_step(layer_costs(model, BATCH, 1e9), None, 4, cost)
    assert baseline.step_time == pytest.approx(baseline.busy("compute") + baseline.busy("comm"))
    ax = plot_overlap(timeline)
    assert len(ax.patches) == len(timeline.intervals)

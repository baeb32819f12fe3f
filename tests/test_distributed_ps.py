"""The parameter server (``mlsys_lib.distributed.param_server``): BSP equals synchronous data-parallel SGD,
SSP's staleness bound, ASP under a straggler, time to a target loss, sharding, the real-rank replay.

Oracles independent of the module: synchronous SGD written out below (every worker's gradient from the
same parameters, applied in worker order) and ``mlsys_lib.comm.sgd``; the BSP step time by hand from
α + nβ; the staleness bound of the SSP definition.
"""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

from mlsys_lib.comm import CostModel, RankFailedError, launch, sgd
from mlsys_lib.comm.data_parallel import gradient_sum
from mlsys_lib.comm.mpi import find_mpiexec
from mlsys_lib.distributed.param_server import PSConfig, synthetic_problem, train, train_on_group

K = 4
X, Y = synthetic_problem(n=256, d=16, k=K)
STRAGGLER = {0: 4.0}
MODES = [dict(mode="bsp"), dict(mode="ssp", staleness=1), dict(mode="ssp", staleness=3), dict(mode="asp")]


def synchronous_sgd(workers: int, steps: int, batch_size: int, lr: float, seed: int) -> np.ndarray:
    """Synchronous data parallelism: each worker's gradient from the same weights, applied in worker order."""
    rng = np.random.default_rng(seed)
    W, b = 0.01 * rng.standard_normal((X.shape[1], K)), np.zeros(K)
    for _ in range(steps):
        batch = rng.choice(len(X), size=batch_size, replace=False)
        grads = [gradient_sum(W, b, X[rows], Y[rows]) for rows in np.array_split(batch, workers)]
        for g in grads:
            W -= lr * (g[:W.size] / batch_size).reshape(W.shape)
            b -= lr * (g[W.size:] / batch_size)
    return np.concatenate([W.ravel(), b])


@pytest.mark.parametrize("mode", [dict(mode="bsp"), dict(mode="ssp", staleness=0)])
def test_zero_staleness_is_synchronous_data_parallel_sgd(mode):
    config = PSConfig(num_workers=3, num_servers=2, steps=30, batch_size=24, lr=0.2, seed=5, **mode)
    theta = train(X, Y, K, config).theta
    np.testing.assert_array_equal(theta, synchronous_sgd(3, 30, 24, 0.2, 5))
    W, b = sgd(X, Y, K, steps=30, batch_size=24, lr=0.2, seed=5)  # gradients summed before the step
    np.testing.assert_allclose(theta, np.concatenate([W.ravel(), b]), rtol=1e-10, atol=1e-12)


def test_bsp_step_time_is_compute_plus_one_message_per_worker_and_one_more():
    """One server, W workers: its port sends W shards one by one, then receives W pushes one by one."""
    cost = CostModel(alpha=2e-5, beta=1e-9)
    config = PSConfig(num_workers=3, steps=10, compute_s=1e-4, cost=cost)
    result = train(X, Y, K, config)
    message = cost.alpha + (X.shape[1] * K + K) * 8 * cost.beta
    assert result.times[-1] == pytest.approx(10 * (1e-4 + 4 * message), rel=1e-12)


@pytest.mark.parametrize("s", [0, 1, 3])
def test_ssp_staleness_never_exceeds_the_bound_and_reaches_it_with_a_straggler(s):
    result = train(X, Y, K, PSConfig(mode="ssp", staleness=s, steps=40, slowdown=STRAGGLER))
    staleness = [r.staleness for r in result.staleness]
    assert len(staleness) == 4 * 40  # every push recorded once
    assert max(staleness) == s and min(staleness) >= 0


def test_asp_staleness_grows_with_a_straggler():
    def max_staleness(steps: int, slowdown: dict[int, float]) -> int:
        result = train(X, Y, K, PSConfig(mode="asp", steps=steps, slowdown=slowdown))
        return max(r.staleness for r in result.staleness)
    assert max_staleness(40, {}) <= 1 and max_staleness(80, {}) <= 1
    # fast workers run ~4 clocks per clock of the straggler, until they finish: staleness ~ 3/4 of the steps
    assert 20 <= max_staleness(40, STRAGGLER) < max_staleness(80, STRAGGLER)
    def straggler_delay(slowdown: dict[int, float]) -> int:
        result = train(X, Y, K, PSConfig(mode="asp", steps=40, slowdown=slowdown))
        return max(r.delay for r in result.staleness if r.worker == 0)
    assert straggler_delay({}) <= 3  # at most one push of each other worker in between
    assert straggler_delay(STRAGGLER) >= 3 * 3  # 3 fast workers push ~4 times while the straggler computes once


@pytest.fixture(scope="module")
def with_straggler() -> dict[str, object]:
    return {f"{m['mode']}{m.get('staleness', '')}": train(X, Y, K, PSConfig(steps=80, slowdown=STRAGGLER, **m))
            for m in MODES}


def test_with_a_straggler_ssp_and_asp_reach_the_target_loss_sooner_than_bsp(with_straggler):
    target = 0.6
    times = {name: result.time_to_loss(target) for name, result in with_straggler.items()}
    assert times["asp"] < times["ssp3"] < times["bsp"] < np.inf
    assert times["ssp1"] <= times["bsp"]
    for result in with_straggler.values():  # every mode converges despite stale gradients
        assert result.losses[0] > 1.3 and result.losses[-1] < 0.55


@pytest.mark.parametrize("mode", MODES)
def test_sharding_gives_the_same_parameters_on_a_free_network(mode):
    free = CostModel(0.0, 0.0, 0.0)
    runs = [train(X, Y, K, PSConfig(num_servers=s, steps=20, slowdown=STRAGGLER, cost=free, **mode))
            for s in (1, 2, 3)]
    for other in runs[1:]:
        np.testing.assert_array_equal(other.theta, runs[0].theta)
        np.testing.assert_array_equal(other.losses[-1], runs[0].losses[-1])


def test_bsp_sharding_keeps_the_parameters_and_relieves_the_server():
    runs = [train(X, Y, K, PSConfig(num_servers=s, steps=20, cost=CostModel(alpha=1e-7, beta=1e-7)))
            for s in (1, 2, 3)]
    for other in runs[1:]:
        np.testing.assert_array_equal(other.theta, runs[0].theta)
    finish = [r.times[-1] for r in runs]
    assert finish[0] > finish[1] > finish[2]


def replay(group, config: PSConfig) -> np.ndarray:
    return train_on_group(group, X, Y, K, config)


@pytest.mark.parametrize("config", [PSConfig(num_workers=3, num_servers=2, mode="ssp", staleness=1, steps=12,
                                             slowdown=STRAGGLER),
                                    PSConfig(num_workers=2, num_servers=3, mode="asp", steps=12, slowdown={1: 3.0})])
def test_real_ranks_replay_the_schedule_exactly(config):
    per_rank = launch(replay, config.num_servers + config.num_workers, args=(config,), timeout=120)
    expected = train(X, Y, K, config).theta
    for theta in per_rank:
        np.testing.assert_array_equal(theta, expected)


@pytest.mark.skipif(importlib.util.find_spec("mpi4py") is None or find_mpiexec() is None,
                    reason='needs mpi4py and mpiexec: pip install "mlsys_lib[mpi]"')
def test_real_ranks_on_mpi_equal_synchronous_sgd_and_asp_in_one_process():
    configs = [PSConfig(num_workers=2, num_servers=2, steps=10, batch_size=24, lr=0.2, seed=5),
               PSConfig(num_workers=3, num_servers=1, mode="asp", steps=10, slowdown=STRAGGLER)]
    for config in configs:
        per_rank = launch(replay, 4, backend="mpi", args=(config,), timeout=240)
        expected = train(X, Y, K, config).theta
        for theta in per_rank:
            np.testing.assert_array_equal(theta, expected)
    np.testing.assert_array_equal(expected, train(X, Y, K, configs[1]).theta)


@pytest.mark.parametrize("kwargs, message", [
    (dict(mode="ssp", staleness=-1), "staleness bound s: an int >= 0, got -1"),
    (dict(mode="ssp"), "SSP needs a staleness bound"),
    (dict(mode="bsp", staleness=2), "staleness is only for mode 'ssp'"),
    (dict(mode="hogwild"), "unknown mode 'hogwild': expected one of bsp, ssp, asp"),
    (dict(slowdown={1: 0.5}), "slowdown factor must be >= 1, got 0.5 for worker 1"),
    (dict(slowdown={7: 2.0}), "slowdown names worker 7"),
    (dict(num_servers=0), "num_servers must be an int >= 1"),
])
def test_bad_arguments_raise_clear_errors(kwargs, message):
    with pytest.raises(ValueError, match=message):
        PSConfig(**kwargs)


def test_wrong_group_size_and_batch_size_are_named():
    with pytest.raises(ValueError, match="batch_size must be in 1..256"):
        train(X, Y, K, PSConfig(batch_size=1000))
    with pytest.raises(RankFailedError, match="2 servers \\+ 4 workers need 6"):
        launch(replay, 3, args=(PSConfig(num_servers=2),), timeout=60)

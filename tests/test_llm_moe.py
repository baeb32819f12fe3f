"""Mixture of Experts: routing with ties, capacity and drops, the Switch loss, the layer against a loop
over tokens, and expert parallelism over ``mlsys_lib.comm`` against the single-process layer.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from mlsys_lib.comm import launch
from mlsys_lib.llm.moe import (capacity, dispatch, expert_parallel_forward, load_balancing_loss, moe_forward,
                               route_top_k, softmax)

D, E = 6, 4


def make_experts(n: int, d: int = D, seed: int = 0) -> list:
    """n different small ReLU MLPs (m, d) -> (m, d)."""
    rng = np.random.default_rng(seed)

    def expert(w1: np.ndarray, w2: np.ndarray):
        return lambda x: np.maximum(x @ w1, 0) @ w2
    return [expert(rng.standard_normal((d, 2 * d)), rng.standard_normal((2 * d, d))) for _ in range(n)]


def layer(n_tokens: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.standard_normal((n_tokens, D)), rng.standard_normal((D, E))


def loop_over_tokens(x, router_w, experts, k, capacity_factor):
    """The oracle: one token at a time, its k best experts by hand, a slot counter per expert."""
    n_experts = len(experts)
    room = math.ceil(k * len(x) * capacity_factor / n_experts)  # capacity_factor exact in binary here
    taken = [0] * n_experts
    y = np.zeros_like(x)
    for t, token in enumerate(x):
        logits = [float(token @ router_w[:, e]) for e in range(n_experts)]
        best = sorted(range(n_experts), key=lambda e: (-logits[e], e))[:k]
        weights = np.exp([logits[e] - logits[best[0]] for e in best])
        for w, e in zip(weights / weights.sum(), best):
            if taken[e] < room:
                taken[e] += 1
                y[t] += w * experts[e](token[None, :])[0]
    return y


def test_route_top_k_orders_by_logit_and_breaks_ties_by_lower_index():
    logits = np.array([[1.0, 3.0, 3.0, 0.0], [2.0, 2.0, 2.0, 2.0], [0.0, -0.0, 5.0, -1.0]])
    ids, gates = route_top_k(logits, 2)
    np.testing.assert_array_equal(ids, [[1, 2], [0, 1], [2, 0]])
    np.testing.assert_allclose(gates, [[0.5, 0.5], [0.5, 0.5], [1 / (1 + np.exp(-5)), 1 / (1 + np.exp(5))]])
    ids, gates = route_top_k(logits, 1)
    np.testing.assert_array_equal(ids, [[1], [0], [2]])
    np.testing.assert_array_equal(gates, np.ones((3, 1)))
    rng = np.random.default_rng(0)
    logits = rng.standard_normal((50, 8))
    ids, gates = route_top_k(logits, 3)
    np.testing.assert_array_equal(ids, np.argsort(-logits, axis=1)[:, :3])  # no ties: numpy's order
    np.testing.assert_allclose(gates.sum(axis=1), 1.0)
    assert np.all(np.diff(gates, axis=1) <= 0)


def test_capacity():
    assert capacity(8, 4, 1, 1.0) == 2
    assert capacity(8, 4, 2, 1.25) == 5  # ⌈2·8·1.25/4⌉ = ⌈5⌉
    assert capacity(10, 4, 1, 1.0) == 3  # ⌈2.5⌉
    assert capacity(10, 1, 1, 1.1) == 11  # the decimal 1.1, not the binary float just above it
    assert capacity(0, 4, 2, 2.0) == 0
    with pytest.raises(ValueError, match="capacity_factor must be a finite number > 0"):
        capacity(8, 4, 1, 0)
    with pytest.raises(ValueError, match=r"k \(experts per token\) must be an int in 1..4"):
        capacity(8, 4, 5, 1.0)


def test_dispatch_fills_slots_in_token_order_and_drops_the_overflow():
    ids = np.array([[0, 1], [1, 0], [0, 2], [0, 1], [3, 1]])
    plan = dispatch(ids, 4, capacity=2)
    np.testing.assert_array_equal(plan.slots, [[0, 0], [1, 1], [-1, 0], [-1, -1], [0, -1]])
    np.testing.assert_array_equal(plan.counts, [2, 2, 1, 1])
    assert plan.dropped == [(2, 0), (3, 0), (3, 1), (4, 1)]
    assert dispatch(ids, 4, capacity=0).dropped == [(t, e) for t, row in enumerate(ids.tolist()) for e in row]
    with pytest.raises(ValueError, match="k different experts"):
        dispatch(np.array([[1, 1]]), 4, 2)
    with pytest.raises(ValueError, match="ints in 0..3"):
        dispatch(np.array([[4]]), 4, 2)


def test_load_balancing_loss():
    uniform = np.full((8, E), 1 / E)
    balanced = np.arange(8).reshape(8, 1) % E
    assert load_balancing_loss(uniform, balanced) == pytest.approx(1.0)
    collapsed = np.zeros((8, E))
    collapsed[:, 0] = 1
    assert load_balancing_loss(collapsed, np.zeros((8, 1), dtype=int)) == pytest.approx(E)
    rng = np.random.default_rng(0)
    probs = softmax(rng.standard_normal((20, E)))
    ids, _ = route_top_k(np.log(probs), 2)
    f = [np.count_nonzero(ids == e) / ids.size for e in range(E)]
    P = [probs[:, e].mean() for e in range(E)]
    assert load_balancing_loss(probs, ids) == pytest.approx(E * sum(fe * pe for fe, pe in zip(f, P)))
    with pytest.raises(ValueError, match="sum to 1"):
        load_balancing_loss(uniform * 2, balanced)


@pytest.mark.parametrize("k, capacity_factor", [(1, 1.0), (2, 1.25), (2, 0.5), (1, 4.0)])
def test_moe_forward_matches_a_loop_over_tokens(k, capacity_factor):
    x, router_w = layer(24, seed=k)
    experts = make_experts(E)
    np.testing.assert_allclose(moe_forward(x, router_w, experts, k, capacity_factor),
                               loop_over_tokens(x, router_w, experts, k, capacity_factor), rtol=1e-12, atol=1e-12)


def test_dropped_tokens_pass_through_the_residual():
    x, router_w = layer(16)
    ids, _ = route_top_k(x @ router_w, 1)
    plan = dispatch(ids, E, capacity(16, E, 1, 0.5))
    dropped = [t for t, _ in plan.dropped]
    assert 0 < len(dropped) < 16
    y = moe_forward(x, router_w, make_experts(E), 1, 0.5)
    np.testing.assert_array_equal(y[dropped], 0)
    np.testing.assert_array_equal((x + y)[dropped], x[dropped])
    kept = np.setdiff1d(np.arange(16), dropped)
    assert np.all(np.abs(y[kept]).sum(axis=1) > 0)


def test_moe_forward_rejects_bad_shapes():
    x, router_w = layer(4)
    with pytest.raises(ValueError, match=r"router_w must be \(d, n_experts\) = \(6, 3\)"):
        moe_forward(x, router_w, make_experts(3), 1, 1.0)
    with pytest.raises(ValueError, match=r"an expert must map \(m, d\) to \(m, d\)"):
        moe_forward(x, router_w, [lambda h: h[:, :2]] * E, 1, 1.0)
    with pytest.raises(ValueError, match="x must be a 2-D real array"):
        moe_forward(x[0], router_w, make_experts(E), 1, 1.0)


def expert_parallel(g, sizes, k, capacity_factor, algorithm):
    """Rank r's share of the layer: its tokens (rows of the whole batch) and its experts."""
    x, router_w = layer(sum(sizes), seed=7)
    start = sum(sizes[:g.rank])
    per_rank = E // g.world_size
    mine = make_experts(E)[g.rank * per_rank:(g.rank + 1) * per_rank]
    return expert_parallel_forward(g, x[start:start + sizes[g.rank]], router_w, mine, k, capacity_factor, algorithm)


@pytest.mark.parametrize("p, sizes, k, capacity_factor, algorithm", [
    (1, [9], 2, 1.0, "pairwise"),
    (2, [7, 12], 1, 1.0, "ring"),
    (2, [10, 0], 2, 0.75, "pairwise"),
    (4, [5, 9, 3, 8], 2, 1.25, "pairwise"),
    (4, [6, 6, 6, 6], 1, 0.5, "ring"),
])
def test_expert_parallel_forward_equals_the_single_process_layer(p, sizes, k, capacity_factor, algorithm):
    x, router_w = layer(sum(sizes), seed=7)
    want = moe_forward(x, router_w, make_experts(E), k, capacity_factor)
    got = launch(expert_parallel, p, args=(sizes, k, capacity_factor, algorithm), timeout=120)
    assert [len(y) for y in got] == sizes
    np.testing.assert_allclose(np.concatenate(got), want, rtol=1e-12, atol=1e-12)
    ids, _ = route_top_k(x @ router_w, k)
    assert dispatch(ids, E, capacity(len(x), E, k, capacity_factor)).dropped or capacity_factor >= 1


def wrong_expert_count(g):
    x, router_w = layer(4)
    return expert_parallel_forward(g, x, router_w, make_experts(3), 1, 1.0)


def test_expert_parallel_needs_the_experts_spread_evenly():
    with pytest.raises(Exception, match=r"router_w must be \(d, n_experts\) = \(6, 6\)"):
        launch(wrong_expert_count, 2)

"""Auto-sharding of a matmul chain: the dynamic program against brute force, and the cost model."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from mlsys_lib.parallel.autoparallel import STRATEGIES, best_shardings, chain_cost, matmul_chain_costs


def brute_force(nodes, edges):
    def total(choice):
        return (sum(n[s] for n, s in zip(nodes, choice))
                + sum(e[(a, b)] for e, a, b in zip(edges, choice, choice[1:])))
    return min(total(choice) for choice in itertools.product(list(nodes[0]), repeat=len(nodes)))


def test_dynamic_program_equals_brute_force_on_random_tables():
    rng = np.random.default_rng(31)
    for trial in range(300):
        n = int(rng.integers(1, 7))
        options = list(STRATEGIES) if trial % 3 else ["a", "b"]
        # integer costs make ties common: the DP must still find a cheapest total
        nodes = [{s: float(rng.integers(0, 5)) for s in options} for _ in range(n)]
        edges = [{(a, b): float(rng.integers(0, 5)) for a in options for b in options} for _ in range(n - 1)]
        cost, path = best_shardings(nodes, edges)
        assert len(path) == n and set(path) <= set(options)
        assert cost == brute_force(nodes, edges)
        assert chain_cost(nodes, edges, path) == cost


def test_resharding_cost_changes_the_choice():
    nodes = [{"replicated": 5.0, "row": 4.0, "column": 1.0}, {"replicated": 5.0, "row": 4.0, "column": 1.0}]
    free = [{(a, b): 0.0 for a in STRATEGIES for b in STRATEGIES}]
    assert best_shardings(nodes, free) == (2.0, ["column", "column"])
    costly = [{(a, b): 10.0 if (a, b) == ("column", "column") else 0.0 for a in STRATEGIES for b in STRATEGIES}]
    assert best_shardings(nodes, costly) == (5.0, ["column", "row"])


def test_matmul_chain_costs_follow_the_alpha_beta_model():
    batch, widths, p, flops, alpha, beta = 16, [32, 128, 32], 4, 1e9, 1e-5, 1e-9
    nodes, edges = matmul_chain_costs(batch, widths, p, flops, alpha, beta)
    compute = 2 * 16 * 32 * 128 / 1e9
    all_reduce_out = 2 * (p - 1) * alpha + 2 * (p - 1) / p * (16 * 128 * 4) * beta
    assert math.isclose(nodes[0]["replicated"], compute)
    assert math.isclose(nodes[0]["column"], compute / p)
    assert math.isclose(nodes[0]["row"], compute / p + all_reduce_out)
    gather = (p - 1) * alpha + (p - 1) / p * (16 * 128 * 4) * beta
    assert math.isclose(edges[0][("column", "replicated")], gather)
    assert math.isclose(edges[0][("column", "column")], gather)
    assert edges[0][("column", "row")] == 0.0 and edges[0][("replicated", "row")] == 0.0
    last_gather = (p - 1) * alpha + (p - 1) / p * (16 * 32 * 4) * beta
    assert math.isclose(nodes[1]["column"], compute / p + last_gather)
    # Megatron's MLP: column then row, one all-reduce, beats replicating for these sizes.
    cost, path = best_shardings(nodes, edges)
    assert path == ["column", "row"]
    assert math.isclose(cost, compute / p + compute / p + 2 * (p - 1) * alpha + 2 * (p - 1) / p * (16 * 32 * 4) * beta)


def test_bad_tables_raise():
    with pytest.raises(ValueError, match="at least one operator"):
        best_shardings([], [])
    with pytest.raises(ValueError, match="2 operators need 1 edge tables"):
        best_shardings([{"row": 1.0}, {"row": 1.0}], [])
    with pytest.raises(ValueError, match="same strategies"):
        best_shardings([{"row": 1.0}, {"column": 1.0}], [{("row", "column"): 0.0}])

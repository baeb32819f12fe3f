"""Cost-based optimization with verified rewrite rules: greedy, and TASO's backtracking search.

Both explore the graphs one rule application away (:func:`neighbors`, each cleaned by DCE) and
rank them with a :class:`~mlsys_lib.graph.cost.CostModel`.

* :func:`greedy_optimize` moves to the cheapest neighbor while that is strictly cheaper, so it stops
  at the first graph that no single rewrite improves, even if a rewrite that costs a little now
  opens the way to a much cheaper graph (the lecture's "options that initially decrease the performance").
* :func:`backtracking_optimize` (TASO, Jia et al. 2019, Algorithm 2) keeps a priority queue of graphs
  ordered by cost, and enqueues every new graph whose cost is below ``alpha`` times the best found so
  far. With ``alpha > 1`` it accepts slightly worse intermediate graphs; ``alpha = 1`` makes it a
  best-first search that never goes uphill. ``budget`` bounds the graphs it expands.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from .cost import CostModel
from .ir import Graph, attrs_key
from .ops import OPS
from .passes import dce
from .pattern import Rule, apply_rule


@dataclass
class SearchResult:
    """The best ``graph`` found and its ``cost`` [s], the ``initial_cost``, the names of the rules applied
    on the way (``steps``) and how many graphs were expanded (``explored``)."""

    graph: Graph
    cost: float
    initial_cost: float
    steps: list[str] = field(default_factory=list)
    explored: int = 0


def neighbors(graph: Graph, rules: Sequence[Rule]) -> Iterator[tuple[Rule, Graph]]:
    """Every (rule, graph) one application of a rule at one node away from ``graph``, dead code removed."""
    by_op: dict[str, list[Rule]] = {}
    for rule in rules:
        by_op.setdefault(rule.source.op, []).append(rule)
    for node in graph:
        for rule in by_op.get(node.op, ()):
            result = apply_rule(graph, rule, node.name)
            if result is not None:
                yield rule, dce(result)


def structure_key(graph: Graph, table: dict[tuple, int]) -> tuple[int, ...]:
    """A key equal for graphs that compute the same expressions, whatever their node names: each node is
    interned in ``table`` as (op, attributes, interned inputs; sorted for a commutative op)."""
    ids: dict[str, int] = {}
    for node in graph:
        inputs = [ids[i] for i in node.inputs]
        if OPS[node.op].commutative:
            inputs.sort()
        key = (node.op, node.name if node.op == "input" else attrs_key(node.attrs), tuple(inputs))
        ids[node.name] = table.setdefault(key, len(table))
    return tuple(ids[o] for o in graph.outputs)


def greedy_optimize(graph: Graph, rules: Sequence[Rule], cost: CostModel | None = None,
                    max_steps: int = 1000) -> SearchResult:
    """Apply the rule application that lowers the cost most, until none lowers it (or ``max_steps``)."""
    cost = cost or CostModel()
    current = cost.graph_cost(graph)
    result = SearchResult(graph, current, current)
    for _ in range(max_steps):
        result.explored += 1
        best = min(((cost.graph_cost(g), rule.name, g) for rule, g in neighbors(result.graph, rules)),
                   key=lambda entry: entry[0], default=None)
        if best is None or best[0] >= result.cost:
            break
        result.cost, name, result.graph = best
        result.steps.append(name)
    return result


def backtracking_optimize(graph: Graph, rules: Sequence[Rule], cost: CostModel | None = None,
                          alpha: float = 1.05, budget: int = 1000) -> SearchResult:
    """TASO's cost-based backtracking search: best-first over graphs, keeping those within ``alpha``·best.

    A graph is expanded (its neighbors costed) at most once (graphs are compared by :func:`structure_key`);
    the search stops when the queue empties or ``budget`` graphs were expanded.
    """
    if alpha < 1:
        raise ValueError(f"backtracking_optimize: alpha must be >= 1 (1 = never accept a worse graph), got {alpha}")
    cost = cost or CostModel()
    table: dict[tuple, int] = {}
    start = cost.graph_cost(graph)
    result = SearchResult(graph, start, start)
    order = itertools.count()  # ties in cost are expanded first come, first served
    queue = [(start, next(order), graph, [])]
    seen = {structure_key(graph, table)}
    while queue and result.explored < budget:
        current_cost, _, current, steps = heapq.heappop(queue)
        if current_cost > alpha * result.cost:
            break  # the queue is ordered by cost: nothing left is within alpha of the best
        result.explored += 1
        for rule, candidate in neighbors(current, rules):
            key = structure_key(candidate, table)
            if key in seen:
                continue
            seen.add(key)
            candidate_cost = cost.graph_cost(candidate)
            if candidate_cost < result.cost:
                result.graph, result.cost, result.steps = candidate, candidate_cost, steps + [rule.name]
            if candidate_cost < alpha * result.cost:
                heapq.heappush(queue, (candidate_cost, next(order), candidate, steps + [rule.name]))
    return result

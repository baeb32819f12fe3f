"""Automatic intra-operator parallelism for a chain of matmuls on a 1-D device mesh (as in Alpa, 2022).

Each operator ``i`` of the chain ``x_{i+1} = x_i W_i`` (x_i: (batch, k_i), W_i: (k_i, k_{i+1})) picks a
sharding from ``STRATEGIES``; its node cost is its own compute and communication, and the edge
between two operators costs the resharding of the activation when the layout one produces is not
the layout the next consumes. :func:`best_shardings` minimizes the sum by dynamic programming over
the chain, O(n·S²) for n operators and S strategies instead of the Sⁿ of trying every combination.

:func:`matmul_chain_costs` builds the tables for p devices under the α-β model:

=============  ===============  ===============  ==============================================
strategy       input x_i        output x_{i+1}   per device
=============  ===============  ===============  ==============================================
replicated     replicated (R)   replicated (R)   the whole matmul
column         replicated (R)   split (S)        W's columns: 1/p of the matmul, no communication
row            split (S)        replicated (R)   W's rows: 1/p of the matmul + all-reduce of x_{i+1}
=============  ===============  ===============  ==============================================

(S: split along the features.) Resharding R → S is free (each device keeps its slice); S → R is an
all-gather. The chain's input is replicated, and so must its output be.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from mlsys_lib.comm import closed_form

STRATEGIES = ("replicated", "row", "column")
LAYOUT_IN = {"replicated": "R", "row": "S", "column": "R"}
LAYOUT_OUT = {"replicated": "R", "row": "R", "column": "S"}

NodeCosts = Sequence[Mapping[str, float]]                  # [op][strategy] -> seconds
EdgeCosts = Sequence[Mapping[tuple[str, str], float]]      # [op i -> op i+1][(strategy i, strategy i+1)] -> seconds


def chain_cost(node_costs: NodeCosts, edge_costs: EdgeCosts, strategies: Sequence[str]) -> float:
    """Total cost of one choice of strategies: Σ node costs + Σ edge costs."""
    return (sum(costs[s] for costs, s in zip(node_costs, strategies))
            + sum(edges[(a, b)] for edges, a, b in zip(edge_costs, strategies, strategies[1:])))


def best_shardings(node_costs: NodeCosts, edge_costs: EdgeCosts) -> tuple[float, list[str]]:
    """The cheapest strategy per operator and its total cost, by dynamic programming along the chain.

    ``node_costs[i][s]``: cost of operator i under strategy s (every operator offers the same
    strategies); ``edge_costs[i][(s, s')]``: cost between operator i under s and i+1 under s'.
    best[i][s] = node[i][s] + min over s' of (best[i−1][s'] + edge[i−1][(s', s)]).
    """
    if not node_costs:
        raise ValueError("the chain needs at least one operator")
    if len(edge_costs) != len(node_costs) - 1:
        raise ValueError(f"{len(node_costs)} operators need {len(node_costs) - 1} edge tables, got {len(edge_costs)}")
    options = list(node_costs[0])
    if any(list(costs) != options for costs in node_costs):
        raise ValueError(f"every operator must offer the same strategies, in the same order: {options}")
    best = {s: node_costs[0][s] for s in options}
    choices: list[dict[str, str]] = []  # choices[i][s]: operator i's strategy on the best path to operator i+1 under s
    for costs, edges in zip(node_costs[1:], edge_costs):
        previous = {s: min(options, key=lambda a: best[a] + edges[(a, s)]) for s in options}
        best = {s: best[previous[s]] + edges[(previous[s], s)] + costs[s] for s in options}
        choices.append(previous)
    last = min(options, key=lambda s: best[s])
    path = [last]
    for previous in reversed(choices):
        path.append(previous[path[-1]])
    return best[last], path[::-1]


def matmul_chain_costs(batch: int, widths: Sequence[int], num_devices: int, flops_per_second: float,
                       alpha: float, beta: float,
                       bytes_per_element: int = 4) -> tuple[list[dict[str, float]], list[dict[tuple[str, str], float]]]:
    """Node and edge costs (seconds) of the chain with widths [k_0, ..., k_n] on ``num_devices`` devices.

    Compute: 2·batch·k_i·k_{i+1} FLOPs (divided by p unless replicated) at ``flops_per_second``;
    communication: ring all-reduce and all-gather under α (s) and β (s/byte) (``comm.closed_form``).
    The all-gather that makes a split final output replicated is charged to the last operator.
    """
    if len(widths) < 2 or batch < 1 or num_devices < 1 or not flops_per_second > 0:
        raise ValueError("need widths [k_0, ..., k_n] (n >= 1), batch >= 1, num_devices >= 1, flops_per_second > 0")
    p = num_devices

    def activation(k: int) -> float:
        return batch * k * bytes_per_element

    nodes = []
    for i, (k_in, k_out) in enumerate(zip(widths[:-1], widths[1:])):
        compute = 2 * batch * k_in * k_out / flops_per_second
        nodes.append({"replicated": compute,
                      "row": compute / p + closed_form("all_reduce", "ring", activation(k_out), p, alpha, beta),
                      "column": compute / p})
    gather_last = closed_form("all_gather", "ring", activation(widths[-1]), p, alpha, beta)
    nodes[-1]["column"] += gather_last
    edges = []
    for k in widths[1:-1]:
        gather = closed_form("all_gather", "ring", activation(k), p, alpha, beta)
        edges.append({(a, b): gather if (LAYOUT_OUT[a], LAYOUT_IN[b]) == ("S", "R") else 0.0
                      for a in STRATEGIES for b in STRATEGIES})
    return nodes, edges

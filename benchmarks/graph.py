"""Benchmark mlsys_lib.graph: the pass pipeline on a 10,000-node graph, and substitution discovery.

1. The inference pipeline (constant folding, simplification, CSE, conv+BN folding, DCE, fusion) run
   to a fixed point on a generated 10,000-node graph: time per pass (target: under 2 s in total),
   nodes, kernels, bytes moved and estimated time before and after, and a check that the outputs agree.
2. Substitution discovery for graphs of up to k = 3 ops over the default op set: candidates that
   survive each stage, and the time of each stage.
3. Greedy vs backtracking search on the low-rank matmul chain, with the rules discovered over {matmul}.

Run: python benchmarks/graph.py
"""

from __future__ import annotations

import time

import numpy as np

from mlsys_lib.graph import (CostModel, PassManager, backtracking_optimize, discover, evaluate, greedy_optimize,
                             random_graph, traffic)
from mlsys_lib.graph.discovery import DEFAULT_OPS
from mlsys_lib.graph.generate import matmul_chain

NODES, TARGET_SECONDS, K = 10_000, 2.0, 3


def pipeline() -> None:
    graph = random_graph(NODES, seed=0)
    manager = PassManager()
    start = time.perf_counter()
    result = manager.run(graph)
    seconds = time.perf_counter() - start
    model = CostModel()
    print(f"1. pass pipeline on a generated graph of {len(graph)} nodes ({graph.num_ops} ops)")
    print(manager.report())
    print(f"total {seconds:.3f} s (target < {TARGET_SECONDS} s): {'OK' if seconds < TARGET_SECONDS else 'SLOW'}")
    for label, g in (("before", graph), ("after", result)):
        flops, moved = traffic(g)
        print(f"  {label:<7} {len(g):>6} nodes {g.num_ops:>6} ops {flops:>10} FLOP {moved:>10} bytes "
              f"({flops / moved:.3f} FLOP/byte)  est. {1e3 * model.graph_cost(g):8.3f} ms")
    rng = np.random.default_rng(0)
    feeds = {name: rng.uniform(-1, 1, graph[name].shape) for name in graph.inputs}
    error = max(float(np.max(np.abs(a - b))) for a, b in zip(evaluate(graph, feeds), evaluate(result, feeds)))
    print(f"  outputs agree: max |difference| = {error:.2e}")


def discovery() -> None:
    start = time.perf_counter()
    result = discover(DEFAULT_OPS, max_ops=K)
    print(f"\n2. {result.report()}")
    print(f"total {time.perf_counter() - start:.3f} s; {len(result.rules())} rewrite rules; "
          f"rejected e.g. {result.rejected[0][0]} ({result.rejected[0][1].reason})" if result.rejected else "")


def search() -> None:
    rules = discover(("matmul",), max_ops=2).rules()
    graph, model = matmul_chain(), CostModel()
    print(f"\n3. greedy vs backtracking on ((A @ B) @ C) @ D, A (64, 4), B (4, 64), C (64, 4096), D (4096, 4096); "
          f"{len(rules)} rules discovered over {{matmul}}")
    for name, run in (("greedy", lambda: greedy_optimize(graph, rules, model)),
                      ("backtracking alpha=1.05", lambda: backtracking_optimize(graph, rules, model, alpha=1.05))):
        start = time.perf_counter()
        found = run()
        print(f"  {name:<24} {1e6 * found.initial_cost:7.1f} us -> {1e6 * found.cost:7.1f} us in {len(found.steps)} "
              f"steps, {found.explored} graphs expanded, {1e3 * (time.perf_counter() - start):.0f} ms")


if __name__ == "__main__":
    pipeline()
    discovery()
    search()

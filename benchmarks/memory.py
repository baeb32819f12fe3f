"""Benchmark mlsys_lib.memory: static memory planners on generated training graphs (forward + backward).

For an MLP, a stack of transformer blocks and a ResNet-like net with skips, each at about 1,000 and
10,000 tensors: the lower bound (the most bytes live at one step) and each planner's arena as a
multiple of it, and the time to plan. Targets: best-fit within 1.10x of the lower bound on every
graph, and a 10,000-tensor graph planned in under 1 s. (The planners' inner loop is compiled by
Numba; the first call, outside the timings, compiles or loads it.)

Run: python benchmarks/memory.py
"""

from __future__ import annotations

import time

import numpy as np

from mlsys_lib.memory import (liveness, lower_bound, mlp_graph, plan_best_fit, plan_first_fit, plan_inplace,
                              plan_no_reuse, resnet_graph, transformer_graph, validate_plan)

RATIO_TARGET, SECONDS_TARGET = 1.10, 1.0


def graphs():
    widths = np.random.default_rng(0).integers(128, 1024, size=1201)
    yield "MLP", mlp_graph(list(widths[:121]), batch=1024)
    yield "MLP", mlp_graph(list(widths), batch=1024)
    yield "transformer", transformer_graph(15, batch=8, seq_len=512, hidden=768, heads=12)
    yield "transformer", transformer_graph(150, batch=8, seq_len=512, hidden=768, heads=12)
    yield "ResNet", resnet_graph(36, batch=64, channels=64, image=56)
    yield "ResNet", resnet_graph(350, batch=64, channels=64, image=56)


def main() -> None:
    plan_best_fit(liveness(mlp_graph([4, 4], batch=1)))  # compile (or load) the Numba kernel
    planners = {"no reuse": plan_no_reuse, "first-fit": plan_first_fit, "best-fit": plan_best_fit}
    print(f"{'graph':<12} {'tensors':>7} {'lower bound':>12} " + " ".join(f"{n:>9}" for n in planners)
          + f" {'in place':>9} {'best-fit time':>14}")
    ok = True
    for name, graph in graphs():
        intervals = liveness(graph)
        bound = lower_bound(intervals)
        ratios, seconds = [], 0.0
        for planner_name, planner in planners.items():
            start = time.perf_counter()
            plan = planner(intervals)
            if planner_name == "best-fit":
                seconds = time.perf_counter() - start
                ok &= plan.arena <= RATIO_TARGET * bound and seconds < SECONDS_TARGET
            validate_plan(plan, intervals)
            ratios.append(plan.arena / bound)
        inplace = plan_inplace(graph)
        validate_plan(inplace, intervals)
        print(f"{name:<12} {len(intervals):>7} {bound / 2**20:>8.1f} MiB " + " ".join(f"{r:>8.3f}x" for r in ratios)
              + f" {inplace.arena / bound:>8.3f}x {1e3 * seconds:>11.0f} ms")
    print(f"targets: best-fit <= {RATIO_TARGET}x the lower bound, planning < {SECONDS_TARGET} s: "
          f"{'OK' if ok else 'MISSED'}")
    print("(in place: outputs take their input's buffer where the op allows it, then best-fit; its arena can "
          "fall below the bound, which assumes no sharing between an op's input and output)")


if __name__ == "__main__":
    main()

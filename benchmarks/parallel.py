"""Pipeline schedules: simulation speed and bubbles; the pipeline runner's step against one process.

    python benchmarks/parallel.py [--stages 8] [--microbatches 64] [--chunks 4] [--ranks 4] [--repeats 3]

Measured in the same run on the same machine:

* each schedule of ``mlsys_lib.parallel.pipeline`` built and simulated for p stages, m microbatches
  (v chunks for the interleaved one) with F = 1, B = 2 per stage (ZB-H1: B = W = 1), no latency:
  wall time (target under 1 s each), bubble fraction against the closed form, peak activations;
* one training step of an 8-layer MLP (width 128, batch 256 in 8 microbatches) with 1F1B on
  ``--ranks`` sim ranks, against ``train`` (the same step in one process): the ratio of wall times.
  The ranks share this machine's cores, so the ratio shows the overhead of messages and
  scheduling (and of running p processes on fewer cores), not a speed-up.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from mlsys_lib.comm import ProcessGroup, launch
from mlsys_lib.parallel.pipeline import (SCHEDULES, bubble_ratio, gpipe_bubble_fraction, init_mlp, make_schedule,
                                         pipeline_train, share_of_total, simulate, train)
from mlsys_lib.tensor.roofline import time_best


def closed_form(name: str, p: int, m: int, v: int) -> float:
    """The bubble's share of the step the lecture's formulas predict (ZB-H1: (p−1)(F+B−W) idle per stage)."""
    if name == "naive":
        return (p - 1) / p
    if name == "interleaved_1f1b":
        return share_of_total(bubble_ratio(p, m, v))
    if name == "zb_h1":
        return (p - 1) / (3 * m + p - 1)
    return gpipe_bubble_fraction(p, m)


def simulate_all(p: int, m: int, v: int) -> None:
    print(f"schedules for p = {p} stages, m = {m} microbatches (v = {v} chunks for interleaved); F = 1, B = 2")
    print(f"{'schedule':>18} {'build+simulate':>15} {'makespan':>9} {'bubble':>8} {'closed form':>12} {'peak act.':>10}")
    for name in SCHEDULES:
        chunks = v if name == "interleaved_1f1b" else 1
        durations = (1.0, 1.0, 1.0) if name == "zb_h1" else (1.0 / chunks, 2.0 / chunks, 0.0)
        start = time.perf_counter()
        timeline = simulate(make_schedule(name, p, m, chunks), *durations)
        seconds = time.perf_counter() - start
        peak = max(timeline.peak_activations) / chunks  # in whole-stage activations
        print(f"{name:>18} {seconds * 1e3:12.1f} ms {timeline.makespan:9.2f} {timeline.bubble_fraction:8.2%} "
              f"{closed_form(name, p, m, chunks):12.2%} {peak:10.2f}")


def runner_rank(g: ProcessGroup, layers: list, X: np.ndarray, Y: np.ndarray, m: int, repeats: int) -> list[float]:
    """Seconds of each of ``repeats`` 1F1B training steps on this rank, from a barrier to the end of the step."""
    schedule = make_schedule("1f1b", g.world_size, m)
    times = []
    for _ in range(repeats):
        g.barrier()
        start = time.perf_counter()
        pipeline_train(g, schedule, layers, X, Y, 1, 1e-3)
        times.append(time.perf_counter() - start)
    return times


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stages", type=int, default=8)
    parser.add_argument("--microbatches", type=int, default=64)
    parser.add_argument("--chunks", type=int, default=4)
    parser.add_argument("--ranks", type=int, default=4, help="pipeline stages of the runner")
    parser.add_argument("--repeats", type=int, default=3, help="timed training steps (the best is kept)")
    args = parser.parse_args(argv)
    simulate_all(args.stages, args.microbatches, args.chunks)

    rng = np.random.default_rng(0)
    layers = init_mlp([128] * 9, seed=0)
    X, Y = rng.standard_normal((256, 128)), rng.standard_normal((256, 128))
    one = time_best(lambda: train(layers, X, Y, 1, 1e-3), args.repeats)
    per_rank = launch(runner_rank, args.ranks, args=(layers, X, Y, 8, args.repeats), timeout=600)
    piped = min(max(ts) for ts in zip(*per_rank))
    print(f"\ntraining step of an 8-layer MLP (width 128, batch 256, 8 microbatches), best of {args.repeats}")
    print(f"  one process (train):        {one * 1e3:8.1f} ms")
    print(f"  1F1B on {args.ranks} sim ranks:        {piped * 1e3:8.1f} ms")
    print(f"  pipeline / one process = {piped / one:.2f}x on {args.ranks} ranks sharing this machine's cores")


if __name__ == "__main__":
    main()

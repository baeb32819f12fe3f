"""ZeRO stages 0-3 executed: model-state bytes per rank against Lab 4's calculator; bytes sent per step.

    python benchmarks/zero.py [--layers 16] [--width 32] [--ranks 2 4 8] [--steps 2]

For an MLP of ``--layers`` Linear layers of width ``--width`` (fp32, Adam) trained by
``mlsys_lib.distributed.zero.zero_train`` on p sim ranks, per stage: the bytes of model state one rank
holds between steps and at its peak during a step (stage 2: plus one layer's full gradient; stage 3:
plus the gathered layers, prefetch on), Lab 4's ``training_memory`` for the same padded parameter count
(Ψ') and p, the peak as a share of plain data parallelism's, and the payload bytes a rank sends per
step against 2(p−1)/p · 4Ψ' (ring all-reduce). Every figure is a count, so it does not depend on the
machine; the final parameters of every stage are checked equal to stage 0's, bit for bit.
"""

from __future__ import annotations

import argparse

import numpy as np

from mlsys_lib.comm import ProcessGroup, launch
from mlsys_lib.distributed.zero import ZeroResult, zero_train
from mlsys_lib.memory.accounting import ZERO_STAGES


def every_stage(g: ProcessGroup, sizes: list[int], steps: int) -> list[ZeroResult]:
    rng = np.random.default_rng(1)
    X = rng.standard_normal((64, sizes[0])).astype(np.float32)
    y = rng.integers(0, sizes[-1], 64)
    return [zero_train(g, sizes, X, y, steps, stage, prefetch=True) for stage in ZERO_STAGES]


def report(p: int, results: list[ZeroResult]) -> None:
    plain = results[0]
    psi = plain.padded_params
    print(f"p = {p} ranks, Ψ = {plain.num_params} parameters, Ψ' = {psi} padded; bytes per rank")
    print(f"{'stage':>5} {'held':>9} {'calculator':>11} {'peak':>9} {'peak/DP':>8} {'sent/step':>10} "
          f"{'sent/DP':>8} {'equal to DP':>12}")
    all_reduce = 2 * (p - 1) / p * 4 * psi
    assert plain.bytes_sent_per_step == all_reduce, (plain.bytes_sent_per_step, all_reduce)
    for stage, r in enumerate(results):
        calc = r.calculator
        held, peak = sum(r.held.values()), sum(r.peak.values())
        same = all(np.array_equal(a, b) for layer, ref in zip(r.layers, plain.layers) for a, b in zip(layer, ref))
        print(f"{stage:>5} {held:>9,} {calc.parameters + calc.gradients + calc.optimizer_states:>11,.0f} "
              f"{peak:>9,} {peak / sum(plain.peak.values()):>8.3f} {r.bytes_sent_per_step:>10,.0f} "
              f"{r.bytes_sent_per_step / all_reduce:>8.2f} {str(same):>12}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=16)
    parser.add_argument("--width", type=int, default=32)
    parser.add_argument("--ranks", type=int, nargs="+", default=[2, 4, 8])
    parser.add_argument("--steps", type=int, default=2)
    args = parser.parse_args(argv)
    sizes = [args.width] * (args.layers + 1)
    for p in args.ranks:
        report(p, launch(every_stage, p, args=(sizes, args.steps), timeout=300)[0])
        print()


if __name__ == "__main__":
    main()

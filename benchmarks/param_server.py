"""Parameter server: modelled time to a target loss for BSP, SSP(s=1, 3) and ASP, with and without a straggler.

    python benchmarks/param_server.py [--workers 4] [--straggler 4] [--target 0.5] [--steps 100]

Softmax regression on ``synthetic_problem()`` (512 rows, 16 features, 4 classes), one server, workers
of ``compute_s`` = 100 µs per step and the default 1 GB/s network (α = 10 µs), worker 0 slowed by
``--straggler`` in the second half of the table. Times are those of the modelled clock (the same on
every machine); staleness in clocks (SSP bounds it by s), delay in pushes between a pull and its push.
"""

from __future__ import annotations

import argparse

from mlsys_lib.distributed.param_server import convergence_curves, synthetic_problem


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--straggler", type=float, default=4.0)
    parser.add_argument("--target", type=float, default=0.5)
    parser.add_argument("--steps", type=int, default=100)
    args = parser.parse_args(argv)
    X, y = synthetic_problem()
    curves = convergence_curves(X, y, 4, straggler=args.straggler, num_workers=args.workers, steps=args.steps)
    bsp = {straggled: curves["BSP" + (f", straggler ×{args.straggler:g}" if straggled else "")]
           for straggled in (False, True)}
    print(f"{args.workers} workers, {args.steps} steps each; time to loss {args.target} (modelled ms)")
    print(f"{'run':<26} {'to target':>10} {'vs BSP':>7} {'finish':>8} {'final loss':>10} {'max staleness':>13} "
          f"{'max delay':>9}")
    for name, r in curves.items():
        reference = bsp["straggler" in name].time_to_loss(args.target)
        t = r.time_to_loss(args.target)
        print(f"{name:<26} {1e3 * t:>10.2f} {t / reference:>7.2f} {1e3 * r.times[-1]:>8.2f} {r.losses[-1]:>10.3f} "
              f"{max(s.staleness for s in r.staleness):>13} {max(s.delay for s in r.staleness):>9}")


if __name__ == "__main__":
    main()

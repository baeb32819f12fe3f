"""Distributed training on the α-β clock: DDP step time vs gradient bucket size.

    python benchmarks/distributed.py [--ranks 4] [--batch 32] [--gflops 20]

DDP section: an MLP 256 → 512 (8 layers of 512) → 10 (float32, 2.0 M parameters, 7.9 MB of
gradients), a local batch of ``--batch`` rows on each of ``--ranks`` sim ranks, one training step
per bucket size through ``DistributedDataParallel`` (the data really all-reduced in buckets during
backward), timed on the lane clock: compute at ``--gflops`` GFLOP/s, the network of
``CostModel()`` (α = 10 µs, β = 1 ns/byte: 1 GB/s, γ = 0.1 ns/byte). Printed, all from one run:

* each bucket size's simulated step time and the closed form ``modelled_step_time`` with as many
  equal buckets; the all-reduce-after-backward baseline (one bucket of everything);
* that every bucketed step's gradients equal plain data parallelism's (one all-reduce after backward);
* best step / max(compute, communication) (target ≤ 1.15), with communication = one ring
  all-reduce of every gradient; all-reduce after backward / best (target ≥ 1.3).

A bucket never splits a parameter (as in PyTorch), so below the size of one weight (1 MiB) the
buckets stop shrinking; the α-bound end of the curve is in ``tests/test_distributed_ddp.py``.
"""

from __future__ import annotations

import argparse

import numpy as np

from mlsys_lib.autodiff import cross_entropy, nn
from mlsys_lib.comm import CostModel, ProcessGroup, closed_form, launch
from mlsys_lib.distributed.ddp import DistributedDataParallel, all_reduce_gradients, modelled_step_time

SIZES = [256] + [512] * 8 + [10]
BUCKETS_MIB = [0.0625, 0.25, 0.5, 1, 2, 4, 8]


def ddp_rank(g: ProcessGroup, batch: int, flops_per_s: float) -> tuple[list, float]:
    """One step per bucket size: the timelines, and the largest gradient difference from plain DP."""
    rng = np.random.default_rng(g.rank)
    X, y = rng.standard_normal((batch, SIZES[0])).astype(np.float32), rng.integers(0, SIZES[-1], batch)
    model = nn.MLP(SIZES, rng=0)
    cross_entropy(model(X), y).backward()
    all_reduce_gradients(model.parameters(), g)
    plain = [p.grad.numpy() for p in model.parameters()]
    timelines, worst = [], 0.0
    for mib in [*BUCKETS_MIB, None]:
        model.zero_grad()
        ddp = DistributedDataParallel(model, g, None if mib is None else int(mib * 2**20), flops_per_s)
        ddp.backward(cross_entropy(ddp(X), y))
        worst = max([worst] + [float(np.abs(p.grad.numpy() - q).max()) for p, q in zip(model.parameters(), plain)])
        timelines.append((mib, len(ddp.buckets), ddp.timeline))
    return timelines, worst


def ddp_section(ranks: int, batch: int, gflops: float) -> None:
    cost = CostModel()
    results = launch(ddp_rank, ranks, args=(batch, gflops * 1e9), cost=cost, timeout=600)
    timelines, worst = results[0][0], max(r[1] for r in results)
    *bucketed, (_, _, baseline) = timelines
    grad_bytes = sum(n_in * n_out * 4 + n_out * 4 for n_in, n_out in zip(SIZES[:-1], SIZES[1:]))
    forward = sum(i.end - i.start for i in baseline.lane("compute") if i.label.startswith("F"))
    compute = baseline.busy("compute")
    comm = closed_form("all_reduce", "ring", grad_bytes, ranks, cost.alpha, cost.beta, cost.gamma)
    print(f"DDP: MLP {SIZES}, {grad_bytes / 1e6:.1f} MB of gradients, {ranks} sim ranks, local batch {batch}, "
          f"{gflops:g} GFLOP/s, {cost}")
    print(f"compute (forward + backward) {compute * 1e3:.2f} ms, one all-reduce of every gradient {comm * 1e3:.2f} ms")
    print(f"{'bucket':>10} {'buckets':>8} {'step (ms)':>10} {'closed form':>12} {'comm busy':>10}")
    for mib, count, timeline in bucketed:
        model = modelled_step_time(forward, compute - forward, grad_bytes, count, ranks, cost)
        print(f"{mib:>6g} MiB {count:8d} {timeline.step_time * 1e3:10.2f} {model * 1e3:12.2f} "
              f"{timeline.busy('comm') * 1e3:10.2f}")
    print(f"{'after bwd':>10} {1:8d} {baseline.step_time * 1e3:10.2f}")
    mib, count, best = min(bucketed, key=lambda t: t[2].step_time)
    print(f"largest gradient difference from plain data parallelism: {worst:.3g}")
    print(f"best bucket {mib:g} MiB ({count} buckets): step / max(compute, comm) = "
          f"{best.step_time / max(compute, comm):.3f} (target <= 1.15); "
          f"all-reduce after backward / best = {baseline.step_time / best.step_time:.3f} (target >= 1.3)")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=4)
    parser.add_argument("--batch", type=int, default=40, help="rows per rank")
    parser.add_argument("--gflops", type=float, default=20.0, help="compute rate of the clock, GFLOP/s")
    args = parser.parse_args(argv)
    ddp_section(args.ranks, args.batch, args.gflops)


if __name__ == "__main__":
    main()

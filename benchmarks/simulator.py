"""Numba's CUDA simulator running thread blocks: its polling loop against the course's barrier.

    python benchmarks/simulator.py [--n 4096] [--block 256] [--repeat 3]

The course's sequential-addressing reduction (``reduce_sequential``: blocks of ``block`` threads,
``log2(block) + 1`` barriers each, relaunched on the partial sums) over ``n`` floats, timed first
with the simulator's block runner as Numba ships it (``BlockManager.run`` polls its threads in a
loop that never sleeps), then with :mod:`mlsys_lib.kernels.sim.blocks` (the threads wait on a
barrier), in this one process; prints both times (wall and this process's CPU) and the ratios.
Each sum is checked against numpy.
"""

from __future__ import annotations

import argparse
import os
import time
from unittest import mock

import numpy as np

os.environ["MLSYS_DEVICE"] = "sim"
import mlsys_lib  # noqa: E402,F401 - chooses the simulator before numba.cuda is imported
from numba.cuda.simulator import kernel as simulator  # noqa: E402

#: Numba's own runner, kept before importing the kernels installs the barrier
NUMBA_RUNNER = {(simulator.BlockManager, "run"): simulator.BlockManager.run,
                (simulator.BlockThread, "run"): simulator.BlockThread.run,
                (simulator.BlockThread, "syncthreads"): simulator.BlockThread.syncthreads}

from mlsys_lib.kernels import reduce_sequential  # noqa: E402


def timed(x: np.ndarray, block: int, repeat: int) -> tuple[float, float]:
    """(wall, CPU) seconds of ``repeat`` reductions of ``x``, each checked against numpy."""
    wall, cpu = time.perf_counter(), time.process_time()
    for _ in range(repeat):
        total = float(reduce_sequential(x, block=block))
        if not np.isclose(total, x.sum(dtype=np.float64), rtol=1e-4):
            raise AssertionError(f"wrong sum: {total} != {x.sum(dtype=np.float64)}")
    return time.perf_counter() - wall, time.process_time() - cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=4096)
    parser.add_argument("--block", type=int, default=256)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    x = np.random.default_rng(0).standard_normal(args.n).astype(np.float32)
    with mock.patch.multiple(simulator.BlockManager, run=NUMBA_RUNNER[simulator.BlockManager, "run"]), \
            mock.patch.multiple(simulator.BlockThread, run=NUMBA_RUNNER[simulator.BlockThread, "run"],
                                syncthreads=NUMBA_RUNNER[simulator.BlockThread, "syncthreads"]):
        stock = timed(x, args.block, args.repeat)
    barrier = timed(x, args.block, args.repeat)
    print(f"{args.repeat} sums of {args.n} floats by reduce_sequential, blocks of {args.block} threads, "
          f"on {os.cpu_count()} cores")
    print(f"  Numba's block runner (polling): wall {stock[0]:6.2f} s  CPU {stock[1]:6.2f} s")
    print(f"  sim.blocks (a barrier):         wall {barrier[0]:6.2f} s  CPU {barrier[1]:6.2f} s")
    print(f"  speed-up: {stock[0] / barrier[0]:.2f}x wall, {stock[1] / barrier[1]:.2f}x CPU")


if __name__ == "__main__":
    main()

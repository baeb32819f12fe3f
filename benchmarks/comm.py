"""Ring all-reduce of 64 MiB of float32 on 4 ranks: the sim backend against Open MPI's MPI_Allreduce.

    python benchmarks/comm.py [--mib 64] [--ranks 4] [--repeats 5]

Measured in the same run on the same machine:

* ``sim``: ``group.all_reduce(x, algorithm="ring")`` on ``launch(..., backend="sim")`` (processes,
  pipes, shared memory);
* ``MPI_Allreduce``: mpi4py's ``comm.Allreduce`` under ``mpiexec -n RANKS`` (started by this script,
  ``--oversubscribe``), Open MPI choosing its own algorithm;
* ``mlsys ring on MPI``: the same ring algorithm code on the "mpi" backend, in that mpiexec run;
* ``memcpy``: ``np.copyto`` of the whole buffer in this process.

Each rank starts from ``rank + 1`` everywhere and the result is checked before timing. A repeat
starts after a barrier and takes as long as its slowest rank; the best of the repeats is reported.
Target: sim within 3x of MPI_Allreduce.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import time

import numpy as np

from mlsys_lib.comm import ProcessGroup, launch
from mlsys_lib.comm.mpi import mpiexec_command
from mlsys_lib.tensor.roofline import time_best


def _input(rank: int, nbytes: int) -> np.ndarray:
    return np.full(nbytes // 4, rank + 1, dtype=np.float32)


def _check(y: np.ndarray, p: int) -> None:
    expected = p * (p + 1) / 2
    if not (y[0] == expected and y[-1] == expected and np.all(y[:: 4097] == expected)):
        raise AssertionError(f"wrong all-reduce result: expected {expected} everywhere")


def _timed(barrier, all_reduce, repeats: int) -> list[float]:
    times = []
    for _ in range(repeats):
        barrier()
        start = time.perf_counter()
        all_reduce()
        times.append(time.perf_counter() - start)
    return times


def sim_rank(g: ProcessGroup, nbytes: int, repeats: int) -> list[float]:
    """One sim rank: check, then time ``repeats`` ring all-reduces (seconds)."""
    x = _input(g.rank, nbytes)
    _check(g.all_reduce(x, algorithm="ring"), g.world_size)
    return _timed(g.barrier, lambda: g.all_reduce(x, algorithm="ring"), repeats)


def mpi_rank(nbytes: int, repeats: int) -> None:
    """One MPI rank (under mpiexec): time MPI_Allreduce and the mlsys ring; rank 0 prints JSON."""
    from mpi4py import MPI

    from mlsys_lib.comm import mpi_group

    comm = MPI.COMM_WORLD
    x, y = _input(comm.rank, nbytes), np.empty(nbytes // 4, np.float32)
    comm.Allreduce(x, y)
    _check(y, comm.size)
    native = _timed(comm.Barrier, lambda: comm.Allreduce(x, y), repeats)
    group = mpi_group()
    _check(group.all_reduce(x, algorithm="ring"), comm.size)
    ring = _timed(comm.Barrier, lambda: group.all_reduce(x, algorithm="ring"), repeats)
    gathered = comm.gather((native, ring), root=0)
    if comm.rank == 0:
        slowest = [[max(ts) for ts in zip(*(g[i] for g in gathered))] for i in range(2)]
        print(json.dumps({"native": slowest[0], "ring": slowest[1]}))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=64, help="size of the all-reduced vector, MiB")
    parser.add_argument("--ranks", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=5, help="timed all-reduces of each (the best is kept)")
    parser.add_argument("--mpi-worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    nbytes = args.mib * 2**20
    if args.mpi_worker:
        mpi_rank(nbytes, args.repeats)
        return
    per_rank = launch(sim_rank, args.ranks, args=(nbytes, args.repeats), timeout=600)
    sim = min(max(ts) for ts in zip(*per_rank))
    cmd, env = mpiexec_command(args.ranks, [__file__, "--mpi-worker", "--mib", str(args.mib),
                                            "--repeats", str(args.repeats)])
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600, check=True)
    mpi = json.loads(done.stdout.strip().splitlines()[-1])
    native, ring_on_mpi = min(mpi["native"]), min(mpi["ring"])
    src, dst = np.ones(nbytes // 4, np.float32), np.empty(nbytes // 4, np.float32)
    memcpy = time_best(lambda: np.copyto(dst, src), args.repeats)

    print(f"all-reduce (sum) of {args.mib} MiB float32 on {args.ranks} ranks, best of {args.repeats}")
    print(f"{'':22} {'ms':>8} {'algbw GB/s':>11} {'vs MPI':>7}")
    for name, t in (("sim ring (mlsys)", sim), ("MPI_Allreduce", native), ("mlsys ring on MPI", ring_on_mpi)):
        print(f"{name:22} {t * 1e3:8.1f} {nbytes / t / 1e9:11.2f} {t / native:6.2f}x")
    print(f"{'memcpy (np.copyto)':22} {memcpy * 1e3:8.1f} {nbytes / memcpy / 1e9:11.2f}")
    print(f"sim / MPI_Allreduce = {sim / native:.2f}x (target within 3x); sim = {sim / memcpy:.1f} memcpys "
          f"of the whole buffer; the ring moves 2(p-1)/p = {2 * (args.ranks - 1) / args.ranks:.2f} buffers "
          f"per rank each way")


if __name__ == "__main__":
    main()

"""``launch``: run a function on every rank of a new process group and return the ranks' results."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from .cost import CostModel
from .group import PROTOCOLS

T = TypeVar("T")
BACKENDS = ("sim", "mpi")


def launch(fn: Callable[..., T], world_size: int, backend: str = "sim", *, args: Sequence[Any] = (),
           timeout: float = 60.0, cost: CostModel | None = None, protocol: str = "eager") -> list[T]:
    """Run ``fn(group, *args)`` on ``world_size`` ranks; return the results as a list indexed by rank.

    ``backend="sim"``: one local process per rank, payloads through shared memory, a logical α-β
    clock under ``cost``. ``backend="mpi"``: mpi4py over real MPI; inside ``mpiexec -n world_size``
    this process is one rank (every rank gets the full list), otherwise ``launch`` starts
    ``mpiexec`` itself. ``fn`` and ``args`` are pickled with cloudpickle (notebook functions work);
    under the sim backend a script must call ``launch`` under ``if __name__ == "__main__":``.

    ``protocol``: when a send completes. "eager" (the default): at once, the message is buffered.
    "rendezvous": only once the receiver has started the matching receive (``MPI_Ssend``; what MPI
    does with large messages), so a ring in which every rank sends before it receives deadlocks.

    Raises :class:`RankFailedError` (naming the first rank that failed and its exception) if a rank
    raises or dies, or returns with a request of isend/irecv it never waited on
    (:class:`UnfinishedRequestError` in that rank); :class:`DeadlockError` (sim backend) as soon as
    every rank still running waits for another and none can proceed, naming what each waits for;
    :class:`LaunchTimeoutError` after ``timeout`` seconds. Processes are always reaped and shared
    memory removed.
    """
    if not callable(fn):
        raise TypeError(f"fn must be callable as fn(group, *args), got {type(fn).__name__}")
    if not isinstance(world_size, int) or isinstance(world_size, bool) or world_size < 1:
        raise ValueError(f"world_size must be an int >= 1, got {world_size!r}")
    if backend not in BACKENDS:
        raise ValueError(f"unknown backend {backend!r}: expected one of {', '.join(BACKENDS)}")
    if not timeout > 0:
        raise ValueError(f"timeout must be > 0 seconds, got {timeout!r}")
    if cost is not None and not isinstance(cost, CostModel):
        raise TypeError(f"cost must be a CostModel, got {type(cost).__name__}")
    if protocol not in PROTOCOLS:
        raise ValueError(f"unknown protocol {protocol!r}: expected one of {', '.join(PROTOCOLS)}")
    cost = cost if cost is not None else CostModel()
    if backend == "sim":
        from .sim_launcher import launch_sim
        return launch_sim(fn, world_size, tuple(args), timeout, cost, protocol)
    from .mpi import launch_mpi
    return launch_mpi(fn, world_size, tuple(args), timeout, cost, protocol)

"""``launch``: run a function on every rank of a new process group and return the ranks' results."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from .cost import CostModel

T = TypeVar("T")
BACKENDS = ("sim", "mpi")


def launch(fn: Callable[..., T], world_size: int, backend: str = "sim", *, args: Sequence[Any] = (),
           timeout: float = 60.0, cost: CostModel | None = None) -> list[T]:
    """Run ``fn(group, *args)`` on ``world_size`` ranks; return the results as a list indexed by rank.

    ``backend="sim"``: one local process per rank, payloads through shared memory, a logical α-β
    clock under ``cost``. ``backend="mpi"``: mpi4py over real MPI; inside ``mpiexec -n world_size``
    this process is one rank (every rank gets the full list), otherwise ``launch`` starts
    ``mpiexec`` itself. ``fn`` and ``args`` are pickled with cloudpickle (notebook functions work);
    under the sim backend a script must call ``launch`` under ``if __name__ == "__main__":``.

    Raises :class:`RankFailedError` (naming the first rank that failed and its exception) if a rank
    raises or dies, :class:`LaunchTimeoutError` after ``timeout`` seconds; processes are always
    reaped and shared memory removed.
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
    cost = cost if cost is not None else CostModel()
    if backend == "sim":
        from .sim_launcher import launch_sim
        return launch_sim(fn, world_size, tuple(args), timeout, cost)
    from .mpi import launch_mpi
    return launch_mpi(fn, world_size, tuple(args), timeout, cost)

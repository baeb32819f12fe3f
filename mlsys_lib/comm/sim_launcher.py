"""Start the "sim" backend's ranks as processes, watch them, and clean up whatever happens.

Each rank runs :func:`run_rank` in its own process (``forkserver`` where available, else ``spawn``),
with ``fn`` and its arguments pickled by ``cloudpickle`` (so functions defined in a notebook work).
The launcher waits for each rank's report or the end of its process. On the first failure (an
exception, or a process that ends without reporting) it writes the reason into every other rank's
abort pipe, so their pending calls raise :class:`PeerFailedError` at once; ranks still running a few
seconds later, or at the timeout, are terminated. In every case all processes are joined and every
shared-memory segment of the run is unlinked before ``launch`` returns or raises.
"""

from __future__ import annotations

import multiprocessing as mp
import pickle
import secrets
import signal
import time
from collections.abc import Callable, Sequence
from multiprocessing.connection import Connection, wait
from multiprocessing.context import BaseContext
from multiprocessing.process import BaseProcess
from typing import Any

import cloudpickle

from .cost import CostModel
from .errors import Failure, LaunchTimeoutError, RankFailedError
from .group import ProcessGroup
from .shm import unlink_run
from .sim import SimTransport

GRACE_S = 5.0  # after a failure, how long the other ranks get to report before they are terminated


def new_token() -> str:
    """A fresh run id for shared-memory names."""
    return secrets.token_hex(4)


def _context() -> BaseContext:
    if "forkserver" in mp.get_all_start_methods():
        ctx = mp.get_context("forkserver")
        ctx.set_forkserver_preload(["numpy", "cloudpickle", "mlsys_lib.comm.sim_launcher"])
        return ctx
    return mp.get_context("spawn")


def run_rank(rank: int, world_size: int, token: str, job: bytes, cost: CostModel,
             inbox: dict[int, Connection], outbox: dict[int, Connection], abort: Connection,
             report: Connection) -> None:
    """The body of one rank's process: run ``fn(group, *args)`` and report its result or exception."""
    transport = SimTransport(rank, world_size, token, inbox, outbox, abort)
    try:
        fn, args = pickle.loads(job)
        outcome: tuple[str, Any] = ("ok", pickle.dumps(fn(ProcessGroup(transport, cost), *args)))
    except BaseException as exc:  # noqa: BLE001 - every failure is reported to the launcher
        outcome = ("failed", Failure.from_exception(rank, exc))
    try:
        report.send(outcome)
    finally:
        transport.close()
        report.close()


def _exit_description(code: int | None) -> str:
    if code is not None and code < 0:
        return f"killed by signal {signal.Signals(-code).name}"
    return f"exit code {code}"


def _read_report(rank: int, report: Connection, proc: BaseProcess) -> Any:
    """The rank's outcome: ("ok", value) or a Failure; None if it is still running."""
    if report.poll():
        try:
            kind, body = report.recv()
        except EOFError:
            pass
        else:
            if kind == "failed":
                return body
            try:
                return ("ok", pickle.loads(body))
            except Exception as exc:  # noqa: BLE001 - a result the launcher cannot rebuild
                return Failure(rank, "raised", f"its result could not be unpickled here: {exc!r}")
    elif proc.is_alive():
        return None
    proc.join()
    return Failure(rank, "died", f"its process ended without a result ({_exit_description(proc.exitcode)})")


def _supervise(procs: Sequence[BaseProcess], reports: Sequence[Connection], aborts: Sequence[Connection],
               timeout: float) -> tuple[dict[int, Any], bool]:
    """Collect every rank's outcome; abort the others at the first failure. Returns (outcomes, timed_out)."""
    outcomes: dict[int, Any] = {}
    deadline = time.monotonic() + timeout
    failed = False
    while len(outcomes) < len(procs):
        now = time.monotonic()
        if now >= deadline:
            break
        watched = {}
        for r in range(len(procs)):
            if r not in outcomes:
                watched[reports[r]] = watched[procs[r].sentinel] = r
        for ready in wait(list(watched), timeout=deadline - now):
            r = watched[ready]
            outcome = None if r in outcomes else _read_report(r, reports[r], procs[r])
            if outcome is None:
                continue
            outcomes[r] = outcome
            if isinstance(outcome, Failure) and not failed:
                failed = True
                deadline = min(deadline, time.monotonic() + GRACE_S)
                for other, abort in enumerate(aborts):
                    if other not in outcomes:
                        _tell(abort, f"rank {r} {outcome.kind}: {outcome.summary}")
    return outcomes, len(outcomes) < len(procs) and not failed


def _tell(abort: Connection, reason: str) -> None:
    try:
        abort.send(reason)
    except OSError:  # that rank already exited
        pass


def _join_all(procs: Sequence[BaseProcess], seconds: float) -> None:
    deadline = time.monotonic() + seconds
    for proc in procs:
        proc.join(timeout=max(0.0, deadline - time.monotonic()))


def _reap(procs: Sequence[BaseProcess]) -> None:
    """Join every process, terminating (then killing) those still running after a second."""
    _join_all(procs, 1.0)
    for stop in ("terminate", "kill"):
        for proc in procs:
            if proc.is_alive():
                getattr(proc, stop)()
        _join_all(procs, 2.0)


def launch_sim(fn: Callable[..., Any], world_size: int, args: Sequence[Any], timeout: float,
               cost: CostModel) -> list[Any]:
    """Run ``fn(group, *args)`` on ``world_size`` local processes; the results, indexed by rank."""
    ctx = _context()
    token = new_token()
    job = cloudpickle.dumps((fn, tuple(args)))
    p = world_size
    pipes = {(i, j): ctx.Pipe(duplex=False) for i in range(p) for j in range(p) if i != j}  # i -> j
    reports = [ctx.Pipe(duplex=False) for _ in range(p)]
    aborts = [ctx.Pipe(duplex=False) for _ in range(p)]
    parent_ends = [r for r, _ in reports] + [w for _, w in aborts]
    child_ends = [end for pair in pipes.values() for end in pair] + [w for _, w in reports] + [r for r, _ in aborts]
    procs: list[BaseProcess] = []
    try:
        for r in range(p):
            inbox = {i: pipes[(i, r)][0] for i in range(p) if i != r}
            outbox = {j: pipes[(r, j)][1] for j in range(p) if j != r}
            proc = ctx.Process(target=run_rank, name=f"mlsys-rank-{r}", daemon=True,
                               args=(r, p, token, job, cost, inbox, outbox, aborts[r][0], reports[r][1]))
            proc.start()
            procs.append(proc)
        for end in child_ends:
            end.close()  # the children hold these now; a rank's exit must read as end of file
        outcomes, timed_out = _supervise(procs, parent_ends[:p], parent_ends[p:], timeout)
    finally:
        _reap(procs)
        for end in parent_ends + child_ends:
            end.close()
        unlink_run(token, p)
    if timed_out:
        running = sorted(set(range(p)) - set(outcomes))
        raise LaunchTimeoutError(f"launch timed out after {timeout} s: ranks {running} had not finished "
                                 f"and were stopped")
    failures = {r: o for r, o in outcomes.items() if isinstance(o, Failure)}
    for r in range(p):
        if r not in outcomes:
            failures[r] = Failure(r, "stopped", "stopped by the launcher after another rank failed")
    if failures:
        raise RankFailedError(failures)
    return [outcomes[r][1] for r in range(p)]

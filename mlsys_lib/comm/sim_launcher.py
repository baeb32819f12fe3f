"""Start the "sim" backend's ranks as processes, watch them, and clean up whatever happens.

Each rank runs :func:`run_rank` in its own process (``forkserver`` where available, else ``spawn``),
with ``fn`` and its arguments pickled by ``cloudpickle`` (so functions defined in a notebook work).
Each rank's BLAS (numpy's matrix products) may use at most its share of the cores, as ``torchrun``
sets ``OMP_NUM_THREADS``: p ranks each running the default one thread per core would oversubscribe
the machine, and OpenBLAS threads spin while they wait for a core (measured on 2 shared cores: a
1F1B step of ``benchmarks/parallel.py`` on 4 ranks spent ~200 ms of CPU per rank instead of ~20 ms).
The launcher waits for each rank's report or the end of its process, and writes what it learns into
every other rank's launcher pipe: ``("returned", r)`` when rank r has returned its result, and at the
first failure (an exception, or a process that ends without reporting) ``("abort", r, reason)``, so
their pending calls raise :class:`PeerFailedError` at once, naming rank r. That is the root cause: a
rank whose peer exited waits for this word instead of blaming the peer (see ``sim``), so no rank
fails because of another before the launcher has seen the first failure. Ranks still running a few
seconds later, or at the timeout, are terminated. In every case all processes are joined and every
shared-memory segment of the run is unlinked before ``launch`` returns or raises.

**Deadlocks.** A rank that waits tells the launcher, on its report pipe, what it waits for (the n-th
message of a key from a peer, or, for a rendezvous send, the peer's n-th receive on a key) together
with how many messages it has sent and how many receives it has started, per peer and key. While
it waits these counts do not change. When every rank still running waits, and no rank's wait is
met by the counts its peer reported, no rank can ever move again (the first rank to move would need
a message or a receive that some peer started after reporting, so that peer moved before it): the
launcher aborts the ranks and ``launch`` raises :class:`DeadlockError`, naming each rank and what it
waits for, at once instead of at the timeout. A rank that finishes with requests of isend/irecv it
never waited on fails with :class:`UnfinishedRequestError`.
"""

from __future__ import annotations

import multiprocessing as mp
import os
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
from threadpoolctl import ThreadpoolController

from .cost import CostModel
from .errors import DeadlockError, Failure, LaunchTimeoutError, RankFailedError
from .group import COLLECTIVE_CHANNEL, LANE_CHANNEL, ProcessGroup
from .shm import unlink_run
from .sim import SimTransport

GRACE_S = 5.0  # after a failure, how long the other ranks get to report before they are terminated


def new_token() -> str:
    """A fresh run id for shared-memory names."""
    return secrets.token_hex(4)


def _context() -> BaseContext:
    if "forkserver" in mp.get_all_start_methods():
        ctx = mp.get_context("forkserver")
        # what every rank imports, once per fork server instead of once per rank (NumPy 2 imports
        # numpy.random only when first used: the course's tests use it in each rank)
        ctx.set_forkserver_preload(["numpy", "numpy.random", "cloudpickle", "mlsys_lib.comm.sim_launcher"])
        return ctx
    return mp.get_context("spawn")


def blas_threads_per_rank(world_size: int) -> int:
    """Threads each of ``world_size`` ranks may give its BLAS: the cores this process may run on,
    shared evenly, at least 1."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, cores // world_size)


def run_rank(rank: int, world_size: int, token: str, job: bytes, cost: CostModel,
             inbox: dict[int, Connection], outbox: dict[int, Connection], launcher: Connection,
             report: Connection, protocol: str = "eager") -> None:
    """The body of one rank's process: run ``fn(group, *args)`` and report its result or exception."""
    transport = SimTransport(rank, world_size, token, inbox, outbox, launcher, report, protocol)
    try:
        fn, args = pickle.loads(job)
        group = ProcessGroup(transport, cost)
        blas = ThreadpoolController()
        current = max((lib["num_threads"] for lib in blas.info() if lib["user_api"] == "blas"), default=1)
        with blas.limit(limits=min(current, blas_threads_per_rank(world_size)), user_api="blas"):
            result = fn(group, *args)
        group.check_finished()
        outcome: tuple[str, Any] = ("ok", pickle.dumps(result))
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


def _read_report(rank: int, report: Connection, proc: BaseProcess, blocked: dict[int, tuple]) -> Any:
    """The rank's outcome: ("ok", value) or a Failure; None if it is still running.

    Reports of what a waiting rank waits for are filed in ``blocked`` on the way.
    """
    for _ in range(2):  # a rank that has ended wrote its outcome first: read again before calling it dead
        while report.poll():
            try:
                kind, *body = report.recv()
            except EOFError:
                break
            if kind == "blocked":
                blocked[rank] = tuple(body)
                continue
            if kind == "failed":
                return body[0]
            try:
                return ("ok", pickle.loads(body[0]))
            except Exception as exc:  # noqa: BLE001 - a result the launcher cannot rebuild
                return Failure(rank, "raised", f"its result could not be unpickled here: {exc!r}")
        if proc.is_alive():
            return None
    proc.join()
    return Failure(rank, "died", f"its process ended without a result ({_exit_description(proc.exitcode)})")


_INSIDE = {COLLECTIVE_CHANNEL: "a collective's ", LANE_CHANNEL: "a non-blocking collective's "}


def describe_wait(rank: int, waiting_for: tuple, peer_report: tuple | None = None) -> str:
    """What rank ``rank`` waits for, in words (see ``sim.Wait``), with the counts its peer reported."""
    if waiting_for[0] == "send":
        _, dst, (channel, tag), n, nbytes = waiting_for
        where = _INSIDE.get(channel, "") + "send"
        text = (f"rank {rank} waits in {where} to rank {dst} (tag {tag}, {nbytes} bytes) until rank {dst} starts "
                f"the matching recv/irecv")
        if peer_report is not None:
            text += (f" (this is message {n} from rank {rank} on that tag; rank {dst} has started "
                     f"{peer_report[2].get((rank, (channel, tag)), 0)} such receives)")
        return text
    _, src, kind, key, n = waiting_for
    if kind == "ctl":
        return f"rank {rank} waits in a barrier (or a collective's argument check) for rank {src} to join it"
    channel, tag = key
    where = _INSIDE.get(channel, "") + ("receive" if channel in _INSIDE else "recv")
    text = f"rank {rank} waits in {where} from rank {src} (tag {tag})"
    if peer_report is not None:
        text += (f" for message {n}, and rank {src} has sent it {peer_report[1].get((rank, kind, key), 0)} "
                 f"on that tag")
    return text


def _met(rank: int, waiting_for: tuple, peer_report: tuple) -> bool:
    """True if the counts the peer reported meet what ``rank`` waits for."""
    _, sent, started = peer_report
    if waiting_for[0] == "send":
        _, _, key, n, _ = waiting_for
        return started.get((rank, key), 0) >= n
    _, _, kind, key, n = waiting_for
    return sent.get((rank, kind, key), 0) >= n


def find_deadlock(world_size: int, outcomes: dict[int, Any], blocked: dict[int, tuple]) -> dict[int, str] | None:
    """{rank: what it waits for} if no rank still running can ever move again, else None."""
    running = [r for r in range(world_size) if r not in outcomes]
    if not running or any(r not in blocked for r in running):
        return None
    for r in running:
        waiting_for = blocked[r][0]
        peer = waiting_for[1]
        if peer in outcomes or _met(r, waiting_for, blocked[peer]):
            return None  # r will move (or learn that its peer has ended)
    return {r: describe_wait(r, blocked[r][0], blocked[blocked[r][0][1]]) for r in running}


def deadlock_message(waits: dict[int, str], world_size: int) -> str:
    """The text of the DeadlockError for ``waits`` ({rank: what it waits for})."""
    done = sorted(set(range(world_size)) - set(waits))
    lines = [f"deadlock: ranks {sorted(waits)} all wait for one another and none can ever proceed"
             + (f" (ranks {done} had returned)" if done else "") + ":"]
    lines += [f"  {text}" for text in waits.values()]
    if any(" waits in send " in text or "collective's send" in text for text in waits.values()):
        lines.append("Under protocol=\"rendezvous\" a blocking send returns only once the receiver has started the "
                     "matching receive, as MPI does with large messages: start the send with isend, receive, then "
                     "wait for the send (or order each pair so that one side receives first).")
    return "\n".join(lines)


def _supervise(procs: Sequence[BaseProcess], reports: Sequence[Connection], tells: Sequence[Connection],
               timeout: float) -> tuple[dict[int, Any], bool, dict[int, str] | None]:
    """Collect every rank's outcome; tell the others which ranks returned, and abort them at the first
    failure (naming its rank) or deadlock.

    Returns (outcomes, timed_out, the deadlocked ranks' waits or None)."""
    outcomes: dict[int, Any] = {}
    blocked: dict[int, tuple] = {}
    deadlock: dict[int, str] | None = None
    deadline = time.monotonic() + timeout
    failed = False

    def tell_running(message: tuple) -> None:
        for other, pipe in enumerate(tells):
            if other not in outcomes:
                _tell(pipe, message)

    def abort_all(first: int | None, reason: str) -> None:
        nonlocal failed, deadline
        failed = True
        deadline = min(deadline, time.monotonic() + GRACE_S)
        tell_running(("abort", first, reason))

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
            outcome = None if r in outcomes else _read_report(r, reports[r], procs[r], blocked)
            if outcome is None:
                continue
            outcomes[r] = outcome
            if not isinstance(outcome, Failure):
                tell_running(("returned", r))
            elif not failed:
                abort_all(r, f"rank {r} {outcome.kind}: {outcome.summary}")
        if not failed:
            deadlock = find_deadlock(len(procs), outcomes, blocked)
            if deadlock is not None:
                abort_all(None, "deadlock: every rank still running waits for another (launch raises DeadlockError)")
    return outcomes, len(outcomes) < len(procs) and not failed, deadlock


def _tell(pipe: Connection, message: tuple) -> None:
    try:
        pipe.send(message)
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
               cost: CostModel, protocol: str = "eager") -> list[Any]:
    """Run ``fn(group, *args)`` on ``world_size`` local processes; the results, indexed by rank."""
    ctx = _context()
    token = new_token()
    job = cloudpickle.dumps((fn, tuple(args)))
    p = world_size
    pipes = {(i, j): ctx.Pipe(duplex=False) for i in range(p) for j in range(p) if i != j}  # i -> j
    reports = [ctx.Pipe(duplex=False) for _ in range(p)]
    tells = [ctx.Pipe(duplex=False) for _ in range(p)]  # launcher -> rank: who returned, the abort
    parent_ends = [r for r, _ in reports] + [w for _, w in tells]
    child_ends = [end for pair in pipes.values() for end in pair] + [w for _, w in reports] + [r for r, _ in tells]
    procs: list[BaseProcess] = []
    try:
        for r in range(p):
            inbox = {i: pipes[(i, r)][0] for i in range(p) if i != r}
            outbox = {j: pipes[(r, j)][1] for j in range(p) if j != r}
            proc = ctx.Process(target=run_rank, name=f"mlsys-rank-{r}", daemon=True,
                               args=(r, p, token, job, cost, inbox, outbox, tells[r][0], reports[r][1], protocol))
            proc.start()
            procs.append(proc)
        for end in child_ends:
            end.close()  # the children hold these now; a rank's exit must read as end of file
        outcomes, timed_out, deadlock = _supervise(procs, parent_ends[:p], parent_ends[p:], timeout)
    finally:
        _reap(procs)
        for end in parent_ends + child_ends:
            end.close()
        unlink_run(token, p)
    if deadlock is not None:
        raise DeadlockError(deadlock_message(deadlock, p), deadlock)
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

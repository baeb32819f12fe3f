"""Grading chunks on a Dask cluster: ``mlsys course grade LAB SUBS --cluster tcp://HOST:8786``.

:class:`ClusterPool` stands where the local process pool stands in :func:`autograder.run.batch.grade_batch`
(its ``submit(grade_chunk, lab, notebooks, template, work, sandbox)`` returns a
:class:`concurrent.futures.Future` of the chunk's :class:`~autograder.run.outcome.Outcome` s), so the
batch merges the results into the one gradebook exactly as it does for local workers. The machines
share no folder: each chunk travels as bytes (the private roots' template, the students' incoming copies,
the sandbox settings), and comes back as bytes (each graded student's folders and private gradebook),
which the main process writes under the chunk's ``work`` folder and checks before merging, as it
checks a local worker's.

A Dask worker must have the course installed (this repository, ``make setup``). Before any chunk is
sent, every worker is asked (:func:`check_worker`) whether it grades this lab as the main machine does
(same source notebooks) and, unless ``c.Sandbox.bubblewrap`` is off, whether its sandbox starts;
a worker that answers no is left out, and named, and with no worker left the batch stops before
grading anyone. A chunk refuses to run unsandboxed on a worker without bubblewrap even so.

On the worker (:func:`run_shipped`), the chunk runs in a fresh process of its own, as a local chunk
does; the lab's grading edition is built once per worker machine. Dask runs a chunk again on another
worker when its worker dies (the scheduler's ``allowed-failures``); since only the main process writes
the gradebook, and only from a finished chunk, a rerun grades nobody twice.
"""

from __future__ import annotations

import concurrent.futures as futures
import contextlib
import functools
import multiprocessing
import os
import shutil
import tempfile
import threading
import time
from pathlib import Path, PurePosixPath
from typing import Callable

from ..cells import source_fingerprint
from ..edition.edition import build_edition
from ..sandbox.sandbox import probe
from .outcome import STEPS, Outcome

#: Seconds to reach the scheduler before the batch stops with an error.
CONNECT_TIMEOUT_S = 15
#: Seconds each worker has to answer :func:`check_worker` (it builds the lab's edition once and starts a sandbox).
CHECK_TIMEOUT_S = 180
#: Seconds the batch waits with no worker that may grade left in the cluster before the chunks not
#: finished fail (their students are reported not graded), rather than waiting for ever.
WORKERLESS_TIMEOUT_S = 120


class WorkerRefused(RuntimeError):
    """A Dask worker cannot grade this lab as the course requires (no sandbox, another course version)."""


def worker_edition(lab: str) -> Path:
    """The lab's grading edition on this worker machine (built once, rebuilt when the lab changes)."""
    return build_edition(lab, Path(tempfile.gettempdir()) / "mlsys-cluster-editions" / lab)


def check_worker(lab: str, fingerprint: str, sandbox: dict) -> str | None:
    """Why this worker must not grade ``lab`` with ``sandbox`` (settings of
    :func:`~autograder.config.sandbox_settings`); None if it may. Runs on the worker."""
    if source_fingerprint(lab) != fingerprint:
        return f"its course has another version of {lab} (its solutions/ differ from the grader's)"
    if sandbox["bubblewrap"]:
        if not shutil.which("bwrap"):
            return "bubblewrap (bwrap) is not installed: it will not grade unsandboxed"
        try:
            probe({**sandbox, "edition": str(worker_edition(lab))})
        except RuntimeError as error:
            return str(error).splitlines()[0]
    return None


def _files(folder: Path) -> dict[str, tuple[bytes, float]]:
    """Every regular file under ``folder``: its path relative to ``folder`` (POSIX form) -> its bytes and
    modification time (a submission's is its time of submission when the exchange gave none)."""
    return {path.relative_to(folder).as_posix(): (path.read_bytes(), path.stat().st_mtime)
            for path in sorted(folder.rglob("*")) if path.is_file() and not path.is_symlink()}


def _write(folder: Path, files: dict[str, tuple[bytes, float]]) -> None:
    """Write ``files`` (as :func:`_files` gives them) under ``folder``; a name that would leave it is refused."""
    for name, (data, mtime) in files.items():
        relative = PurePosixPath(name)
        if relative.is_absolute() or ".." in relative.parts or not relative.parts:
            raise ValueError(f"refused a file named {name!r} from a grading worker")
        path = folder.joinpath(*relative.parts)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        os.utime(path, (mtime, mtime))


def _pack(outcome: Outcome, lab: str, worker: str) -> dict:
    """One outcome of the Dask worker named ``worker`` as bytes: with a graded student's folders and
    private gradebook."""
    packed = {"student": outcome.student, "problem": outcome.problem, "flags": outcome.flags, "files": None,
              "worker": worker}
    if outcome.problem is None:
        gradebook = outcome.work / "gradebook.db"
        packed["files"] = {"gradebook.db": (gradebook.read_bytes(), gradebook.stat().st_mtime)}
        for step in STEPS:
            folder = outcome.work / step / outcome.student / lab
            packed["files"].update({f"{step}/{outcome.student}/{lab}/{name}": data
                                    for name, data in _files(folder).items()})
    return packed


def _unpack(packed: dict, work: Path, students: set[str]) -> Outcome:
    """The outcome :func:`_pack` made, its files written into a private root of its own under ``work``.
    Raises ``ValueError`` for a student not among the chunk's ``students`` (a name that could lead out of
    ``work``)."""
    student = packed["student"]
    if student not in students:
        raise ValueError(f"refused an outcome for {student!r} from a grading worker: not a student of its chunk")
    if packed["files"] is None:
        return Outcome(student, packed["problem"], list(packed["flags"]), worker=packed["worker"])
    root = work / "shipped" / student
    shutil.rmtree(root, ignore_errors=True)
    _write(root, packed["files"])
    return Outcome(student, None, list(packed["flags"]), root, packed["worker"])


def run_shipped(chunk: Callable, lab: str, shipped: dict) -> list[dict]:
    """On a Dask worker: grade one shipped chunk with ``chunk`` (:func:`~autograder.run.batch.grade_chunk`)
    in a fresh process, in a temporary folder; return the packed outcomes, each naming this worker.
    Raises :class:`WorkerRefused` rather than grade where :func:`check_worker` says no."""
    from distributed import get_worker

    reason = check_worker(lab, shipped["fingerprint"], shipped["sandbox"])
    if reason:
        raise WorkerRefused(reason)
    sandbox = {**shipped["sandbox"], "edition": str(worker_edition(lab))}
    with tempfile.TemporaryDirectory(prefix="mlsys-chunk-") as tmp:
        folder = Path(tmp)
        _write(folder / "template", shipped["template"])
        notebooks = {}
        for student, files in shipped["students"].items():
            _write(folder / "incoming" / student, files)
            notebooks[student] = folder / "incoming" / student / shipped["notebook"]
        with futures.ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as one:
            outcomes = one.submit(chunk, lab, notebooks, folder / "template", folder / "work", sandbox).result()
        worker = get_worker()
        return [_pack(outcome, lab, str(worker.name or worker.address)) for outcome in outcomes]


def _connect(address: str):
    """A Dask client of the scheduler at ``address``; ``RuntimeError`` saying so if it cannot be reached."""
    from distributed import Client

    try:
        return Client(address, timeout=CONNECT_TIMEOUT_S, set_as_default=False)
    except (OSError, TimeoutError, ValueError) as error:
        raise RuntimeError(f"cannot reach the Dask scheduler at {address!r} within {CONNECT_TIMEOUT_S} s "
                           f"({type(error).__name__}: {str(error)[:200]}); is `dask scheduler` running there, "
                           "and its port open to this machine?") from None


class ClusterPool(futures.Executor):
    """The Dask workers of the scheduler at ``address`` that may grade ``lab`` in ``sandbox``, as an executor
    of chunks (see the module's docstring). ``log`` hears which workers were left out and why.

    Raises ``RuntimeError`` if the scheduler cannot be reached or no worker may grade.
    """

    def __init__(self, address: str, lab: str, sandbox: dict, log: Callable[[str], None] = print):
        self.lab, self.sandbox, self.fingerprint = lab, sandbox, source_fingerprint(lab)
        self.client = _connect(address)
        try:
            answers = self.client.run(check_worker, lab, self.fingerprint, sandbox, on_error="return")
        except (OSError, TimeoutError) as error:
            self.client.close()
            raise RuntimeError(f"the Dask workers at {address} did not answer: {error}") from None
        names = {address: info.get("name", address) for address, info in self.client.scheduler_info()["workers"].items()}
        self.accepted = []
        for worker, answer in sorted(answers.items()):
            if isinstance(answer, BaseException):
                answer = f"{type(answer).__name__}: {answer}"
            if answer is None:
                self.accepted.append(worker)
            else:
                log(f"Dask worker {names.get(worker, worker)} ({worker}) left out: {answer}")
        if not self.accepted:
            self.client.close()
            raise RuntimeError(f"no Dask worker at {address} may grade {lab}"
                               + ("" if answers else ": the scheduler has no workers")
                               + "; nothing was graded")
        threads = self.client.nthreads()
        self.workers = sum(threads.get(worker, 1) for worker in self.accepted)
        self._pending: set[futures.Future] = set()
        self._closed = threading.Event()
        threading.Thread(target=self._fail_when_workerless, name="dask-workerless-watch", daemon=True).start()

    def _fail_when_workerless(self, interval: float = 1.0) -> None:
        """Fail the chunks not finished once no accepted worker has been in the cluster for
        :data:`WORKERLESS_TIMEOUT_S` (Dask would keep them waiting for such a worker for ever)."""
        since = None
        while not self._closed.wait(interval):
            try:
                alive = set(self.client.scheduler_info()["workers"]) & set(self.accepted)
            except Exception:  # noqa: BLE001 - the scheduler is gone too: no worker either
                alive = set()
            if alive or not self._pending:
                since = None
                continue
            since = since or time.monotonic()
            if time.monotonic() - since >= WORKERLESS_TIMEOUT_S:
                error = RuntimeError(f"no Dask worker that may grade {self.lab} has been in the cluster for "
                                     f"{WORKERLESS_TIMEOUT_S} s: this chunk was not graded (grade again)")
                for result in list(self._pending):
                    result.remote.cancel()
                    with contextlib.suppress(futures.InvalidStateError):  # it finished meanwhile
                        result.set_exception(error)
                since = None

    def submit(self, chunk: Callable, lab: str, notebooks: dict[str, Path], template: Path, work: Path,
               sandbox: dict) -> futures.Future:
        """Grade ``notebooks`` (each in its intake folder, with its companion files) with ``chunk`` on a worker;
        the future's result is the chunk's outcomes, their files under ``work``."""
        shipped = {"fingerprint": self.fingerprint, "sandbox": sandbox, "template": _files(template),
                   "notebook": next(iter(notebooks.values())).name,
                   "students": {student: _files(path.parent) for student, path in notebooks.items()}}
        remote = self.client.submit(run_shipped, chunk, lab, shipped, workers=self.accepted,
                                    allow_other_workers=False, pure=False)
        result: futures.Future = futures.Future()

        def finished(done) -> None:
            self._pending.discard(result)
            try:
                work.mkdir(parents=True, exist_ok=True)
                outcomes = [_unpack(packed, work, set(notebooks)) for packed in done.result()]
                settle = functools.partial(result.set_result, outcomes)
            except BaseException as error:  # the chunk's students get the reason (grade_batch)
                settle = functools.partial(result.set_exception, error)
            finally:  # fetched: a worker that dies now must not make Dask grade the chunk again
                done.release()
            with contextlib.suppress(futures.InvalidStateError):  # failed already: no worker was left
                settle()
        result.remote = remote  # Dask forgets a task whose last future is gone
        self._pending.add(result)
        remote.add_done_callback(finished)
        return result

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        self._closed.set()
        self.client.close()

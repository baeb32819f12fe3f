"""The errors of ``mlsys_lib.comm``: a peer that failed, a launch that failed, ranks that disagree.

* :class:`PeerFailedError` is raised *inside* a rank, by the call that was waiting on a peer that
  raised, died or was aborted. Collectives are not fault tolerant: one failure fails them all. Its
  ``rank`` is the first rank that failed, as the launcher saw it, not the peer this rank was
  waiting for (which may only have failed because of it), like torchrun's root-cause report.
* :class:`RankFailedError` is raised by ``launch`` in the calling process. It names the rank whose
  failure came first (its own exception, not a :class:`PeerFailedError` it caused elsewhere) and
  carries every rank's outcome in ``failures``.
* :class:`CollectiveMismatchError` is raised on *every* rank of a collective whose ranks passed
  arguments that do not fit together (shapes, dtypes, root, op, algorithm, or different collectives).
* :class:`DeadlockError` is raised by ``launch`` (sim backend) when every rank still running is
  blocked in a send, receive or barrier that no other rank can ever complete; it names each rank
  and what it waits for.
* :class:`UnfinishedRequestError` is raised inside a rank whose function returned while a request
  of ``isend``/``irecv`` was never waited on (MPI calls that erroneous), and so fails the launch.
"""

from __future__ import annotations

import pickle
import traceback
from dataclasses import dataclass


class CommError(RuntimeError):
    """Base class of the communication failures (not of argument errors, which are ValueError/TypeError)."""


class PeerFailedError(CommError):
    """A pending send, receive or collective cannot finish because another rank failed or exited.

    ``rank`` is the rank that caused it: the first rank that failed, or a peer that returned before
    sending (or receiving) what this rank needed; None when no rank failed (a deadlock) or the
    launcher is gone.
    """

    def __init__(self, message: str, rank: int | None = None) -> None:
        super().__init__(message)
        self.rank: int | None = rank

    def __reduce__(self):  # picklable with its rank
        return (type(self), (str(self), self.rank))


class CollectiveMismatchError(ValueError):
    """The ranks of one collective call disagree on what it is (same message on every rank)."""


class LaunchTimeoutError(CommError, TimeoutError):
    """``launch`` ran past its timeout; the ranks still running were stopped."""


class DeadlockError(CommError):
    """Every rank still running waits for another one that can never act: ``launch`` stopped them.

    ``waits`` maps each blocked rank to what it waits for (as in the message).
    """

    def __init__(self, message: str, waits: dict[int, str] | None = None) -> None:
        super().__init__(message)
        self.waits: dict[int, str] = dict(waits or {})

    def __reduce__(self):  # picklable with its waits
        return (type(self), (str(self), self.waits))


class UnfinishedRequestError(CommError):
    """A rank's function returned while requests of ``isend``/``irecv`` were never waited on."""


@dataclass(frozen=True)
class Failure:
    """How one rank ended when it did not return a result.

    ``kind`` is "raised" (its function raised), "died" (the process ended without a result, e.g.
    ``os._exit`` or a signal), "stopped" (killed by the launcher after another rank failed or
    the timeout). ``exception`` is the original exception when it could be pickled back.
    """

    rank: int
    kind: str
    summary: str
    remote_traceback: str = ""
    exception: BaseException | None = None

    @property
    def caused_by_peer(self) -> bool:
        """True when this rank only failed because another one did first."""
        return self.kind == "stopped" or isinstance(self.exception, PeerFailedError)

    @classmethod
    def from_exception(cls, rank: int, exc: BaseException) -> Failure:
        """Describe an exception raised by rank ``rank``'s function (in that rank's process)."""
        text = "".join(traceback.format_exception(exc))
        try:
            pickle.loads(pickle.dumps(exc))
            carried: BaseException | None = exc
        except Exception:  # noqa: BLE001 - any unpicklable exception is reported by its text only
            carried = None
        return cls(rank, "raised", f"{type(exc).__name__}: {exc}", text, carried)


class RankFailedError(CommError):
    """A launched rank failed; ``rank`` is the first that failed on its own, ``failures`` all of them."""

    def __init__(self, failures: dict[int, Failure]) -> None:
        if not failures:
            raise ValueError("RankFailedError needs at least one failure")
        own = [f for f in failures.values() if not f.caused_by_peer]
        first = own[0] if own else next(iter(failures.values()))
        self.rank: int = first.rank
        self.failure: Failure = first
        self.exception: BaseException | None = first.exception
        self.failures: dict[int, Failure] = dict(failures)
        others = sorted(r for r in failures if r != first.rank)
        message = f"rank {first.rank} {first.kind}: {first.summary}"
        if others:
            message += f" (ranks {others} failed after it)"
        if first.remote_traceback:
            message += f"\n\n--- traceback of rank {first.rank} ---\n{first.remote_traceback}"
        super().__init__(message)

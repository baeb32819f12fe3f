"""Non-blocking collectives: each rank's *communication lane*, a FIFO stream with its own channel and clock.

``group.iall_reduce(x)``, ``group.ireduce_scatter(x)`` and ``group.iall_gather(x)`` check their
arguments with the other ranks at once (as the blocking collectives do), then queue the collective
on the rank's lane and return a :class:`~mlsys_lib.comm.group.Request`. The lane runs its
collectives one at a time in the order issued (every rank issues the same ones in the same order,
as on a NCCL stream), on their own channel, so their messages never match a user's or a blocking
collective's. The algorithm is the blocking ring's own schedule (``ring``'s ``*_steps``): a
generator that yields each request before waiting on it. The lane resumes it only when that
request's ``test()`` says the wait will not block, so it advances as far as the messages that have
arrived allow, whenever the rank calls ``group.progress()`` or tests a request of the lane
(``test()``); ``wait()`` runs the lane until that collective is done. Issuing only queues: call
``progress()`` after issuing (DDP does after each layer's backward) to put the first messages on
the wire. There is no progress thread (as in an MPI
without asynchronous progress): between these calls a collective's messages wait.

The clock. The lane has its own clock and ports (a second :class:`~mlsys_lib.comm.group.Trace`): a
collective starts at max(the rank's clock when it was issued, the end of the lane's previous
collective), and its messages are timed on the lane exactly as the blocking collective's are on the
rank's clock, so it lasts the same closed form. ``wait()`` moves the rank's clock to max(its clock,
the collective's end). In between, the rank's clock moves only by its own work
(``group.compute(seconds)``, ``reduce_local``, point-to-point messages, blocking collectives): a
collective issued before some compute overlaps with it, and the step costs about max(compute,
communication) instead of their sum. Bytes and messages the lane sends and receives count in the
group's ``bytes_sent``, ``bytes_received``, ``messages_sent`` and ``messages_received``.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from .messages import Request, Trace
    from .ring import Steps


@dataclass
class LaneEntry:
    """One collective on the lane: its schedule, and its times in seconds on the lane clock."""

    name: str
    steps: Steps
    result: Callable[[], np.ndarray]
    issued_at: float
    started_at: float | None = None
    ended_at: float | None = None
    waiting_on: Request | None = None

    @property
    def done(self) -> bool:
        return self.ended_at is not None


class Lane:
    """The queue of one rank's non-blocking collectives and the lane's :class:`Trace` (clock, ports, bytes)."""

    def __init__(self, trace: Trace) -> None:
        self.trace = trace
        self._queue: deque[LaneEntry] = deque()
        self.history: list[LaneEntry] = []  # every collective run, in order (for timelines)

    def issue(self, entry: LaneEntry) -> None:
        """Queue ``entry``; it starts at the next :meth:`progress` or :meth:`finish`."""
        self._queue.append(entry)

    def progress(self) -> None:
        """Advance the queued collectives, in order, as far as they go without blocking."""
        while self._queue and self._advance(self._queue[0], block=False):
            self._queue.popleft()

    def finish(self, entry: LaneEntry) -> None:
        """Run the lane, blocking, until ``entry`` (and every collective issued before it) is done."""
        while not entry.done:
            self._advance(self._queue[0], block=True)
            self._queue.popleft()

    def _advance(self, entry: LaneEntry, block: bool) -> bool:
        """Resume ``entry``'s schedule while its next wait would not block (or ever, if ``block``); True when done."""
        if entry.started_at is None:
            self.trace.clock = max(self.trace.clock, entry.issued_at)
            entry.started_at = self.trace.clock
            self.history.append(entry)
            entry.waiting_on = next(entry.steps, None)
        while entry.waiting_on is not None:
            if not block and not entry.waiting_on.test():
                return False
            entry.waiting_on = next(entry.steps, None)  # the schedule waits on it, then runs to its next wait
        entry.ended_at = self.trace.clock
        return True

    @property
    def idle(self) -> bool:
        """True when no collective is queued or running."""
        return not self._queue

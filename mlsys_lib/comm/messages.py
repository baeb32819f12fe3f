"""What moves between a rank and its transport, and what the algorithms see of a group.

* :class:`Completion`: a transport's send or receive in flight (``wait()``, ``test()``);
* :class:`Request`: the same for the user (an isend, an irecv, a non-blocking collective);
* :class:`Trace`: a rank's logical clock, port availability, byte and message counters;
* :class:`GroupView`: the part of a ``ProcessGroup`` the collective algorithms use (``ring``,
  ``tree``, ``naive``, ``pairwise``, ``rooted``, ``collectives``), so they do not import ``group``,
  which imports them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np


class Completion:
    """A transport operation in flight: ``wait()`` blocks until it is done and returns its result;
    ``test()`` says, without blocking, whether ``wait()`` would return at once."""

    def __init__(self, wait: Callable[[], Any], test: Callable[[], bool]) -> None:
        self.wait, self.test = wait, test


@dataclass
class Trace:
    """A rank's logical clock (s), port availability (s), byte and message counters."""

    clock: float = 0.0
    send_free: float = 0.0
    recv_free: float = 0.0
    bytes_sent: int = 0
    bytes_received: int = 0
    messages_sent: int = 0
    messages_received: int = 0

    def reset(self) -> None:
        """Back to time 0 with nothing counted."""
        self.clock = self.send_free = self.recv_free = 0.0
        self.bytes_sent = self.bytes_received = self.messages_sent = self.messages_received = 0


class Request:
    """A non-blocking send, receive or collective; :meth:`wait` finishes it (and returns the received array)."""

    def __init__(self, finish: Callable[[], np.ndarray | None], ready: Callable[[], bool]) -> None:
        self._finish: Callable[[], np.ndarray | None] | None = finish
        self._ready = ready
        self._result: np.ndarray | None = None

    def test(self) -> bool:
        """True when :meth:`wait` would return without blocking (it does not finish the request)."""
        return self._finish is None or self._ready()

    def wait(self) -> np.ndarray | None:
        """Block until done; a receive returns its array, a send None. Calling it again is free."""
        if self._finish is not None:
            finish, self._finish = self._finish, None
            self._result = finish()
        return self._result


class GroupView(Protocol):
    """A rank's view of its group, as the collective algorithms use it (see ``group.ProcessGroup``)."""

    rank: int
    world_size: int

    def isend(self, x: np.ndarray, dst: int, tag: int = 0) -> Request: ...

    def irecv(self, src: int, out: np.ndarray | None = None, tag: int = 0) -> Request: ...

    def send(self, x: np.ndarray, dst: int, tag: int = 0) -> None: ...

    def recv(self, src: int, out: np.ndarray | None = None, tag: int = 0) -> np.ndarray: ...

    def reduce_local(self, acc: np.ndarray, x: np.ndarray, op: str = "sum") -> np.ndarray: ...

    def all_gather_object(self, obj: Any) -> list[Any]: ...

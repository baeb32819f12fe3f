"""The "sim" backend's transport: one OS process per rank, pipes for headers, shared memory for payloads.

Every ordered pair of ranks has a one-way pipe that carries small pickled tuples:

* ``("data", key, segment, header)``: a message; its payload waits in the sender's shared-memory
  ``segment``, which the receiver maps and copies out of. Payloads of at most ``INLINE_BYTES``
  bytes travel in the pipe instead, as ``bytes`` in place of the segment name (like MPI's "eager"
  protocol for small messages: one pipe message instead of a round trip);
* ``("free", None, segment)``: the receiver has copied the payload out; the sender may reuse it;
* ``("ctl", None, obj)``: a small object of an all-gather (argument checks, barrier).

Sends are eager: the payload is copied into shared memory and ``start_send`` returns. A blocking
read also watches the launcher's abort pipe, so a rank waiting on a failed peer raises
:class:`~mlsys_lib.comm.errors.PeerFailedError` at once; a peer that exits closes its pipes, which
readers see as end of file.
"""

from __future__ import annotations

from collections import defaultdict, deque
from collections.abc import Callable
from multiprocessing.connection import Connection, wait
from multiprocessing.shared_memory import SharedMemory
from typing import Any

import numpy as np

from .errors import PeerFailedError
from .group import Header
from .shm import SegmentPool, attach

INLINE_BYTES = 2048


class SimIncoming:
    """A received header; its payload is inline (bytes) or still in the sender's segment (a name)."""

    def __init__(self, transport: SimTransport, src: int, payload: str | bytes, header: Header) -> None:
        self.header = header
        self._transport, self._src, self._payload = transport, src, payload

    def read_into(self, out: np.ndarray) -> None:
        """Copy the payload into ``out``; a segment is then given back to the sender."""
        if isinstance(self._payload, bytes):
            np.copyto(out.reshape(-1), np.frombuffer(self._payload, out.dtype, out.size))
            return
        shm = self._transport.mapped(self._payload)
        np.copyto(out.reshape(-1), np.ndarray((out.size,), out.dtype, buffer=shm.buf))
        self._transport.give_back(self._src, self._payload)


def _done() -> None:
    """An eager send is complete when it returns."""


class SimTransport:
    """One rank's end of the pipes and its shared-memory segments (see the module docstring)."""

    name = "sim"

    def __init__(self, rank: int, world_size: int, token: str, inbox: dict[int, Connection],
                 outbox: dict[int, Connection], abort: Connection) -> None:
        self.rank, self.world_size = rank, world_size
        self._inbox, self._outbox, self._abort = inbox, outbox, abort
        self._pool = SegmentPool(token, rank)
        self._mapped: dict[str, SharedMemory] = {}
        self._stash: dict[tuple[int, str, Any], deque[tuple]] = defaultdict(deque)
        self._ended: set[int] = set()

    # ------------------------------------------------------------ Transport
    def start_send(self, payload: np.ndarray, dst: int, key: tuple[int, int],
                   header: Header) -> Callable[[], None]:
        if payload.nbytes <= INLINE_BYTES:
            self.post(dst, ("data", key, payload.tobytes(), header))
            return _done
        if not self._pool.has_free(payload.nbytes):
            self._collect_frees()
        shm = self._pool.take(payload.nbytes)
        np.copyto(np.ndarray(payload.shape, payload.dtype, buffer=shm.buf), payload)
        self.post(dst, ("data", key, shm.name, header))
        return _done

    def start_recv(self, src: int, key: tuple[int, int]) -> Callable[[], SimIncoming]:
        def arrived() -> SimIncoming:
            _, _, payload, header = self._next(src, "data", key)
            return SimIncoming(self, src, payload, header)
        return arrived

    def exchange(self, obj: Any) -> list[Any]:
        for dst in self._outbox:
            self.post(dst, ("ctl", None, obj))
        gathered = [obj] * self.world_size
        for src in self._inbox:
            gathered[src] = self._next(src, "ctl", None)[2]
        return gathered

    def barrier(self) -> None:
        self.exchange(None)

    # ------------------------------------------------------------ pipes
    def post(self, dst: int, message: tuple) -> None:
        """Write one small message to rank ``dst``'s pipe."""
        try:
            self._outbox[dst].send(message)
        except OSError as exc:  # BrokenPipeError: the reader is gone
            raise PeerFailedError(f"rank {self.rank} cannot reach rank {dst}: it has exited or failed") from exc

    def give_back(self, src: int, segment: str) -> None:
        """Tell rank ``src`` that its ``segment`` is free again (unless it has already exited)."""
        try:
            self._outbox[src].send(("free", None, segment))
        except OSError:  # the sender finished and left: it needs the segment no more
            pass

    def mapped(self, segment: str) -> SharedMemory:
        """The sender's segment ``segment``, mapped once and kept."""
        if segment not in self._mapped:
            self._mapped[segment] = attach(segment)
        return self._mapped[segment]

    def _file(self, src: int, message: tuple) -> None:
        kind, key = message[0], message[1]
        if kind == "free":
            self._pool.give_back(message[2])
        else:
            self._stash[(src, kind, key)].append(message)

    def _next(self, src: int, kind: str, key: Any) -> tuple:
        """The next message of ``kind`` and ``key`` from ``src``, waiting for it (abort-aware)."""
        waiting = self._stash[(src, kind, key)]
        conn = self._inbox[src]
        while not waiting:
            if conn not in wait([conn, self._abort]):
                try:
                    reason = self._abort.recv()
                except EOFError:
                    reason = "the launcher is gone"
                raise PeerFailedError(f"rank {self.rank} stopped waiting for rank {src}: {reason}")
            try:
                self._file(src, conn.recv())
            except EOFError:
                raise PeerFailedError(f"rank {src} exited before sending what rank {self.rank} waits for "
                                      f"(it failed, or it sent fewer messages)") from None
        return waiting.popleft()

    def _collect_frees(self) -> None:
        """Read, without waiting, whatever the peers have written (to learn of freed segments)."""
        for src, conn in self._inbox.items():
            while src not in self._ended and conn.poll():
                try:
                    self._file(src, conn.recv())
                except EOFError:
                    self._ended.add(src)

    def close(self) -> None:
        """Unmap the segments and close the pipes."""
        self._pool.close()
        for shm in self._mapped.values():
            shm.close()
        for conn in (*self._inbox.values(), *self._outbox.values(), self._abort):
            conn.close()

"""The "sim" backend's transport: one OS process per rank, pipes for headers, shared memory for payloads.

Every ordered pair of ranks has a one-way pipe that carries small pickled tuples:

* ``("data", key, segment, header)``: a message; its payload waits in the sender's shared-memory
  ``segment``, which the receiver maps (once), copies out of, and releases for the sender to reuse
  by clearing a flag in it (see ``shm``: no message back, so the sender is not woken up). Payloads
  of at most ``INLINE_BYTES`` bytes travel in the pipe instead, as ``bytes`` in place of the
  segment name (small messages need no segment);
* ``("ctl", None, obj)``: a small object of an all-gather (argument checks, barrier);
* ``("posted", key)``: under the "rendezvous" protocol, the receiver has started a receive on ``key``.

The payload is always copied out of the caller's array at once. Under the "eager" protocol a send
is then complete; under "rendezvous" its ``wait`` returns only once the receiver has started the
matching receive (the n-th receive a rank starts from a peer on a key matches the n-th message the
peer sends it on that key), so code that only works because sends are buffered deadlocks, as on MPI.

A rank that has to wait (for a message, for a receive to be posted, in a barrier) reads every pipe
meanwhile, and after ``REPORT_AFTER_S`` tells the launcher what it waits for, with its counts of
messages sent and receives started. When every rank still running waits and none of those counts
can satisfy any of them, no rank can ever move again: the launcher reports the deadlock (see
``sim_launcher``).

**Failures.** A blocking read also watches the launcher's pipe, on which the launcher writes
``("returned", r)`` when rank r has returned its result and ``("abort", first, reason)`` at the
first failure, naming the rank that failed first: the rank raises
:class:`~mlsys_lib.comm.errors.PeerFailedError` at once. A peer that exits closes its pipes, which
readers see as end of file (and writers as a broken pipe), but that does not say *why* it exited:
it may have failed only because another rank failed first (it was waiting for that rank), and
blaming it would hide the cause. So a rank that needs a peer which has exited waits for the
launcher's word about it, which always comes, since the launcher watches every process: the abort
(raise naming the first rank that failed) or "returned" (the peer sent fewer messages than this
rank receives: raise naming the peer). Every rank's error then names the same first failure.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable
from multiprocessing.connection import Connection, wait
from multiprocessing.shared_memory import SharedMemory
from typing import Any, NoReturn

import numpy as np

from .errors import PeerFailedError
from .group import PROTOCOLS, Header
from .messages import Completion
from .shm import SegmentPool, attach, payload_view, release

INLINE_BYTES = 2048
REPORT_AFTER_S = 0.005  # a rank waiting this long tells the launcher what it waits for

# What a blocked rank waits for (reported to the launcher):
#   ("recv", src, kind, key, n): the n-th message of kind ("data" or "ctl") and key from src;
#   ("send", dst, key, n, nbytes): dst to start its n-th receive on key from this rank (rendezvous).
Wait = tuple


class SimIncoming:
    """A received header; its payload is inline (bytes) or still in the sender's segment (a name)."""

    def __init__(self, transport: SimTransport, body: str | bytes, header: Header) -> None:
        self.header = header
        self._transport, self._body = transport, body

    def read_into(self, out: np.ndarray) -> None:
        """Copy the payload into ``out``; a segment is then released for the sender to reuse."""
        if isinstance(self._body, bytes):
            np.copyto(out.reshape(-1), np.frombuffer(self._body, out.dtype, out.size))
            return
        shm = self._transport.mapped(self._body)
        np.copyto(out.reshape(-1), payload_view(shm, out.dtype, out.size))
        release(shm)


_SENT = Completion(lambda: None, lambda: True)  # an eager send is complete when it returns


class SimTransport:
    """One rank's end of the pipes and its shared-memory segments (see the module docstring)."""

    name = "sim"

    def __init__(self, rank: int, world_size: int, token: str, inbox: dict[int, Connection],
                 outbox: dict[int, Connection], launcher: Connection, report: Connection | None = None,
                 protocol: str = "eager") -> None:
        if protocol not in PROTOCOLS:
            raise ValueError(f"unknown protocol {protocol!r}: expected one of {', '.join(PROTOCOLS)}")
        self.rank, self.world_size, self.protocol = rank, world_size, protocol
        self._inbox, self._outbox, self._launcher, self._report = inbox, outbox, launcher, report
        self._source = {conn: src for src, conn in inbox.items()}
        self._pool = SegmentPool(token, rank)
        self._mapped: dict[str, SharedMemory] = {}
        self._stash: dict[tuple[int, str, Any], dict[int, tuple]] = defaultdict(dict)  # by arrival number
        self._arrived: Counter = Counter()   # (src, kind, key): messages filed
        self._taken: Counter = Counter()     # (src, kind, key): receives started (the n-th takes message n)
        self._sent: Counter = Counter()      # (dst, kind, key): messages sent
        self._posted_at: Counter = Counter()  # (dst, key): receives dst has started from this rank (rendezvous)
        self._ended: set[int] = set()        # peers whose pipe has closed
        self._returned: set[int] = set()     # peers the launcher says returned their result

    # ------------------------------------------------------------ Transport
    def start_send(self, payload: np.ndarray, dst: int, key: tuple[int, int],
                   header: Header) -> Completion:
        if payload.nbytes <= INLINE_BYTES:
            self._send_data(dst, key, payload.tobytes(), header)
        else:
            shm = self._pool.take(payload.nbytes)
            np.copyto(payload_view(shm, payload.dtype, payload.size), payload.reshape(-1))
            self._send_data(dst, key, shm.name, header)
        if self.protocol == "eager":
            return _SENT
        n, nbytes = self._sent[(dst, "data", key)], payload.nbytes

        def posted() -> bool:
            return self._posted_at[(dst, key)] >= n

        def matched() -> None:
            self._await(dst, posted, ("send", dst, key, n, nbytes))
        return Completion(matched, lambda: self._poll() or posted())

    def start_recv(self, src: int, key: tuple[int, int]) -> Completion:
        self._taken[(src, "data", key)] += 1
        n = self._taken[(src, "data", key)]
        if self.protocol == "rendezvous":
            self._tell(src, ("posted", key))

        def arrived() -> SimIncoming:
            _, _, body, header = self._take(src, "data", key, n)
            return SimIncoming(self, body, header)
        return Completion(arrived, lambda: self._poll() or n in self._stash[(src, "data", key)])

    def exchange(self, obj: Any) -> list[Any]:
        for dst in self._outbox:
            self.post(dst, ("ctl", None, obj))
            self._sent[(dst, "ctl", None)] += 1
        gathered = [obj] * self.world_size
        for src in self._inbox:
            self._taken[(src, "ctl", None)] += 1
            gathered[src] = self._take(src, "ctl", None, self._taken[(src, "ctl", None)])[2]
        return gathered

    def barrier(self) -> None:
        self.exchange(None)

    # ------------------------------------------------------------ pipes
    def _send_data(self, dst: int, key: tuple[int, int], body: str | bytes, header: Header) -> None:
        self.post(dst, ("data", key, body, header))
        self._sent[(dst, "data", key)] += 1

    def post(self, dst: int, message: tuple) -> None:
        """Write one small message to rank ``dst``'s pipe."""
        try:
            self._outbox[dst].send(message)
        except OSError:  # BrokenPipeError: the reader is gone
            self._peer_exited(dst, f"sending to rank {dst}", f"reading what rank {self.rank} sends it")

    def _tell(self, dst: int, message: tuple) -> None:
        """Write a bookkeeping message to ``dst``, unless it has exited (then it needs it no more)."""
        try:
            self._outbox[dst].send(message)
        except OSError:
            pass

    def mapped(self, segment: str) -> SharedMemory:
        """The sender's segment ``segment``, mapped once and kept."""
        if segment not in self._mapped:
            self._mapped[segment] = attach(segment)
        return self._mapped[segment]

    def _file(self, src: int, message: tuple) -> None:
        kind, key = message[0], message[1]
        if kind == "posted":
            self._posted_at[(src, key)] += 1
        else:
            self._arrived[(src, kind, key)] += 1
            self._stash[(src, kind, key)][self._arrived[(src, kind, key)]] = message

    def _read(self, src: int) -> None:
        """File one message from ``src`` (its pipe is readable); end of file marks ``src`` ended."""
        try:
            self._file(src, self._inbox[src].recv())
        except EOFError:
            self._ended.add(src)

    def _take(self, src: int, kind: str, key: Any, n: int) -> tuple:
        """Message number ``n`` of ``kind`` and ``key`` from ``src``, waiting for it."""
        self._await(src, lambda: n in self._stash[(src, kind, key)], ("recv", src, kind, key, n))
        return self._stash[(src, kind, key)].pop(n)

    def _await(self, peer: int, ready: Callable[[], bool], waiting_for: Wait) -> None:
        """Read the pipes until ``ready()``; ``peer`` is the rank that can make it so.

        Raises PeerFailedError when the launcher aborts the run or ``peer`` has exited first.
        """
        reported = False
        doing = f"waiting for rank {peer}"
        while not ready():
            if peer in self._ended:
                self._peer_exited(peer, doing, f"receiving what rank {self.rank} sends it" if waiting_for[0] == "send"
                                  else f"sending what rank {self.rank} waits for")
            live = [conn for src, conn in self._inbox.items() if src not in self._ended]
            readable = wait([*live, self._launcher], None if reported else REPORT_AFTER_S)
            if not readable:
                self._report_blocked(waiting_for)
                reported = True
                continue
            for conn in readable:
                if conn is self._launcher:
                    self._hear_launcher(doing)
                else:
                    self._read(self._source[conn])

    def _hear_launcher(self, doing: str) -> None:
        """Read one message of the launcher: file a peer that returned; raise PeerFailedError on an abort."""
        try:
            message = self._launcher.recv()
        except EOFError:
            message = ("abort", None, "the launcher is gone")
        if message[0] == "returned":
            self._returned.add(message[1])
            return
        _, first, reason = message
        raise PeerFailedError(f"rank {self.rank} stopped {doing}: {reason}", first)

    def _peer_exited(self, peer: int, doing: str, missing: str) -> NoReturn:
        """``peer`` has exited while this rank needs it: raise PeerFailedError, once the launcher has said why.

        Its closed pipe does not say whether it failed on its own, or because another rank failed first,
        or returned: the launcher's abort names the first rank that failed (see the module docstring)."""
        while peer not in self._returned:
            self._hear_launcher(doing)
        raise PeerFailedError(f"rank {peer} returned before {missing} (it exchanged fewer messages)", peer)

    def _report_blocked(self, waiting_for: Wait) -> None:
        """Tell the launcher what this rank waits for, with what it has sent and which receives it has started."""
        if self._report is None:
            return
        started = {(src, key): n for (src, kind, key), n in self._taken.items() if kind == "data"}
        try:
            self._report.send(("blocked", waiting_for, dict(self._sent), started))
        except OSError:  # the launcher is gone; its pipe says so
            pass

    def _poll(self) -> None:
        """Read, without waiting, whatever the peers have written (messages, posted receives): ``test()``."""
        for src, conn in self._inbox.items():
            while src not in self._ended and conn.poll():
                self._read(src)

    def close(self) -> None:
        """Unmap the segments and close the pipes."""
        self._pool.close()
        for shm in self._mapped.values():
            shm.close()
        for conn in (*self._inbox.values(), *self._outbox.values(), self._launcher):
            conn.close()

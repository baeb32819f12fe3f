"""``ProcessGroup``: point-to-point messages, the α-β clock, and the collectives, for any backend.

A backend is a :class:`Transport`: it moves one array from a rank to another and can all-gather a
small Python object (used to check that the ranks of a collective agree). Everything else is here,
written once: argument checks, the logical clock and byte counters, and (in ``collectives``) the
algorithms, which only call :meth:`ProcessGroup.isend` / :meth:`ProcessGroup.recv` /
:meth:`ProcessGroup.reduce_local`, exactly as a student's own algorithm would.

The clock (seconds of the :class:`~mlsys_lib.comm.cost.CostModel`, not wall time), per rank:

* a send of n bytes starts at ``s = max(clock, end of this rank's previous send)`` and takes
  ``α + nβ``; ``send`` (or ``wait`` on an ``isend``) moves the clock to ``s + α + nβ``;
* a receive moves the clock to ``max(clock, arrival)``, ``arrival = max(s, end of this rank's
  previous receive) + α + nβ`` (one message at a time on the way in, in the order received);
* ``reduce_local`` of n bytes adds ``nγ``; ``compute(seconds)`` adds local work; ``barrier`` and the
  agreement checks cost nothing;
* the non-blocking collectives (:meth:`ProcessGroup.iall_reduce`, ``ireduce_scatter``,
  ``iall_gather``) run on a second clock, the rank's communication lane, and join the rank's clock
  when waited on (see ``lane``): communication overlaps with compute.

The clock is the same under both send protocols (:data:`PROTOCOLS`): "eager", where a send
completes at once (the payload is buffered), and "rendezvous", where it completes only once the
receiver has posted the matching ``recv``/``irecv`` (MPI's synchronous send, what MPI does with
large messages). Every request of ``isend``/``irecv`` must be waited on before the rank's function
returns (:meth:`ProcessGroup.check_finished`, which ``launch`` calls).
"""

from __future__ import annotations

import copy
import itertools
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import numpy as np

from . import collectives
from .blocks import as_array
from .cost import CostModel
from .errors import UnfinishedRequestError
from .lane import Lane, LaneEntry
from .messages import Completion, Request, Trace
from .ops import check_op, combine

MAX_TAG = 16383
COLLECTIVE_CHANNEL = 1  # the collectives' messages never match a user's send/recv (channel 0)
LANE_CHANNEL = 2  # nor do the non-blocking collectives' (see ``lane``)
PROTOCOLS = ("eager", "rendezvous")  # when a send completes: at once, or once its receive is posted

Header = tuple[str, tuple[int, ...], float]  # (dtype.str, shape, send time in clock seconds)


class Incoming(Protocol):
    """A message that has arrived: its header, and a way to copy its payload out."""

    header: Header

    def read_into(self, out: np.ndarray) -> None:
        """Copy the payload into ``out`` (C-contiguous, the header's dtype and size)."""


class Transport(Protocol):
    """What a backend provides: ordered point-to-point messages between ranks, and an object all-gather.

    Messages between one pair of ranks on one ``key`` = (channel, tag) arrive in the order sent, and
    match the receives in the order these were started. ``protocol`` is one of :data:`PROTOCOLS`.
    """

    rank: int
    world_size: int
    name: str
    protocol: str

    def start_send(self, payload: np.ndarray, dst: int, key: tuple[int, int],
                   header: Header) -> Completion:
        """Start sending the C-contiguous ``payload``; its ``wait()`` returns once it is sent
        (under "rendezvous": once ``dst`` has started the receive that matches it)."""

    def start_recv(self, src: int, key: tuple[int, int]) -> Completion:
        """Start receiving the next message from ``src`` on ``key``; its ``wait()`` returns the
        :class:`Incoming`. ``test()`` may be exact only while this is the one receive in progress
        from ``src`` on ``key`` (the non-blocking collectives have at most one)."""

    def exchange(self, obj: Any) -> list[Any]:
        """All-gather one small picklable object per rank (list indexed by rank); not traced."""

    def barrier(self) -> None:
        """Return once every rank has called it; not traced."""


class ProcessGroup:
    """The ranks of one job, as seen from one of them (shaped like torch.distributed / MPI).

    ``rank`` in ``0..world_size-1``. Point-to-point: :meth:`send`, :meth:`recv`, :meth:`isend`,
    :meth:`irecv`, :meth:`barrier`. Collectives (every rank calls them in the same order):
    :meth:`broadcast`, :meth:`reduce`, :meth:`scatter`, :meth:`gather`, :meth:`all_gather`,
    :meth:`reduce_scatter`, :meth:`all_reduce`, :meth:`all_to_all`. Tracing: :attr:`clock`, :attr:`bytes_sent`,
    :attr:`bytes_received`, :attr:`messages_sent`, :attr:`messages_received`, :meth:`reset_trace`,
    :meth:`reduce_local`.
    """

    def __init__(self, transport: Transport, cost: CostModel | None = None) -> None:
        if cost is not None and not isinstance(cost, CostModel):
            raise TypeError(f"cost must be a CostModel, got {type(cost).__name__}")
        self._transport = transport
        self.cost: CostModel = cost if cost is not None else CostModel()
        self._channel = 0
        self._trace = Trace()
        self._pending: dict[int, str] = {}  # requests not waited on yet, shared with the collectives' view
        self._request_ids = itertools.count()
        self._lane = Lane(Trace())
        # The collectives run on a view with the same transport, clock and counters, on their own channel;
        # the non-blocking ones on a view with the lane's own channel and trace.
        collective = copy.copy(self)
        collective._channel = COLLECTIVE_CHANNEL
        collective._collective_group = collective
        self._collective_group = collective
        lane = copy.copy(collective)
        lane._channel, lane._trace = LANE_CHANNEL, self._lane.trace
        self._lane_group = lane

    # ---------------------------------------------------------------- identity and tracing
    @property
    def rank(self) -> int:
        """This process's rank, 0..world_size-1."""
        return self._transport.rank

    @property
    def world_size(self) -> int:
        """Number of ranks p."""
        return self._transport.world_size

    @property
    def backend(self) -> str:
        """"sim" or "mpi"."""
        return self._transport.name

    @property
    def protocol(self) -> str:
        """When a send completes: "eager" (at once) or "rendezvous" (once its receive is posted)."""
        return getattr(self._transport, "protocol", "eager")

    @property
    def clock(self) -> float:
        """This rank's logical time in seconds under :attr:`cost` (see the module docstring)."""
        return self._trace.clock

    @property
    def bytes_sent(self) -> int:
        """Payload bytes this rank has sent (user messages, collectives, non-blocking collectives)."""
        return self._trace.bytes_sent + self._lane.trace.bytes_sent

    @property
    def bytes_received(self) -> int:
        """Payload bytes this rank has received."""
        return self._trace.bytes_received + self._lane.trace.bytes_received

    @property
    def messages_sent(self) -> int:
        """Messages this rank has sent, each costing one α on the clock (an empty array is a message too)."""
        return self._trace.messages_sent + self._lane.trace.messages_sent

    @property
    def messages_received(self) -> int:
        """Messages this rank has received."""
        return self._trace.messages_received + self._lane.trace.messages_received

    @property
    def lane_history(self) -> list[tuple[str, float, float]]:
        """The non-blocking collectives finished since :meth:`reset_trace`: (name, start s, end s) on the lane."""
        return [(e.name, e.started_at, e.ended_at) for e in self._lane.history if e.done]

    def reset_trace(self) -> None:
        """Set the clocks and the byte and message counters to 0 (call it when no message is in flight)."""
        if not self._lane.idle:
            raise RuntimeError("reset_trace: a non-blocking collective is still in flight; wait() on it first")
        self._trace.reset()
        self._lane.trace.reset()
        self._lane.history.clear()

    def compute(self, seconds: float) -> None:
        """Charge ``seconds`` of local work (a layer's forward or backward, say) to this rank's clock.

        The non-blocking collectives' lane keeps running meanwhile: that is the overlap.
        """
        if not (isinstance(seconds, (int, float, np.floating)) and seconds >= 0 and np.isfinite(seconds)):
            raise ValueError(f"compute: seconds must be a finite number >= 0, got {seconds!r}")
        self._trace.clock += float(seconds)

    def reduce_local(self, acc: np.ndarray, x: np.ndarray, op: str = "sum") -> np.ndarray:
        """``acc <- op(acc, x)`` elementwise in place (``x`` of acc's shape); charges ``acc.nbytes · γ`` s.

        The local step of a reduction algorithm; returns ``acc``.
        """
        check_op(op, acc.dtype)
        if acc.shape != np.shape(x):
            raise ValueError(f"reduce_local: acc has shape {acc.shape} but x has shape {np.shape(x)}")
        combine(acc, x, op)
        self._trace.clock += self.cost.reduction(acc.nbytes)
        return acc

    # ---------------------------------------------------------------- point to point
    def _check_peer(self, peer: int, what: str) -> None:
        if not isinstance(peer, (int, np.integer)) or not 0 <= peer < self.world_size:
            raise ValueError(f"{what} must be a rank in 0..{self.world_size - 1}, got {peer!r}")
        if peer == self.rank:
            raise ValueError(f"{what}={peer} is this rank itself: a rank does not message itself")

    def _key(self, tag: int) -> tuple[int, int]:
        if not isinstance(tag, (int, np.integer)) or not 0 <= tag <= MAX_TAG:
            raise ValueError(f"tag must be an int in 0..{MAX_TAG}, got {tag!r}")
        return (self._channel, int(tag))

    def _request(self, finish: Callable[[], np.ndarray | None], description: str,
                 ready: Callable[[], bool]) -> Request:
        """A Request for ``finish``, listed as unfinished (``description``) until it is waited on."""
        pending, key = self._pending, next(self._request_ids)
        pending[key] = description

        def tracked() -> np.ndarray | None:
            pending.pop(key, None)
            return finish()
        return Request(tracked, ready)

    def _where(self, tag: int) -> str:
        inside = {COLLECTIVE_CHANNEL: ", inside a collective", LANE_CHANNEL: ", inside a non-blocking collective"}
        return f"tag {tag}" + inside.get(self._channel, "")

    def unfinished_requests(self) -> list[str]:
        """The requests of :meth:`isend`/:meth:`irecv` not waited on yet, described, oldest first."""
        return list(self._pending.values())

    def check_finished(self) -> None:
        """Raise :class:`UnfinishedRequestError` if a request of isend/irecv was never waited on.

        ``launch`` calls it when the rank's function returns: like MPI, every request must be
        completed (a send not waited on may not have left, a receive not waited on was lost).
        """
        unfinished = self.unfinished_requests()
        if unfinished:
            raise UnfinishedRequestError(
                f"rank {self.rank} returned with {len(unfinished)} request(s) never waited on: "
                f"{'; '.join(unfinished)}. Call .wait() on every request that isend/irecv return "
                f"before the function returns")

    def isend(self, x: np.ndarray, dst: int, tag: int = 0) -> Request:
        """Start sending array ``x`` (any shape and numeric dtype) to rank ``dst``; returns a Request.

        Do not write to ``x`` before ``wait()``: the sim backend copies it at once, but the MPI
        backend reads it until then. Every request must be waited on before the function returns.
        """
        self._check_peer(dst, "dst")
        key = self._key(tag)
        payload = np.require(as_array(x, "x"), requirements="C")  # keeps 0-d arrays 0-d
        trace = self._trace
        start = max(trace.clock, trace.send_free)
        done = start + self.cost.message(payload.nbytes)
        trace.send_free = done
        trace.bytes_sent += payload.nbytes
        trace.messages_sent += 1
        sending = self._transport.start_send(payload, int(dst), key, (payload.dtype.str, payload.shape, start))

        def finish() -> None:
            sending.wait()
            trace.clock = max(trace.clock, done)
        return self._request(finish, f"isend to rank {dst} ({self._where(tag)}, {payload.nbytes} bytes)",
                             sending.test)

    def send(self, x: np.ndarray, dst: int, tag: int = 0) -> None:
        """Send array ``x`` to rank ``dst`` (``isend(x, dst, tag).wait()``).

        Under the "rendezvous" protocol it returns only once ``dst`` has started the matching
        receive: two ranks that both send to each other before receiving deadlock, as on MPI.
        """
        self.isend(x, dst, tag).wait()

    def irecv(self, src: int, out: np.ndarray | None = None, tag: int = 0) -> Request:
        """Start receiving the next array from ``src`` with ``tag``; ``wait()`` returns it.

        ``out``: a C-contiguous writable array of the sender's dtype and size to receive into
        (it is returned, in its own shape); by default a new array of the sender's shape.
        """
        self._check_peer(src, "src")
        key = self._key(tag)
        if out is not None and not (isinstance(out, np.ndarray) and out.flags.c_contiguous and out.flags.writeable):
            raise ValueError("out must be a C-contiguous, writable numpy array")
        receiving = self._transport.start_recv(int(src), key)
        trace, cost = self._trace, self.cost

        def finish() -> np.ndarray:
            message = receiving.wait()
            dtype, shape, sent_at = message.header
            buf = np.empty(shape, np.dtype(dtype)) if out is None else out
            if buf.dtype != np.dtype(dtype) or buf.size != int(np.prod(shape)):
                raise ValueError(f"rank {self.rank} receives into out of dtype {buf.dtype} and size {buf.size}, "
                                 f"but rank {src} sent dtype {np.dtype(dtype)} and shape {tuple(shape)}")
            message.read_into(buf)
            arrival = max(sent_at, trace.recv_free) + cost.message(buf.nbytes)
            trace.recv_free = arrival
            trace.clock = max(trace.clock, arrival)
            trace.bytes_received += buf.nbytes
            trace.messages_received += 1
            return buf
        return self._request(finish, f"irecv from rank {src} ({self._where(tag)})", receiving.test)

    def recv(self, src: int, out: np.ndarray | None = None, tag: int = 0) -> np.ndarray:
        """Receive the next array from rank ``src`` (``irecv(src, out, tag).wait()``)."""
        result = self.irecv(src, out, tag).wait()
        assert result is not None  # a receive's wait() always returns its array
        return result

    def barrier(self) -> None:
        """Wait until every rank has reached the barrier (not traced)."""
        self._transport.barrier()

    def all_gather_object(self, obj: Any) -> list[Any]:
        """All-gather one small picklable object per rank, outside the trace (list indexed by rank)."""
        return self._transport.exchange(obj)

    # ---------------------------------------------------------------- collectives
    def broadcast(self, x: np.ndarray | None, root: int = 0, algorithm: str = "tree") -> np.ndarray:
        """Every rank gets the root's ``x`` (any shape). Non-roots pass None, or an array of the
        root's shape and dtype that is filled in place and returned."""
        return collectives.broadcast(self._collective_group, x, root, algorithm)

    def reduce(self, x: np.ndarray, root: int = 0, op: str = "sum", algorithm: str = "tree") -> np.ndarray | None:
        """``op`` over the ranks' ``x`` (same shape and dtype everywhere), at ``root``; None elsewhere."""
        return collectives.reduce(self._collective_group, x, root, op, algorithm)

    def scatter(self, x: np.ndarray | Sequence[np.ndarray] | None, root: int = 0,
                algorithm: str = "tree") -> np.ndarray:
        """Rank i gets chunk i of the root's data: a list of p arrays (any shapes, one dtype), or an
        array split along axis 0 like ``np.array_split(x, p)``. Non-roots' ``x`` is ignored."""
        return collectives.scatter(self._collective_group, x, root, algorithm)

    def gather(self, x: np.ndarray, root: int = 0, algorithm: str = "tree") -> np.ndarray | None:
        """The ranks' ``x`` concatenated along axis 0 in rank order, at ``root``; None elsewhere.
        Lengths along axis 0 may differ; the other dimensions and the dtype must agree."""
        return collectives.gather(self._collective_group, x, root, algorithm)

    def all_gather(self, x: np.ndarray, algorithm: str = "ring") -> np.ndarray:
        """:meth:`gather` with the result on every rank."""
        return collectives.all_gather(self._collective_group, x, algorithm)

    def reduce_scatter(self, x: np.ndarray, op: str = "sum", algorithm: str = "ring") -> np.ndarray:
        """Reduce the ranks' ``x`` (same shape), split along axis 0 like ``np.array_split``; rank i gets part i."""
        return collectives.reduce_scatter(self._collective_group, x, op, algorithm)

    def all_reduce(self, x: np.ndarray, op: str = "sum", algorithm: str = "ring") -> np.ndarray:
        """``op`` over the ranks' ``x`` (same shape and dtype everywhere), on every rank."""
        return collectives.all_reduce(self._collective_group, x, op, algorithm)

    def all_to_all(self, chunks: Sequence[np.ndarray], algorithm: str = "pairwise") -> list[np.ndarray]:
        """Send ``chunks[j]`` to rank j; return the list received, item i from rank i.

        ``chunks``: p arrays of one dtype (every rank the same dtype), of any shapes: the sizes may
        differ for every pair of ranks (MoE dispatch). ``algorithm``: "pairwise" or "ring".
        """
        return collectives.all_to_all(self._collective_group, chunks, algorithm)

    # ---------------------------------------------------------------- non-blocking collectives (see ``lane``)
    def iall_reduce(self, x: np.ndarray, op: str = "sum") -> Request:
        """Start the ring :meth:`all_reduce` of ``x`` (copied at once) on the lane; ``wait()`` returns the result."""
        return self._issue("iall_reduce", collectives.iall_reduce(self._lane_group, x, op), np.shape(x))

    def ireduce_scatter(self, x: np.ndarray, op: str = "sum") -> Request:
        """Start the ring :meth:`reduce_scatter` of ``x`` (copied at once) on the lane; ``wait()`` returns part i."""
        return self._issue("ireduce_scatter", collectives.ireduce_scatter(self._lane_group, x, op), np.shape(x))

    def iall_gather(self, x: np.ndarray) -> Request:
        """Start the ring :meth:`all_gather` of ``x`` (copied at once) on the lane; ``wait()`` returns the result."""
        return self._issue("iall_gather", collectives.iall_gather(self._lane_group, x), np.shape(x))

    def progress(self) -> None:
        """Advance the non-blocking collectives as far as the messages that have arrived allow (never blocks)."""
        self._lane.progress()

    def _issue(self, name: str, schedule: collectives.Schedule, shape: tuple[int, ...]) -> Request:
        steps, result = schedule
        entry = LaneEntry(name, steps, result, issued_at=self._trace.clock)
        lane, trace = self._lane, self._trace
        lane.issue(entry)

        def finish() -> np.ndarray:
            lane.finish(entry)
            trace.clock = max(trace.clock, entry.ended_at)
            return entry.result()

        def ready() -> bool:
            lane.progress()
            return entry.done
        return self._request(finish, f"{name} of shape {shape}", ready)

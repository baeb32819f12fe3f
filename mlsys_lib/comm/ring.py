"""Ring collectives: bandwidth optimal, every link busy at every step (the lecture's ring all-reduce).

Rank r sends to r+1 and receives from r−1 (mod p); the buffer is cut into p blocks.
Reduce-scatter, all-gather and all-reduce are written as *schedules*: generators that yield each
request before waiting on it (``*_steps``), so one algorithm serves the blocking collective
(:func:`run_blocking`) and the non-blocking one, which the rank's communication lane advances only
as far as its messages allow (see ``lane``).

* reduce_scatter: p−1 steps; at step s rank r sends block r−s−1 and adds the incoming block r−s−2
  into its own copy. Afterwards rank r holds block r fully reduced. (p−1)α + (p−1)/p·n(β + γ).
* all_gather: p−1 steps; at step s rank r forwards block r−s. (p−1)α + (p−1)/p·nβ.
* all_reduce = reduce_scatter + all_gather: 2(p−1)α + 2(p−1)/p·nβ + (p−1)/p·nγ; each rank sends
  and receives 2(p−1)/p·n bytes, independent of p for large p.
* broadcast = scatter (tree) + all_gather; reduce = reduce_scatter + gather (tree).
* all_to_all, store and forward: p−1 steps; at step s rank r passes to r+1 the chunks that rank
  r−s+1 started with and that have not arrived yet (p−s of them, nearest destination first); r+1
  keeps the first and forwards the rest. With p equal chunks of n/p bytes per rank:
  (p−1)α + (n/p)β·p(p−1)/2: as many messages as pairwise, but the chunk from i to j crosses
  (j−i) mod p links, so each rank sends (p−1)/2·n bytes instead of (p−1)/p·n.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from .blocks import block
from .tree import Tree

if TYPE_CHECKING:
    from .messages import GroupView

Steps = Iterator[Any]  # a schedule: yields each Request it is about to wait on
_TREE = Tree()


def run_blocking(steps: Steps) -> None:
    """Run a schedule to its end; the schedule itself waits on each request it yields."""
    for _ in steps:
        pass


class Ring:
    """Ring reduce-scatter and all-gather, and what the lecture builds from them."""

    def reduce_scatter_steps(self, g: GroupView, buf: np.ndarray, bounds: Sequence[int], op: str) -> Steps:
        p, r = g.world_size, g.rank
        incoming = np.empty(max(np.diff(bounds)), buf.dtype)
        for s in range(p - 1):
            sending = g.isend(block(buf, bounds, (r - s - 1) % p), (r + 1) % p)
            acc = block(buf, bounds, (r - s - 2) % p)
            receiving = g.irecv((r - 1) % p, out=incoming[:acc.size])
            yield receiving
            g.reduce_local(acc, receiving.wait(), op)
            yield sending
            sending.wait()

    def all_gather_steps(self, g: GroupView, buf: np.ndarray, bounds: Sequence[int]) -> Steps:
        p, r = g.world_size, g.rank
        for s in range(p - 1):
            sending = g.isend(block(buf, bounds, (r - s) % p), (r + 1) % p)
            receiving = g.irecv((r - 1) % p, out=block(buf, bounds, (r - s - 1) % p))
            yield receiving
            receiving.wait()
            yield sending
            sending.wait()

    def all_reduce_steps(self, g: GroupView, buf: np.ndarray, bounds: Sequence[int], op: str) -> Steps:
        yield from self.reduce_scatter_steps(g, buf, bounds, op)
        yield from self.all_gather_steps(g, buf, bounds)

    def reduce_scatter(self, g: GroupView, buf: np.ndarray, bounds: Sequence[int], op: str) -> None:
        run_blocking(self.reduce_scatter_steps(g, buf, bounds, op))

    def all_gather(self, g: GroupView, buf: np.ndarray, bounds: Sequence[int]) -> None:
        run_blocking(self.all_gather_steps(g, buf, bounds))

    def all_reduce(self, g: GroupView, buf: np.ndarray, bounds: Sequence[int], op: str) -> None:
        run_blocking(self.all_reduce_steps(g, buf, bounds, op))

    def all_to_all(self, g: GroupView, send: np.ndarray, send_bounds: Sequence[int],
                   recv: np.ndarray, recv_bounds: Sequence[int]) -> None:
        """Copy block j of rank i's ``send`` into block i of rank j's ``recv``, for every i ≠ j."""
        p, r = g.world_size, g.rank
        own = send_bounds[r + 1] - send_bounds[r]
        # the chunks for r+1, r+2, ..., r+p−1, nearest first (block r, this rank's own, rolled to the end)
        travelling = np.roll(send, -send_bounds[(r + 1) % p])[:send.size - own]
        for s in range(1, p):
            sending = g.isend(travelling, (r + 1) % p)
            arrived = g.recv((r - 1) % p)  # what rank r−s started with, first chunk for this rank
            sending.wait()
            mine = block(recv, recv_bounds, (r - s) % p)
            mine[:] = arrived[:mine.size]
            travelling = arrived[mine.size:]

    def broadcast(self, g: GroupView, buf: np.ndarray, bounds: Sequence[int], root: int) -> None:
        _TREE.scatter(g, buf, bounds, root)
        self.all_gather(g, buf, bounds)

    def reduce(self, g: GroupView, buf: np.ndarray, bounds: Sequence[int], root: int, op: str) -> None:
        self.reduce_scatter(g, buf, bounds, op)
        _TREE.gather(g, buf, bounds, root)

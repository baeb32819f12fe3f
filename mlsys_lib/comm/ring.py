"""Ring collectives: bandwidth optimal, every link busy at every step (the lecture's ring all-reduce).

Rank r sends to r+1 and receives from r−1 (mod p); the buffer is cut into p blocks.

* reduce_scatter: p−1 steps; at step s rank r sends block r−s−1 and adds the incoming block r−s−2
  into its own copy. Afterwards rank r holds block r fully reduced. (p−1)α + (p−1)/p·n(β + γ).
* all_gather: p−1 steps; at step s rank r forwards block r−s. (p−1)α + (p−1)/p·nβ.
* all_reduce = reduce_scatter + all_gather: 2(p−1)α + 2(p−1)/p·nβ + (p−1)/p·nγ; each rank sends
  and receives 2(p−1)/p·n bytes, independent of p for large p.
* broadcast = scatter (tree) + all_gather; reduce = reduce_scatter + gather (tree).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from .blocks import block
from .tree import Tree

if TYPE_CHECKING:
    from .group import ProcessGroup

_TREE = Tree()


class Ring:
    """Ring reduce-scatter and all-gather, and what the lecture builds from them."""

    def reduce_scatter(self, g: ProcessGroup, buf: np.ndarray, bounds: Sequence[int], op: str) -> None:
        p, r = g.world_size, g.rank
        incoming = np.empty(max(np.diff(bounds)), buf.dtype)
        for s in range(p - 1):
            sending = g.isend(block(buf, bounds, (r - s - 1) % p), (r + 1) % p)
            acc = block(buf, bounds, (r - s - 2) % p)
            g.reduce_local(acc, g.recv((r - 1) % p, out=incoming[:acc.size]), op)
            sending.wait()

    def all_gather(self, g: ProcessGroup, buf: np.ndarray, bounds: Sequence[int]) -> None:
        p, r = g.world_size, g.rank
        for s in range(p - 1):
            sending = g.isend(block(buf, bounds, (r - s) % p), (r + 1) % p)
            g.recv((r - 1) % p, out=block(buf, bounds, (r - s - 1) % p))
            sending.wait()

    def all_reduce(self, g: ProcessGroup, buf: np.ndarray, bounds: Sequence[int], op: str) -> None:
        self.reduce_scatter(g, buf, bounds, op)
        self.all_gather(g, buf, bounds)

    def broadcast(self, g: ProcessGroup, buf: np.ndarray, bounds: Sequence[int], root: int) -> None:
        _TREE.scatter(g, buf, bounds, root)
        self.all_gather(g, buf, bounds)

    def reduce(self, g: ProcessGroup, buf: np.ndarray, bounds: Sequence[int], root: int, op: str) -> None:
        self.reduce_scatter(g, buf, bounds, op)
        _TREE.gather(g, buf, bounds, root)

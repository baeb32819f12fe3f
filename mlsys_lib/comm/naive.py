"""Naive collectives: the root talks to every other rank in turn, one message after another.

Costs (n bytes, p ranks): broadcast (p−1)(α + nβ); reduce (p−1)(α + nβ + nγ) (the root receives
every vector, then adds them up); scatter and gather (p−1)α + (p−1)/p·nβ. The all-* collectives go
through rank 0 (:class:`~mlsys_lib.comm.rooted.ThroughRoot`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from .blocks import block
from .rooted import ThroughRoot

if TYPE_CHECKING:
    from .messages import GroupView


def _others(g: GroupView, root: int) -> list[int]:
    return [r for r in range(g.world_size) if r != root]


class Naive(ThroughRoot):
    """Linear ("flat tree") algorithms: p−1 sequential messages at the root."""

    def broadcast(self, g: GroupView, buf: np.ndarray, bounds: Sequence[int], root: int) -> None:
        if g.rank == root:
            for r in _others(g, root):
                g.send(buf, r)
        else:
            g.recv(root, out=buf)

    def reduce(self, g: GroupView, buf: np.ndarray, bounds: Sequence[int], root: int, op: str) -> None:
        if g.rank != root:
            g.send(buf, root)
            return
        others = _others(g, root)
        received = np.empty((len(others), buf.size), buf.dtype)
        for row, r in zip(received, others):
            g.recv(r, out=row)
        for row in received:
            g.reduce_local(buf, row, op)

    def scatter(self, g: GroupView, buf: np.ndarray, bounds: Sequence[int], root: int) -> None:
        if g.rank == root:
            for r in _others(g, root):
                g.send(block(buf, bounds, r), r)
        else:
            g.recv(root, out=block(buf, bounds, g.rank))

    def gather(self, g: GroupView, buf: np.ndarray, bounds: Sequence[int], root: int) -> None:
        if g.rank == root:
            for r in _others(g, root):
                g.recv(r, out=block(buf, bounds, r))
        else:
            g.send(block(buf, bounds, g.rank), root)

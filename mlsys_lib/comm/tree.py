"""Tree collectives: the minimum spanning tree (binomial tree) of the lecture, latency optimal.

Broadcast: "split the ranks into halves, send the message to the half without it, repeat in each
half" — ⌈log2 p⌉ rounds. Reduce runs the same tree bottom-up; scatter and gather send, at each
halving, only the blocks of the other half. Ranks are renumbered so that the root is virtual rank 0.
Costs (L = ⌈log2 p⌉): broadcast L(α + nβ); reduce L(α + nβ + nγ); scatter and gather Lα + (p−1)/p·nβ
(p a power of two and n divisible by p). The all-* collectives go through rank 0.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from .blocks import block, bounds_from_sizes
from .rooted import ThroughRoot

if TYPE_CHECKING:
    from .messages import GroupView


def halvings(v: int, p: int) -> list[tuple[int, int, int]]:
    """The halvings ``(lo, mid, hi)`` of virtual ranks [lo, hi) that contain v, from [0, p) down.

    At each, virtual rank ``lo`` holds the data of [lo, hi) and hands [mid, hi) to virtual rank ``mid``.
    """
    lo, hi, out = 0, p, []
    while hi - lo > 1:
        mid = (lo + hi + 1) // 2
        out.append((lo, mid, hi))
        lo, hi = (lo, mid) if v < mid else (mid, hi)
    return out


class Tree(ThroughRoot):
    """Binomial-tree broadcast, reduce, scatter and gather."""

    def broadcast(self, g: GroupView, buf: np.ndarray, bounds: Sequence[int], root: int) -> None:
        p, v = g.world_size, (g.rank - root) % g.world_size
        for lo, mid, _ in halvings(v, p):
            if v == lo:
                g.send(buf, (mid + root) % p)
            elif v == mid:
                g.recv((lo + root) % p, out=buf)

    def reduce(self, g: GroupView, buf: np.ndarray, bounds: Sequence[int], root: int, op: str) -> None:
        p, v = g.world_size, (g.rank - root) % g.world_size
        incoming = np.empty_like(buf)
        for lo, mid, _ in reversed(halvings(v, p)):
            if v == mid:
                g.send(buf, (lo + root) % p)
            elif v == lo:
                g.reduce_local(buf, g.recv((mid + root) % p, out=incoming), op)

    def scatter(self, g: GroupView, buf: np.ndarray, bounds: Sequence[int], root: int) -> None:
        p, v = g.world_size, (g.rank - root) % g.world_size
        vbuf, vbounds = _virtual_layout(buf, bounds, root, filled=v == 0)
        for lo, mid, hi in halvings(v, p):
            part = vbuf[vbounds[mid]:vbounds[hi]]
            if v == lo:
                g.send(part, (mid + root) % p)
            elif v == mid:
                g.recv((lo + root) % p, out=part)
        block(buf, bounds, g.rank)[:] = block(vbuf, vbounds, v)

    def gather(self, g: GroupView, buf: np.ndarray, bounds: Sequence[int], root: int) -> None:
        p, v = g.world_size, (g.rank - root) % g.world_size
        vbuf, vbounds = _virtual_layout(buf, bounds, root, filled=False)
        block(vbuf, vbounds, v)[:] = block(buf, bounds, g.rank)
        for lo, mid, hi in reversed(halvings(v, p)):
            part = vbuf[vbounds[mid]:vbounds[hi]]
            if v == mid:
                g.send(part, (lo + root) % p)
            elif v == lo:
                g.recv((mid + root) % p, out=part)
        if v == 0:
            buf[:] = np.roll(vbuf, bounds[root])


def _virtual_layout(buf: np.ndarray, bounds: Sequence[int], root: int,
                    filled: bool) -> tuple[np.ndarray, list[int]]:
    """A buffer with the blocks in virtual-rank order (the root's block first), and its bounds.

    ``filled``: copy ``buf``'s blocks in (at the root of a scatter); else leave it uninitialized.
    Subtrees are then contiguous, so each halving moves one message.
    """
    sizes = np.diff(bounds)
    vbounds = bounds_from_sizes(np.roll(sizes, -root))
    vbuf = np.roll(buf, -bounds[root]) if filled else np.empty_like(buf)
    return vbuf, vbounds

"""The all-* collectives built from rooted primitives through rank 0 (used by "tree" and "naive").

all_reduce = reduce + broadcast, all_gather = gather + broadcast, reduce_scatter = reduce + scatter
(the lecture: "all-gather is gather followed by broadcast", and so on). A subclass provides the four
primitives; every method works in place on a flat buffer ``buf`` of shape (n,) cut by ``bounds``
(p+1 element offsets, block i belongs to rank i).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from .messages import GroupView


class ThroughRoot(ABC):
    """Rooted primitives (abstract) and the three all-* collectives composed from them at rank 0."""

    @abstractmethod
    def broadcast(self, g: GroupView, buf: np.ndarray, bounds: Sequence[int], root: int) -> None:
        """Copy the root's ``buf`` into every rank's ``buf``."""

    @abstractmethod
    def reduce(self, g: GroupView, buf: np.ndarray, bounds: Sequence[int], root: int, op: str) -> None:
        """Leave ``op`` over the ranks' ``buf`` in the root's ``buf`` (others' ``buf`` is scratch)."""

    @abstractmethod
    def scatter(self, g: GroupView, buf: np.ndarray, bounds: Sequence[int], root: int) -> None:
        """Copy block i of the root's ``buf`` into block i of rank i's ``buf``."""

    @abstractmethod
    def gather(self, g: GroupView, buf: np.ndarray, bounds: Sequence[int], root: int) -> None:
        """Copy block i of rank i's ``buf`` into block i of the root's ``buf``."""

    def all_gather(self, g: GroupView, buf: np.ndarray, bounds: Sequence[int]) -> None:
        """Every rank gets every block: gather to rank 0, then broadcast."""
        self.gather(g, buf, bounds, 0)
        self.broadcast(g, buf, bounds, 0)

    def reduce_scatter(self, g: GroupView, buf: np.ndarray, bounds: Sequence[int], op: str) -> None:
        """Rank i gets block i of the reduction: reduce to rank 0, then scatter."""
        self.reduce(g, buf, bounds, 0, op)
        self.scatter(g, buf, bounds, 0)

    def all_reduce(self, g: GroupView, buf: np.ndarray, bounds: Sequence[int], op: str) -> None:
        """Every rank gets the reduction: reduce to rank 0, then broadcast."""
        self.reduce(g, buf, bounds, 0, op)
        self.broadcast(g, buf, bounds, 0)

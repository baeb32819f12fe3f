"""The loop-nest IR that schedules rewrite: loops, and the splits and fuses that relate them.

A :class:`Loop` is ``for name in range(extent)``, spatial (an output index) or reduce, maybe marked
parallel / vectorize / unroll. A :class:`Split` says ``parent = outer * factor + inner``; a
:class:`Fuse` says ``fused = outer * inner.extent + inner``. :mod:`.schedule` builds them,
:mod:`.codegen` turns them into Python loops.
"""

from __future__ import annotations

from dataclasses import dataclass

MAX_UNROLL = 64


class ScheduleError(ValueError):
    """A schedule primitive that would change what is computed, or that the code generator cannot emit."""


@dataclass(eq=False)
class Loop:
    """One loop of a stage's nest: ``for name in range(extent)``, spatial or reduce, maybe annotated."""
    name: str
    extent: int
    kind: str
    annotation: str | None = None

    def __repr__(self):
        note = f", {self.annotation}" if self.annotation else ""
        return f"Loop({self.name}, {self.extent}, {self.kind}{note})"


@dataclass(frozen=True, eq=False)
class Split:
    parent: Loop
    outer: Loop
    inner: Loop
    factor: int


@dataclass(frozen=True, eq=False)
class Fuse:
    outer: Loop
    inner: Loop
    fused: Loop

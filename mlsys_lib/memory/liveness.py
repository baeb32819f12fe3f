"""Liveness: when each tensor of a training graph must be in memory, for one execution order.

Steps are the positions 0, 1, ..., n-1 of the ops in the order. A tensor is **live** from the step of
the op that writes it (step 0 for a graph input) to the step of the last op that reads it, both
included (the writing op needs its output buffer, the last reader still needs its input); a persistent
tensor stays live to the last step, and a tensor nobody reads lives only at the step that writes it.
Two tensors live at the same step cannot share bytes, so no plan fits in less than the largest total
of live bytes at one step, the **lower bound**.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from .graph import GRAPH_INPUT_KINDS, OpNode, TrainingGraph


@dataclass(frozen=True)
class Interval:
    """Tensor ``name`` of ``size`` bytes is live at steps ``start`` to ``end``, both included."""

    name: str
    start: int
    end: int
    size: int


def execution_order(graph: TrainingGraph, order: Sequence[str] | None = None) -> list[OpNode]:
    """The graph's ops in ``order`` (op names; None: the graph's own order), checked to be topological."""
    if order is None:
        ops = list(graph.ops)
    else:
        by_name = {op.name: op for op in graph.ops}
        unknown = [name for name in order if name not in by_name]
        if unknown:
            raise ValueError(f"order names ops that are not in the graph: {unknown[:5]}")
        if len(set(order)) != len(order) or len(order) != len(by_name):
            missing = sorted(set(by_name) - set(order))
            raise ValueError(f"order must list each of the {len(by_name)} ops exactly once "
                             f"({len(order)} given; missing: {missing[:5]})")
        ops = [by_name[name] for name in order]
    written = {t for t, kind in graph.kinds.items() if kind in GRAPH_INPUT_KINDS}
    for step, op in enumerate(ops):
        for t in op.inputs:
            if t not in written:
                raise ValueError(f"order is not topological: op {op.name!r} at step {step} uses {t!r} "
                                 f"before the op that writes it")
        written.update(op.outputs)
    return ops


def liveness(graph: TrainingGraph, order: Sequence[str] | None = None) -> list[Interval]:
    """Each tensor's live interval (first and last step, bytes) when the ops run in ``order``.

    order: op names, a topological order of the graph (None: the graph's own order).
    Returns one :class:`Interval` per tensor: graph inputs first, then the outputs in the order written.
    """
    ops = execution_order(graph, order)
    last_step = len(ops) - 1
    start = {t: 0 for t in graph.inputs}
    end = dict(start)
    for step, op in enumerate(ops):
        for t in op.inputs:
            end[t] = step
        for t in op.outputs:
            start[t] = end[t] = step
    return [Interval(t, s, last_step if t in graph.persistent else end[t], graph.sizes[t]) for t, s in start.items()]


def check_intervals(intervals: Iterable[Interval]) -> list[Interval]:
    """The intervals as a list, after checking names are unique, 0 <= start <= end and size >= 0."""
    intervals = list(intervals)
    names = set()
    for iv in intervals:
        if not isinstance(iv, Interval):
            raise TypeError(f"expected Interval objects, got {type(iv).__name__}: {iv!r}")
        if iv.name in names:
            raise ValueError(f"two intervals are named {iv.name!r}")
        names.add(iv.name)
        if iv.size < 0:
            raise ValueError(f"tensor {iv.name!r}: negative size {iv.size} bytes")
        if not 0 <= iv.start <= iv.end:
            raise ValueError(f"tensor {iv.name!r}: needs 0 <= start <= end, got start {iv.start}, end {iv.end}")
    return intervals


def live_bytes(intervals: Iterable[Interval]) -> np.ndarray:
    """Total bytes live at each step 0 .. last end (int64 array)."""
    intervals = check_intervals(intervals)
    if not intervals:
        return np.zeros(0, dtype=np.int64)
    change = np.zeros(max(iv.end for iv in intervals) + 2, dtype=np.int64)
    for iv in intervals:
        change[iv.start] += iv.size
        change[iv.end + 1] -= iv.size
    return np.cumsum(change[:-1])


def lower_bound(intervals: Iterable[Interval]) -> int:
    """The largest total of live bytes at any step: no plan's arena is smaller (bytes)."""
    per_step = live_bytes(intervals)
    return int(per_step.max()) if per_step.size else 0

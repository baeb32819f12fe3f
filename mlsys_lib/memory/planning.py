"""Static memory planning: give every tensor a byte offset in one arena, before anything runs.

Tensors whose live intervals do not overlap in time may share addresses. The planners:

* :func:`plan_no_reuse`: every tensor its own bytes; the arena is the sum of all sizes;
* :func:`plan_first_fit`: tensors in the order they are created, each at the lowest address where it
  fits beside the tensors it is live with;
* :func:`plan_best_fit`: the largest tensors first, each in the *smallest* gap that fits it (the
  "greedy by size" planner of TensorFlow Lite; large tensors placed early leave few small holes);
* :func:`plan_inplace`: an op's output takes its input's buffer where the op allows it and the input
  dies there, then a planner places the merged buffers.

:func:`validate_plan` checks that no two tensors live at the same step overlap in memory;
:func:`~mlsys_lib.memory.liveness.lower_bound` says how far from optimal an arena can be.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

from .graph import GRAPH_INPUT_KINDS, TrainingGraph
from .liveness import Interval, check_intervals, execution_order, liveness


@dataclass(frozen=True)
class MemoryPlan:
    """Byte offset of every tensor in an arena of ``arena`` bytes.

    inplace: tensor -> the tensor whose buffer it took over (same offset), from :func:`plan_inplace`.
    """

    offsets: dict[str, int]
    arena: int
    inplace: dict[str, str] = field(default_factory=dict)


Planner = Callable[[Iterable[Interval]], MemoryPlan]


def plan_no_reuse(intervals: Iterable[Interval]) -> MemoryPlan:
    """Each tensor after the previous one: no sharing at all."""
    offsets, top = {}, 0
    for iv in check_intervals(intervals):
        offsets[iv.name] = top
        top += iv.size
    return MemoryPlan(offsets, top)


def plan_first_fit(intervals: Iterable[Interval]) -> MemoryPlan:
    """Tensors by creation step (then larger first), each at the lowest address free for its lifetime."""
    return _greedy(check_intervals(intervals), by_size=False)


def plan_best_fit(intervals: Iterable[Interval]) -> MemoryPlan:
    """Tensors by size, largest first, each in the smallest gap that holds it (on top if none does)."""
    return _greedy(check_intervals(intervals), by_size=True)


def _greedy(intervals: Sequence[Interval], by_size: bool) -> MemoryPlan:
    start = np.array([iv.start for iv in intervals], dtype=np.int64)
    end = np.array([iv.end for iv in intervals], dtype=np.int64)
    size = np.array([iv.size for iv in intervals], dtype=np.int64)
    primary, secondary = (-size, start) if by_size else (start, -size)
    offset = _compiled_place()(np.lexsort((secondary, primary)), start, end, size, by_size)
    return MemoryPlan({iv.name: int(o) for iv, o in zip(intervals, offset)}, int((offset + size).max(initial=0)))


@functools.cache
def _compiled_place():
    """:func:`_place` compiled by Numba, on first use: importing Numba costs about a second, which every
    simulated rank of Lab 11 paid for nothing when this module imported it (``mlsys_lib.distributed``
    imports it for the memory accounting)."""
    from numba import njit
    return njit(cache=True)(_place)


def _place(order, start, end, size, best):
    """Offsets for the tensors taken in ``order``, each placed beside the already placed tensors whose
    lifetimes overlap its own: in the first gap that fits it, or (``best``) the smallest one (the lowest
    on a tie); on top of them if no gap fits. The placed tensors are kept sorted by address."""
    offset = np.zeros(start.size, np.int64)
    by_address = np.empty(order.size, np.int64)
    for count in range(order.size):
        i = order[count]
        found, chosen, chosen_gap, top = False, 0, 0, 0  # top: the end of the highest neighbour so far
        for j in by_address[:count]:
            if start[j] > end[i] or end[j] < start[i]:
                continue  # not live at the same time: no conflict
            gap = offset[j] - top
            if gap >= size[i] and (not found or (best and gap < chosen_gap)):
                found, chosen, chosen_gap = True, top, gap
                if not best:
                    break
            top = max(top, offset[j] + size[j])
        offset[i] = chosen if found else top
        at = count  # insertion step of insertion sort by address
        while at > 0 and offset[by_address[at - 1]] > offset[i]:
            by_address[at] = by_address[at - 1]
            at -= 1
        by_address[at] = i
    return offset


def plan_inplace(graph: TrainingGraph, order: Sequence[str] | None = None,
                 planner: Planner = plan_best_fit) -> MemoryPlan:
    """Reuse buffers in place where an op allows it, then place the buffers with ``planner``.

    An op with ``inplace=x`` writes its output into x's buffer when x dies at that op (x's last
    reader), x is not persistent and not a graph input. Chains (relu after relu) share one buffer.
    """
    intervals = {iv.name: iv for iv in liveness(graph, order)}
    buffer_of: dict[str, str] = {}
    inplace: dict[str, str] = {}
    for step, op in enumerate(execution_order(graph, order)):
        x = op.inplace
        if (x is not None and intervals[x].end == step and x not in graph.persistent
                and graph.kinds[x] not in GRAPH_INPUT_KINDS):
            inplace[op.outputs[0]] = x
            buffer_of[op.outputs[0]] = buffer_of.get(x, x)
    members: dict[str, list[Interval]] = {}
    for name, iv in intervals.items():
        members.setdefault(buffer_of.get(name, name), []).append(iv)
    buffers = [Interval(root, min(iv.start for iv in ivs), max(iv.end for iv in ivs), intervals[root].size)
               for root, ivs in members.items()]
    plan = planner(buffers)
    offsets = {name: plan.offsets[buffer_of.get(name, name)] for name in intervals}
    return MemoryPlan(offsets, plan.arena, inplace)


def validate_plan(plan: MemoryPlan, intervals: Iterable[Interval]) -> None:
    """Raise ValueError unless every tensor lies inside the arena and no two tensors live at the same
    step share a byte (a tensor and the one that took over its buffer in place may meet at the handoff step)."""
    intervals = check_intervals(intervals)
    missing = [iv.name for iv in intervals if iv.name not in plan.offsets]
    if missing:
        raise ValueError(f"the plan gives no offset to {len(missing)} tensor(s), e.g. {missing[:3]}")
    start, end, size = (np.array([getattr(iv, key) for iv in intervals], dtype=np.int64) for key in ("start", "end", "size"))
    offset = np.array([plan.offsets[iv.name] for iv in intervals], dtype=np.int64)
    for i in np.flatnonzero((offset < 0) | (offset + size > plan.arena))[:1]:
        raise ValueError(f"tensor {intervals[i].name!r} at bytes [{offset[i]}, {offset[i] + size[i]}) lies outside "
                         f"the arena of {plan.arena} bytes")
    for i in range(len(intervals)):
        clash = np.flatnonzero((start[i + 1:] <= end[i]) & (end[i + 1:] >= start[i]) & (size[i + 1:] > 0)
                               & (offset[i + 1:] < offset[i] + size[i]) & (offset[i + 1:] + size[i + 1:] > offset[i])
                               & (size[i] > 0))
        for j in clash + i + 1:
            a, b = intervals[i], intervals[j]
            if not (_handoff(plan, a, b) or _handoff(plan, b, a)):
                raise ValueError(f"tensors {a.name!r} (steps {a.start}-{a.end}, bytes {offset[i]}-{offset[i] + a.size}) "
                                 f"and {b.name!r} (steps {b.start}-{b.end}, bytes {offset[j]}-{offset[j] + b.size}) "
                                 f"are live at the same time and overlap in memory")


def _handoff(plan: MemoryPlan, first: Interval, then: Interval) -> bool:
    """``then`` took over ``first``'s buffer in place at the step where ``first`` dies."""
    return plan.inplace.get(then.name) == first.name and then.start == first.end

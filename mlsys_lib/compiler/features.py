"""Loop-nest features for a learned cost model (AutoTVM's "curve" of a schedule, simplified).

:func:`footprints` is the memory a loop nest touches at each level: the bytes of every tensor that
one iteration of the loops outside depth ``d`` touches while the loops from ``d`` in run in full.
It is the quantity that decides whether a level's working set fits a cache, computed without running
anything, by interval arithmetic on the affine indices.

:func:`features` turns a schedule of an operator's template (:mod:`.space`) into a fixed-length
vector of numbers (trip counts, annotations, footprints, strides, reuse distances, vector width,
parallel and unroll extents, cache_write depth) for gradient-boosted trees (:mod:`.tuner`);
:func:`feature_names` names each entry.
"""

from __future__ import annotations

import math

import numpy as np

from .expr import Axis, affine
from .schedule import Fuse, Loop, Schedule, Split, Stage

#: Loop positions and footprint depths that :func:`features` encodes (deeper nests are refused).
MAX_DEPTH = 10


def _reach(stage: Stage, loop: Loop, inner: list[Loop]) -> int:
    """The largest value ``loop`` takes while the leaves in ``inner`` run in full and the other
    leaves are 0; a split's value stops at its extent (its tail guard), a fused axis spans it all."""
    if loop in stage.leaves:
        return loop.extent - 1 if loop in inner else 0
    for rel in stage.relations:
        if isinstance(rel, Split) and rel.parent is loop:
            span = _reach(stage, rel.outer, inner) * rel.factor + _reach(stage, rel.inner, inner)
            return min(loop.extent - 1, span)
        if isinstance(rel, Fuse) and loop in (rel.outer, rel.inner):
            return loop.extent - 1 if any(leaf in inner for leaf in stage.depends(loop)) else 0
    raise ValueError(f"{loop.name} is not a loop of {stage.name}")


def axis_reach(stage: Stage, depth: int) -> dict[Axis, int]:
    """{axis: the largest value it takes} while the loops ``stage.leaves[depth:]`` run in full and the
    loops outside are at 0 (the smallest value is 0). Lab 9's footprint exercise builds on it."""
    if isinstance(depth, bool) or not isinstance(depth, int) or not 0 <= depth <= len(stage.leaves):
        raise ValueError(f"axis_reach: depth must be an int in 0..{len(stage.leaves)}, got {depth!r}")
    return {axis: _reach(stage, loop, stage.leaves[depth:]) for axis, loop in stage.root.items()}


def footprints(stage: Stage) -> list[dict[str, int]]:
    """Bytes touched per tensor by one iteration of the loops at depth < d, for d = 0..len(leaves).

    ``result[d][name]``: the loops ``stage.leaves[d:]`` run in full, the outer ones are at their
    first iteration (a full tile when a split has a tail). ``result[0]`` is the whole nest,
    ``result[-1]`` one innermost iteration (one element per tensor accessed).

    Interval arithmetic: every axis ranges over ``[0, reach]`` (:func:`axis_reach`), so every affine
    index over an interval; several accesses to one tensor take, per dimension, the union of their
    intervals (they differ by constants: a stencil's or a convolution's halo); the bytes are the
    product of the interval lengths times the itemsize. That is the bounding box of what is touched:
    exactly the elements touched when each axis's loops nest in order (outer part outside inner
    part, as tiling nests them) and the accesses differ along one dimension; more when a loop
    strides an index (an outer part inside its inner part, ``2 * y``) or when shifted boxes leave
    corners out. The output counts; a ``cache_write`` buffer does not (it is registers).
    """
    itemsize = {t.name: np.dtype(t.dtype).itemsize for t in stage.schedule.tensors}
    levels = []
    for d in range(len(stage.leaves) + 1):
        reach = axis_reach(stage, d)
        boxes: dict[str, list[tuple[int, int]]] = {}
        for indices, name in stage.accesses():
            box = []
            for index in indices:
                coefs = affine(index)
                lo = hi = int(coefs.get(None, 0))
                for axis, c in coefs.items():
                    if axis is not None:
                        lo, hi = lo + min(0, c * reach[axis]), hi + max(0, c * reach[axis])
                box.append((lo, hi))
            old = boxes.setdefault(name, box)
            boxes[name] = [(min(a[0], b[0]), max(a[1], b[1])) for a, b in zip(old, box)]
        levels.append({name: itemsize[name] * math.prod(hi - lo + 1 for lo, hi in box)
                       for name, box in boxes.items()})
    return levels


def _element_strides(shape: tuple[int, ...]) -> list[int]:
    """Row-major strides of ``shape``, in elements."""
    return [math.prod(shape[d + 1:]) for d in range(len(shape))]


def _named_features(stage: Stage, max_depth: int) -> list[tuple[str, float]]:
    leaves = stage.leaves
    if len(leaves) > max_depth:
        raise ValueError(f"features: {stage.name} has {len(leaves)} loops; at most {max_depth} are encoded")
    out: list[tuple[str, float]] = []
    for p in range(max_depth):
        loop = leaves[p] if p < len(leaves) else None
        out.append((f"loop{p}.log2_extent", math.log2(loop.extent) if loop else 0.0))
        out.append((f"loop{p}.reduce", float(bool(loop) and loop.kind == "reduce")))
        for note in ("parallel", "vectorize", "unroll"):
            out.append((f"loop{p}.{note}", float(bool(loop) and loop.annotation == note)))
    levels = footprints(stage)
    names = list(levels[0])
    shapes = {t.name: t.shape for t in stage.schedule.tensors}
    for d in range(max_depth + 1):
        level = levels[min(d, len(leaves))]
        for name in names:
            out.append((f"depth{d}.log2_bytes.{name}", math.log2(level[name])))
    for name in names:
        steps = [stage.strides(indices, leaves[-1]) for indices, tensor in stage.accesses() if tensor == name]
        stride = -1 if None in steps else max(abs(sum(s * e for s, e in zip(step, _element_strides(shapes[name]))))
                                               for step in steps)
        out.append((f"innermost_stride.{name}", float(stride)))
    for name in names:
        reused = [p for p, loop in enumerate(leaves)
                  if all(step is not None and not any(step)
                         for step in (stage.strides(ix, loop) for ix, t in stage.accesses() if t == name))]
        level = levels[reused[-1] + 1] if reused else levels[0]
        out.append((f"reuse_distance.log2_bytes.{name}", math.log2(sum(level.values()))))
    annotated = {note: [l for l in leaves if l.annotation == note] for note in ("parallel", "vectorize", "unroll")}
    out.append(("vector_width", float(annotated["vectorize"][0].extent if annotated["vectorize"] else 1)))
    out.append(("parallel_extent", float(annotated["parallel"][0].extent if annotated["parallel"] else 1)))
    out.append(("unroll_extent", float(math.prod(l.extent for l in annotated["unroll"]))))
    local = leaves.index(stage.local_at) + 1 if stage.local_at else 0
    out.append(("cache_write", float(stage.local_at is not None)))
    out.append(("cache_write_depth", float(local)))
    out.append(("cache_write.log2_bytes", math.log2(levels[local][stage.name]) if local else 0.0))
    return out


def _stage(schedule: Schedule) -> Stage:
    if not isinstance(schedule, Schedule):
        raise TypeError(f"features: expected a Schedule, got {type(schedule).__name__}")
    return schedule[schedule.outputs[0]]


def features(schedule: Schedule, max_depth: int = MAX_DEPTH) -> np.ndarray:
    """The feature vector (float64) of the stage computing ``schedule``'s first output.

    Its length is fixed for the schedules of one template (same tensors, at most ``max_depth``
    loops); the entries, in order (see :func:`feature_names`):

    - per loop position p < max_depth (outermost first; 0 past the last loop): log2 of the trip
      count, 1 for a reduction loop, one-hots for parallel / vectorize / unroll;
    - per depth d = 0..max_depth and per tensor (in access order, the output last): log2 of the
      bytes :func:`footprints` gives (depths past the innermost repeat one iteration's bytes);
    - per tensor: its stride along the innermost loop in elements of the flattened array (0: the
      same element every iteration, 1: contiguous; -1: not constant, through a fuse);
    - per tensor: log2 of its reuse distance in bytes, the footprint of all tensors over one
      iteration of the innermost loop that does not move it (the whole nest's when none);
    - vector width (the vectorized loop's extent, 1 if none), parallel extent (1 if none), unroll
      extent (the product of the unrolled loops' extents), cache_write (0/1), its depth (1 + the
      position of the loop it is at, 0 if none) and log2 of its buffer's bytes (0 if none).
    """
    return np.array([value for _, value in _named_features(_stage(schedule), max_depth)], dtype=np.float64)


def feature_names(schedule: Schedule, max_depth: int = MAX_DEPTH) -> list[str]:
    """The names of :func:`features`' entries, in order (``loop2.log2_extent``, ``depth3.log2_bytes.A``...)."""
    return [name for name, _ in _named_features(_stage(schedule), max_depth)]

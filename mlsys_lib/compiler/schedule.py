"""Schedules: *how* a tensor expression is computed (Halide's "schedule", TVM's primitives).

``s = create_schedule(C)`` gives every compute a :class:`Stage` whose loop nest starts as one loop
per axis (spatial axes, then reduction axes, in definition order). Primitives rewrite the nest and
check that the result still computes the same values:

==================  ================================================================================
``split``           ``x`` -> ``xo, xi`` with ``x = xo * factor + xi``; a factor that does not divide the
                    extent leaves a *tail*, guarded by ``if x < extent`` in the generated code
``tile``            split two loops and reorder them to ``xo, yo, xi, yi``
``reorder``         put the given loops in this order, in the positions they occupy
``fuse``            two adjacent loops -> one of the product extent (``x = f // ny``, ``y = f % ny``)
``unroll``          repeat the body (extent at most :data:`MAX_UNROLL`)
``vectorize``       the innermost loop, whose accesses must all be contiguous (stride 1 or 0)
``parallel``        a spatial loop: iterations write different elements (a reduction loop cannot be
                    parallel: its iterations update the same element)
``cache_write``     accumulate the elements written under a loop in a local buffer, stored once at the
                    end of that loop's body (each element written, once); every reduction loop must lie
                    inside it
``compute_at``      compute a producer inside a loop of its consumer, only the region that the
                    iteration reads (bound inference on the affine indices)
``compute_inline``  substitute an elementwise producer's formula into its readers
==================  ================================================================================

An illegal request raises :class:`ScheduleError` saying why; :mod:`.codegen` turns the schedule into
Python source (``print(s)`` shows it) compiled by Numba.

Dependencies go one way: ``expr`` and ``loops`` <- this module <- ``codegen``. Code generation reads a
schedule, so this module does not import it; ``s.lower()`` and ``print(s)`` (the generated source) are
set on :class:`Schedule` by :mod:`.codegen`.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import contextmanager

from .expr import Axis, BinOp, Call, Const, Load, Tensor, affine, loads, producers
from .loops import MAX_UNROLL, Fuse, Loop, ScheduleError, Split

__all__ = ["MAX_UNROLL", "Fuse", "Loop", "Schedule", "ScheduleError", "Split", "Stage", "create_schedule"]


class Stage:
    """The loop nest computing one tensor. ``axis``/``reduce_axis``: its original loops;
    ``leaves``: the loops of the nest now, outermost first."""

    def __init__(self, schedule: Schedule, tensor: Tensor):
        self.schedule, self.tensor, self.op = schedule, tensor, tensor.op
        self.root: dict[Axis, Loop] = {a: Loop(a.name, a.extent, a.kind) for a in self.op.axes + self.op.reduce_axes}
        self.leaves: list[Loop] = list(self.root.values())
        self.relations: list[Split | Fuse] = []
        self.attach: tuple[Stage, Loop] | None = None
        self.inlined = False
        self.local_at: Loop | None = None

    @property
    def name(self) -> str:
        return self.tensor.name

    @property
    def axis(self) -> tuple[Loop, ...]:
        return tuple(self.root[a] for a in self.op.axes)

    @property
    def reduce_axis(self) -> tuple[Loop, ...]:
        return tuple(self.root[a] for a in self.op.reduce_axes)

    def __repr__(self):
        return f"Stage({self.name}: {', '.join(loop.name for loop in self.leaves)})"

    def loop(self, name: str) -> Loop:
        """The current loop called ``name``."""
        for loop in self.leaves:
            if loop.name == name:
                return loop
        raise ScheduleError(f"{self.name} has no loop {name!r}; its loops are {[l.name for l in self.leaves]}")

    # --- primitives -------------------------------------------------------------------------------

    def split(self, loop: Loop, factor: int) -> tuple[Loop, Loop]:
        """``loop`` -> ``(outer, inner)``, ``inner`` of extent ``factor``; a tail is guarded."""
        self._leaf(loop, "split")
        self._not_attached("split")
        if isinstance(factor, bool) or not isinstance(factor, int) or factor < 1:
            raise ScheduleError(f"split {loop.name}: factor must be a positive int, got {factor!r}")
        self._keeps(loop, "split")
        outer = Loop(self._fresh(loop.name + "o"), -(-loop.extent // factor), loop.kind)
        inner = Loop(self._fresh(loop.name + "i"), factor, loop.kind)
        at = self.leaves.index(loop)
        self.leaves[at:at + 1] = [outer, inner]
        self.relations.append(Split(loop, outer, inner, factor))
        return outer, inner

    def tile(self, x: Loop, y: Loop, x_factor: int, y_factor: int) -> tuple[Loop, Loop, Loop, Loop]:
        """Split ``x`` and ``y`` and order them ``xo, yo, xi, yi``: a 2-D tile of ``x_factor × y_factor``."""
        xo, xi = self.split(x, x_factor)
        yo, yi = self.split(y, y_factor)
        self.reorder(xo, yo, xi, yi)
        return xo, yo, xi, yi

    def reorder(self, *loops: Loop) -> None:
        """Order ``loops`` as given, in the positions they occupy now (the other loops stay put)."""
        for loop in loops:
            self._leaf(loop, "reorder")
        if len(set(map(id, loops))) != len(loops):
            raise ScheduleError(f"reorder {[l.name for l in loops]}: a loop is named twice")
        with self._atomic():
            for slot, loop in zip(sorted(self.leaves.index(loop) for loop in loops), loops):
                self.leaves[slot] = loop
            self._check_local()

    def fuse(self, outer: Loop, inner: Loop) -> Loop:
        """Two adjacent loops (``outer`` just outside ``inner``) of one kind -> one loop."""
        self._not_attached("fuse")
        for loop in (outer, inner):
            self._leaf(loop, "fuse")
            self._keeps(loop, "fuse")
        at = self.leaves.index(outer)
        if at + 1 >= len(self.leaves) or self.leaves[at + 1] is not inner:
            raise ScheduleError(f"fuse {outer.name}, {inner.name}: {inner.name} must be the loop just inside "
                                f"{outer.name}; the order is {[l.name for l in self.leaves]} (reorder first)")
        if outer.kind != inner.kind:
            raise ScheduleError(f"fuse {outer.name}, {inner.name}: a spatial and a reduction loop cannot be fused")
        fused = Loop(self._fresh(f"{outer.name}_{inner.name}"), outer.extent * inner.extent, outer.kind)
        with self._atomic():
            self.leaves[at:at + 2] = [fused]
            self.relations.append(Fuse(outer, inner, fused))
            self._check_local()
        return fused

    def unroll(self, loop: Loop) -> None:
        """Repeat the body ``loop.extent`` times instead of looping (at most MAX_UNROLL)."""
        self._leaf(loop, "unroll")
        if loop.extent > MAX_UNROLL:
            raise ScheduleError(f"unroll {loop.name}: extent {loop.extent} is more than {MAX_UNROLL}; split it first")
        if self.attach:
            raise ScheduleError(f"unroll {loop.name}: {self.name} is computed at a loop of {self.attach[0].name}, "
                                f"where its extents are not constants")
        self._annotate(loop, "unroll")

    def vectorize(self, loop: Loop) -> None:
        """Mark the innermost loop for SIMD: every access must move by 0 or 1 element per iteration,
        in the last dimension only (checked; a strided loop would gather, not load a vector)."""
        self._leaf(loop, "vectorize")
        if self.leaves[-1] is not loop:
            raise ScheduleError(f"vectorize {loop.name}: only the innermost loop can be vectorized; the innermost "
                                f"loop of {self.name} is {self.leaves[-1].name}")
        for access, name in self.accesses():
            strides = self.strides(access, loop)
            if strides is None or any(strides[:-1]) or strides[-1] not in (0, 1):
                raise ScheduleError(f"vectorize {loop.name}: {name} is not contiguous along it (index steps "
                                    f"{strides} per iteration); vectorize a loop that moves along the last dimension")
        self._annotate(loop, "vectorize")

    def parallel(self, loop: Loop) -> None:
        """Run the iterations of a spatial ``loop`` on several threads (Numba's ``prange``)."""
        self._leaf(loop, "parallel")
        if loop.kind == "reduce":
            raise ScheduleError(f"parallel {loop.name}: it is a reduction loop, whose iterations all update the same "
                                f"elements of {self.name} (a race); parallelise a spatial loop, or split the "
                                f"reduction into separate partial sums first (rfactor)")
        if self.attach:
            raise ScheduleError(f"parallel {loop.name}: {self.name} is computed inside {self.attach[0].name}'s loop")
        if any(l.annotation == "parallel" for l in self.leaves):
            raise ScheduleError(f"parallel {loop.name}: {self.name} already has a parallel loop")
        self._annotate(loop, "parallel")

    def cache_write(self, loop: Loop) -> None:
        """Accumulate what one iteration of ``loop`` writes in a local buffer (registers / L1), zeroed at
        the start of its body and stored to the output at its end: the elements that iteration wrote, each
        once, in row-major order. The buffer is their bounding box: with a split's outer part inside
        ``loop`` and its inner part outside, the iteration writes every factor-th row of it."""
        self._leaf(loop, "cache_write")
        self._not_attached("cache_write")
        if self.op.reduce is None:
            raise ScheduleError(f"cache_write: {self.name} has no reduction to accumulate")
        with self._atomic():
            self.local_at = loop
            self._check_local()

    def compute_at(self, consumer: Stage, loop: Loop) -> None:
        """Compute this stage inside ``loop`` of ``consumer``, just the region that one iteration reads."""
        if not isinstance(consumer, Stage) or consumer.schedule is not self.schedule:
            raise ScheduleError(f"compute_at: {consumer!r} is not a stage of this schedule")
        consumer._leaf(loop, "compute_at")
        if consumer is self:
            raise ScheduleError(f"compute_at: {self.name} cannot be computed inside itself")
        if self.tensor in self.schedule.outputs:
            raise ScheduleError(f"compute_at: {self.name} is an output of the schedule; only producers can move")
        if consumer.attach or consumer.inlined:
            raise ScheduleError(f"compute_at: {consumer.name} is itself computed elsewhere; attach to a root stage")
        if self.relations or any(l.annotation for l in self.leaves):
            raise ScheduleError(f"compute_at: {self.name} has been split, fused or annotated; a stage computed at "
                                f"another's loop keeps its own loops (reorder them if you like)")
        if self.local_at or self.inlined:
            raise ScheduleError(f"compute_at: {self.name} is inlined or has a cache_write")
        self.attach = (consumer, loop)

    def compute_inline(self) -> None:
        """Replace every read of this elementwise stage by its formula (no buffer, no loop nest)."""
        if self.op.reduce is not None:
            raise ScheduleError(f"compute_inline: {self.name} is a reduction; only elementwise stages inline")
        if self.tensor in self.schedule.outputs:
            raise ScheduleError(f"compute_inline: {self.name} is an output of the schedule")
        if self.attach or self.relations or any(l.annotation for l in self.leaves):
            raise ScheduleError(f"compute_inline: {self.name} has a schedule of its own already")
        self.inlined = True

    # --- analysis ---------------------------------------------------------------------------------

    def coefficients(self, loop: Loop) -> dict[Loop, int] | None:
        """``loop``'s value as {leaf loop: coefficient} (splits are affine), None through a fuse."""
        if loop in self.leaves:
            return {loop: 1}
        for rel in self.relations:
            if isinstance(rel, Split) and rel.parent is loop:
                outer, inner = self.coefficients(rel.outer), self.coefficients(rel.inner)
                if outer is None or inner is None:
                    return None
                out = {l: c * rel.factor for l, c in outer.items()}
                for l, c in inner.items():
                    out[l] = out.get(l, 0) + c
                return out
            if isinstance(rel, Fuse) and loop in (rel.outer, rel.inner):
                return None
        raise ScheduleError(f"{loop.name} is not a loop of {self.name}")

    def depends(self, loop: Loop) -> list[Loop]:
        """The leaf loops ``loop``'s value depends on, in nest order."""
        found: set[int] = set()

        def visit(l: Loop):
            if l in self.leaves:
                found.add(id(l))
                return
            for rel in self.relations:
                if isinstance(rel, Split) and rel.parent is l:
                    visit(rel.outer)
                    visit(rel.inner)
                elif isinstance(rel, Fuse) and l in (rel.outer, rel.inner):
                    visit(rel.fused)

        visit(loop)
        return [l for l in self.leaves if id(l) in found]

    def tails(self) -> list[Split]:
        """The splits whose factor does not divide: their parent loop's value can pass its extent,
        so the generated code guards it."""
        return [r for r in self.relations if isinstance(r, Split) and r.parent.extent % r.factor]

    def has_tail(self, loop: Loop) -> bool:
        """Whether a split under ``loop`` does not divide, so its value can run past its extent."""
        for rel in self.relations:
            if isinstance(rel, Split) and rel.parent is loop:
                return rel.parent.extent % rel.factor != 0 or self.has_tail(rel.outer) or self.has_tail(rel.inner)
            if isinstance(rel, Fuse) and loop in (rel.outer, rel.inner):
                return self.has_tail(rel.fused)
        return False

    def accesses(self) -> list[tuple[tuple, str]]:
        """Every array access of one iteration as (index expressions, tensor name): reads, then the write."""
        body = self.op.reduce.body if self.op.reduce is not None else self.op.body
        out = [(load.indices, load.tensor.name) for load in self._expanded_loads(body)]
        return out + [(self.op.axes, self.name)]

    def _expanded_loads(self, body) -> list[Load]:
        found = []
        for load in loads(body):
            stage = self.schedule.stages.get(load.tensor.name)
            if stage is not None and stage.inlined:
                mapping = dict(zip(stage.op.axes, load.indices))
                found += [Load(inner.tensor, tuple(_substitute(i, mapping) for i in inner.indices))
                          for inner in stage._expanded_loads(stage.op.body)]
            else:
                found.append(load)
        return found

    def strides(self, indices: Sequence, loop: Loop) -> list[int] | None:
        """How far each index moves per iteration of leaf ``loop`` (None where that is not a constant)."""
        out = []
        for index in indices:
            coefs = affine(index)
            if coefs is None:
                return None
            step = 0
            for axis, c in coefs.items():
                if axis is None or c == 0:
                    continue
                through = self.coefficients(self.root[axis])
                if through is None:
                    if loop in self.depends(self.root[axis]):
                        return None
                    continue
                step += c * through.get(loop, 0)
            out.append(step)
        return out

    # --- helpers ----------------------------------------------------------------------------------

    def _leaf(self, loop, what: str) -> None:
        if not isinstance(loop, Loop):
            raise ScheduleError(f"{what}: expected a Loop of {self.name}, got {type(loop).__name__}")
        if not any(loop is l for l in self.leaves):
            raise ScheduleError(f"{what}: {loop.name} is not a loop of {self.name} now (its loops are "
                                f"{[l.name for l in self.leaves]}); a loop that was split or fused is gone")

    def _keeps(self, loop: Loop, what: str) -> None:
        """Refuse to replace a loop that something is pinned to (an annotation, a cache_write, a stage
        computed at it): split and fuse first, then pin."""
        pinned = [f"it is marked {loop.annotation}"] if loop.annotation else []
        pinned += ["the cache_write buffer is at it"] if loop is self.local_at else []
        pinned += [f"{s.name} is computed at it" for s in self.schedule.stages.values()
                   if s.attach and s.attach[1] is loop]
        if pinned:
            raise ScheduleError(f"{what} {loop.name}: {'; '.join(pinned)}; {what} before that")

    def _not_attached(self, what: str) -> None:
        if self.attach:
            raise ScheduleError(f"{what}: {self.name} is computed at a loop of {self.attach[0].name}; "
                                f"schedule its loops before compute_at")

    def _annotate(self, loop: Loop, annotation: str) -> None:
        if loop.annotation not in (None, annotation):
            raise ScheduleError(f"{annotation} {loop.name}: it is already marked {loop.annotation}")
        loop.annotation = annotation

    def _fresh(self, name: str) -> str:
        taken = {l.name for l in self.root.values()} | {l.name for l in self.leaves}
        for rel in self.relations:
            taken |= {l.name for l in (rel.outer, rel.inner)} | {(rel.parent if isinstance(rel, Split) else rel.fused).name}
        base, k = name, 1
        while name in taken:
            k += 1
            name = f"{base}{k}"
        return name

    @contextmanager
    def _atomic(self):
        """Undo a primitive's changes when it turns out illegal."""
        saved = (list(self.leaves), list(self.relations), self.local_at)
        try:
            yield
        except ScheduleError:
            self.leaves, self.relations, self.local_at = saved
            raise

    def _check_local(self) -> None:
        if self.local_at is None:
            return
        at = self.leaves.index(self.local_at)
        for root in self.axis:
            if self.coefficients(root) is None and any(l in self.leaves[at + 1:] for l in self.depends(root)):
                raise ScheduleError(f"cache_write at {self.local_at.name}: axis {root.name} would be fused inside it; "
                                    f"the local buffer needs the axes inside to be plain splits")
        outside = [l.name for l in self.leaves[:at + 1] if l.kind == "reduce"]
        if outside:
            raise ScheduleError(f"cache_write at {self.local_at.name}: reduction loop(s) {outside} would be outside the "
                                f"local buffer, which is stored before the sum is complete; every reduction loop "
                                f"must be inside {self.local_at.name}")


def _substitute(index, mapping: dict):
    """``index`` with axes replaced by expressions (for an inlined producer's loads)."""
    if isinstance(index, Axis):
        return mapping.get(index, index)
    if isinstance(index, BinOp):
        return BinOp(index.op, _substitute(index.a, mapping), _substitute(index.b, mapping))
    if isinstance(index, Call):
        return Call(index.name, tuple(_substitute(a, mapping) for a in index.args))
    if isinstance(index, Load):
        return Load(index.tensor, tuple(_substitute(i, mapping) for i in index.indices))
    if isinstance(index, Const):
        return index
    raise TypeError(f"cannot substitute into {index!r}")


class Schedule:
    """The stages computing ``outputs``; ``s[C]`` (or ``s["C"]``) is C's :class:`Stage`.

    ``s.lower()`` and ``str(s)`` are the Python source of the kernel it generates
    (:func:`~mlsys_lib.compiler.codegen.lower`, set here by :mod:`.codegen`).
    """

    def __init__(self, outputs: Tensor | Sequence[Tensor]):
        self.outputs = [outputs] if isinstance(outputs, Tensor) else list(outputs)
        if not self.outputs or not all(isinstance(t, Tensor) and t.op is not None for t in self.outputs):
            raise TypeError(f"create_schedule: expected computed tensors, got {self.outputs!r}")
        self.tensors = producers(self.outputs)
        self.stages: dict[str, Stage] = {t.name: Stage(self, t) for t in self.tensors if t.op is not None}

    @property
    def inputs(self) -> list[Tensor]:
        return [t for t in self.tensors if t.op is None]

    def __getitem__(self, key: Tensor | str) -> Stage:
        name = key.name if isinstance(key, Tensor) else key
        if name not in self.stages:
            raise KeyError(f"no stage {name!r}: stages are {list(self.stages)} (placeholders have none)")
        return self.stages[name]

    def readers(self, stage: Stage) -> list[Stage]:
        return [s for s in self.stages.values() if stage.tensor in s.op.inputs]


def create_schedule(outputs: Tensor | Sequence[Tensor]) -> Schedule:
    """A schedule with every stage in its default nest (one loop per axis, in definition order)."""
    return Schedule(outputs)

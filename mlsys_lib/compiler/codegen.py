"""Code generation: a :class:`~.schedule.Schedule` as Python source, compiled by Numba.

:func:`lower` writes one function ``kernel(<inputs>, <outputs>)`` whose loops are the stages' loop
nests: ``prange`` for a parallel loop, the body repeated for an unrolled one, a ``# vectorize`` loop
left for LLVM's loop vectorizer (legal by construction: its accesses are contiguous), ``if x < n``
for a split's tail, a cache_write buffer filled with the reduction's identity and stored back element
by element, and the region a ``compute_at`` stage computes inferred from its readers' affine indices
(intervals ``base + [lo, hi]`` in the consumer's outer loops, clamped to the tensor). :func:`build`
compiles it (``numba.njit``; floating-point sums may be reassociated, so results match the numpy
meaning up to rounding). With ``trace=True`` the same loops call ``_touch(name, index)`` for every
array access instead of computing: :mod:`.traffic` counts cache misses with it.

This module builds on :mod:`.schedule` (it reads a schedule's stages), which does not import it;
it gives :class:`~.schedule.Schedule` its ``lower()`` and ``str()``, the generated source.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import os
import stat
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numba
import numpy as np

from .expr import REDUCERS, Axis, BinOp, Call, Const, Expr, Load, Tensor, affine
from .loops import Fuse, ScheduleError, Split
from .schedule import Schedule, Stage

FASTMATH = {"reassoc", "contract"}  # reorder sums and fuse multiply-adds; NaN and inf keep their meaning
_CALLS = {"exp": "np.exp", "sqrt": "np.sqrt", "maximum": "np.maximum", "minimum": "np.minimum"}
_COMBINE = {"sum": "{0} + {1}", "max": "np.maximum({0}, {1})"}


def lower(schedule: Schedule, trace: bool = False) -> str:
    """The Python source of ``schedule``'s kernel (or of its access trace, with ``trace=True``)."""
    if not hasattr(schedule, "stages"):
        raise TypeError(f"lower: expected a Schedule, got {type(schedule).__name__}")
    return _Lowering(schedule, trace).source()


class _Lowering:
    def __init__(self, schedule: Schedule, trace: bool):
        self.s, self.trace, self.lines = schedule, trace, []
        self.tensor_names = {t.name for t in schedule.tensors} | {f"{t.name}_local" for t in schedule.tensors}
        self._check()

    def _check(self) -> None:
        for stage in self.s.stages.values():
            vector = [l for l in stage.leaves if l.annotation == "vectorize"]
            if vector and stage.leaves[-1] is not vector[0]:
                raise ScheduleError(f"{stage.name}: vectorized loop {vector[0].name} is no longer the innermost "
                                    f"(that is {stage.leaves[-1].name}); vectorize the innermost loop")
            if stage.local_at is not None:
                inside = stage.leaves[stage.leaves.index(stage.local_at) + 1:]
                for split in stage.tails():
                    if split.parent not in stage.root.values() and any(l in inside for l in stage.depends(split.parent)):
                        raise ScheduleError(f"{stage.name}: cache_write at {stage.local_at.name} with {split.parent.name} "
                                            f"(extent {split.parent.extent}) split by {split.factor} inside it; the "
                                            f"local buffer needs inner splits that divide")
            if stage.attach:
                consumer, loop = stage.attach
                if not any(loop is l for l in consumer.leaves):
                    raise ScheduleError(f"{stage.name} is computed at {consumer.name}'s loop {loop.name}, which was "
                                        f"split or fused since; attach after scheduling the consumer")
                for reader in self.s.readers(stage):
                    if reader is not consumer and reader.attach != (consumer, loop) and not reader.inlined:
                        raise ScheduleError(f"{stage.name} is computed inside {consumer.name}'s loop {loop.name}, "
                                            f"but {reader.name} reads it too, outside that loop")

    # --- text -------------------------------------------------------------------------------------

    def emit(self, depth: int, text: str) -> None:
        self.lines.append("    " * depth + text)

    def source(self) -> str:
        if self.trace:
            self.emit(0, "def trace(_touch):")
        else:
            args = [t.name for t in self.s.inputs] + [t.name for t in self.s.outputs]
            self.emit(0, f"def kernel({', '.join(args)}):")
            for stage in self.s.stages.values():
                if stage.tensor not in self.s.outputs and not stage.inlined:
                    self.emit(1, f"{stage.name} = np.empty({stage.tensor.shape}, np.{stage.tensor.dtype})")
        for stage in self.s.stages.values():
            if stage.attach is None and not stage.inlined:
                self.root_stage(stage, 1)
        if len(self.lines) == 1:
            self.emit(1, "pass")
        return "\n".join(self.lines) + "\n"

    def var(self, stage: Stage, loop) -> str:
        """A loop's variable: its name (prefixed by the stage's inside another stage's loop), made
        different from every tensor's name."""
        name = f"{stage.name}_{loop.name}" if stage.attach else loop.name
        while name in self.tensor_names:
            name += "_"
        return name

    def constant(self, value: float, dtype: str) -> str:
        text = repr(float(value)) if dtype.startswith("float") else repr(int(value))
        if text in ("inf", "-inf"):
            text = text.replace("inf", "np.inf")
        return f"np.{dtype}({text})"

    def render(self, e: Expr, env: dict, dtype: str, index: bool = False) -> str:
        if isinstance(e, Const):
            return str(int(e.value)) if index else self.constant(e.value, dtype)
        if isinstance(e, Axis):
            return env[e]
        if isinstance(e, Load):
            stage = self.s.stages.get(e.tensor.name)
            indices = [self.render(i, env, dtype, index=True) for i in e.indices]
            if stage is not None and stage.inlined:
                inner = {a: f"({i})" for a, i in zip(stage.op.axes, indices)}
                return self.render(stage.op.body, inner, dtype)
            return f"{e.tensor.name}[{', '.join(indices)}]"
        if isinstance(e, BinOp):
            return f"({self.render(e.a, env, dtype, index)} {e.op} {self.render(e.b, env, dtype, index)})"
        if isinstance(e, Call):
            return f"{_CALLS[e.name]}({', '.join(self.render(a, env, dtype) for a in e.args)})"
        raise TypeError(f"cannot generate code for {e!r}")

    def touches(self, stage: Stage, env: dict, target: str, target_index: Sequence[str]) -> str:
        """The trace of one iteration: every (expanded) load, then the store."""
        calls = []
        body = stage.op.reduce.body if stage.op.reduce is not None else stage.op.body
        for load in stage._expanded_loads(body):
            index = ", ".join(self.render(i, env, "int64", index=True) for i in load.indices)
            calls.append(f"_touch({load.tensor.name!r}, ({index},))")
        if target is not None:
            calls.append(f"_touch({target!r}, ({', '.join(target_index)},))")
        return "; ".join(calls) if calls else "pass"

    def store(self, depth: int, stage: Stage, env: dict, target: str, index: Sequence[str], local: bool) -> None:
        """``target[index] = value`` (or combined with the old value, for a reduction)."""
        dtype = stage.tensor.dtype
        if self.trace:
            self.emit(depth, self.touches(stage, env, None if local else target, index))
            return
        reduce = stage.op.reduce
        value = self.render(reduce.body if reduce is not None else stage.op.body, env, dtype)
        element = f"{target}[{', '.join(index)}]"
        if reduce is not None:
            value = _COMBINE[reduce.combiner].format(element, value)
        self.emit(depth, f"{element} = {value}")

    def open_loop(self, depth: int, stage: Stage, loop, bounds: tuple[str, str] | None = None):
        """Emit the header of ``loop``; yields the body's depth once per copy (several for an unrolled loop)."""
        name = self.var(stage, loop)
        if loop.annotation == "unroll" and not self.trace:
            for value in range(loop.extent):
                self.emit(depth, f"{name} = {value}  # unrolled")
                yield depth
            return
        if bounds is None:
            span = str(loop.extent)
        elif bounds[1].isdigit():
            span = f"{bounds[0]}, {int(bounds[1]) + 1}"
        else:
            span = f"{bounds[0]}, {bounds[1]} + 1"
        if loop.annotation == "parallel" and not self.trace:
            self.emit(depth, f"for {name} in prange({span}):")
        else:
            note = f"  # {loop.annotation}" if loop.annotation in ("vectorize", "unroll") else ""
            self.emit(depth, f"for {name} in range({span}):{note}")
        yield depth + 1

    # --- a stage at the top level -----------------------------------------------------------------

    def axis_value(self, stage: Stage, loop) -> str:
        """The expression of a (non-leaf) loop's value in the leaf loops."""
        if loop in stage.leaves:
            return self.var(stage, loop)
        for rel in stage.relations:
            if isinstance(rel, Split) and rel.parent is loop:
                outer = self.axis_value(stage, rel.outer)
                outer = f"({outer})" if " " in outer else outer
                return f"{outer} * {rel.factor} + {self.axis_value(stage, rel.inner)}"
            if isinstance(rel, Fuse) and loop is rel.outer:
                return f"({self.axis_value(stage, rel.fused)}) // {rel.inner.extent}"
            if isinstance(rel, Fuse) and loop is rel.inner:
                return f"({self.axis_value(stage, rel.fused)}) % {rel.inner.extent}"
        raise ScheduleError(f"{loop.name} is not a loop of {stage.name}")

    def root_stage(self, stage: Stage, depth: int) -> None:
        env = {axis: self.var(stage, loop) for axis, loop in stage.root.items()}
        spatial = [l for l in stage.leaves if l.kind == "spatial"]
        if stage.op.reduce is not None and stage.local_at is None:
            identity = self.constant(REDUCERS[stage.op.reduce.combiner], stage.tensor.dtype)
            self.nest(stage, spatial, 0, depth, env, lambda d: self.init(d, stage, env, identity))
        self.nest(stage, stage.leaves, 0, depth, env, lambda d: self.body(d, stage, env))

    def init(self, depth: int, stage: Stage, env: dict, identity: str) -> None:
        index = [env[a] for a in stage.op.axes]
        if self.trace:
            self.emit(depth, f"_touch({stage.name!r}, ({', '.join(index)},))")
        else:
            self.emit(depth, f"{stage.name}[{', '.join(index)}] = {identity}")

    def body(self, depth: int, stage: Stage, env: dict) -> None:
        if stage.local_at is not None:
            self.store(depth, stage, env, f"{stage.name}_local", self.local_index(stage)[0], local=True)
        else:
            self.store(depth, stage, env, stage.name, [env[a] for a in stage.op.axes], local=False)

    def nest(self, stage: Stage, leaves: list, k: int, depth: int, env: dict, innermost) -> None:
        """Loops ``leaves[k:]`` of ``stage`` around ``innermost(depth)``, with the axis definitions,
        tail guards, attached stages and local buffer each loop carries."""
        if k == len(leaves):
            innermost(depth)
            return
        loop = leaves[k]
        for inner in self.open_loop(depth, stage, loop):
            def settled(target):  # the value of target is known once this loop is open
                deps = stage.depends(target)
                return deps and deps[-1] is loop and all(d in leaves for d in deps)

            roots = [root for root in stage.root.values() if root not in stage.leaves and settled(root)]
            for root in roots:
                self.emit(inner, f"{self.var(stage, root)} = {self.axis_value(stage, root)}")
            for split in stage.tails():
                if settled(split.parent):
                    defined = any(split.parent is root for root in roots)
                    value = self.var(stage, split.parent) if defined else f"({self.axis_value(stage, split.parent)})"
                    self.emit(inner, f"if {value} < {split.parent.extent}:")
                    inner += 1
            if leaves is stage.leaves:
                for producer in self.attached(stage, loop):
                    regions = self.regions(stage, loop)
                    self.attached_stage(producer, inner, regions[producer.name])
                if loop is stage.local_at:
                    shape, identity = self.local_index(stage)[1], REDUCERS[stage.op.reduce.combiner]
                    if not self.trace:
                        fill = self.constant(identity, stage.tensor.dtype)
                        self.emit(inner, f"{stage.name}_local = np.full({shape}, {fill}, np.{stage.tensor.dtype})")
            self.nest(stage, leaves, k + 1, inner, env, innermost)
            if leaves is stage.leaves and loop is stage.local_at:
                self.write_back(stage, inner)

    # --- cache_write -------------------------------------------------------------------------------

    def local_index(self, stage: Stage) -> tuple[list[str], tuple[int, ...], list[str]]:
        """Per spatial axis: the index into the local buffer (the part of the axis from loops inside
        local_at), the buffer's extent (that part's bounding box), and the base (the part from the loops
        outside)."""
        index, shape, base = [], [], []
        for root, terms in zip(stage.axis, self.inside_terms(stage)):
            coefs = stage.coefficients(root)
            if coefs is None:  # fused, wholly outside (cache_write refuses a fuse inside)
                base.append(f"({self.axis_value(stage, root)})")
            else:
                base.append(" + ".join(_term(self.var(stage, l), c) for l, c in coefs.items()
                                       if (l, c) not in terms) or "0")
            index.append(" + ".join(_term(self.var(stage, l), c) for l, c in terms) or "0")
            shape.append(sum(c * (l.extent - 1) for l, c in terms) + 1)
        return index, tuple(shape), base

    def inside_terms(self, stage: Stage) -> list[list[tuple]]:
        """Per spatial axis, (loop, coefficient) of the loops inside local_at that its value depends on."""
        inside = stage.leaves[stage.leaves.index(stage.local_at) + 1:]
        return [[(l, c) for l, c in (stage.coefficients(root) or {}).items() if l in inside] for root in stage.axis]

    def write_back(self, stage: Stage, depth: int) -> None:
        """Store the local buffer to the output: base (outer loops) + each offset the loops inside
        local_at wrote, in increasing order per axis, tails guarded. Only those offsets: with a split's
        outer part inside local_at and its inner part outside, the buffer holds every factor-th row of
        its bounding box, and storing the whole box would overwrite the rows in between."""
        _, _, bases = self.local_index(stage)
        targets, offsets = [], []
        for root, base, terms in zip(stage.axis, bases, self.inside_terms(stage)):
            parts = []
            for r, (step, count) in enumerate(_runs(terms)):
                name = f"{self.var(stage, root)}_w{r + 1 if r else ''}"
                self.emit(depth, f"for {name} in range({count}):")
                depth += 1
                parts.append(_term(name, step))
            offsets.append(" + ".join(parts))
            targets.append(f"{base} + {offsets[-1]}")
        guards = [f"{t} < {root.extent}" for t, root in zip(targets, stage.axis) if stage.has_tail(root)]
        if guards:
            self.emit(depth, f"if {' and '.join(guards)}:")
            depth += 1
        if self.trace:
            self.emit(depth, f"_touch({stage.name!r}, ({', '.join(targets)},))")
        else:
            self.emit(depth, f"{stage.name}[{', '.join(targets)}] = {stage.name}_local[{', '.join(offsets)}]")

    # --- compute_at -------------------------------------------------------------------------------

    def attached(self, consumer: Stage, loop) -> list[Stage]:
        return [s for s in self.s.stages.values() if s.attach and s.attach[0] is consumer and s.attach[1] is loop]

    def regions(self, consumer: Stage, loop) -> dict[str, list[tuple[str, str]]]:
        """{attached stage: per dimension (lo, hi) expressions} for one iteration of ``loop``."""
        at = consumer.leaves.index(loop)
        outer = consumer.leaves[:at + 1]
        intervals: dict[Axis, object] = {}
        for axis, root in consumer.root.items():
            coefs = consumer.coefficients(root)
            if coefs is None:
                intervals[axis] = None
                continue
            base = tuple(sorted((self.var(consumer, l), c) for l, c in coefs.items() if l in outer))
            spans = [c * (l.extent - 1) for l, c in coefs.items() if l not in outer]
            intervals[axis] = (base, sum(min(0, s) for s in spans), sum(max(0, s) for s in spans))
        attached = self.attached(consumer, loop)
        found: dict[str, list] = {p.name: [None] * p.tensor.ndim for p in attached}
        seen: dict[str, list[bool]] = {p.name: [False] * p.tensor.ndim for p in attached}
        for reader in [consumer] + attached[::-1]:
            if reader is not consumer:
                intervals.update({a: (lo_hi if lo_hi != "full" else None)
                                  for a, lo_hi in zip(reader.op.axes, found[reader.name])})
                intervals.update({a: ((), 0, a.extent - 1) for a in reader.op.reduce_axes})
            body = reader.op.reduce.body if reader.op.reduce is not None else reader.op.body
            for load in reader._expanded_loads(body):
                if load.tensor.name not in found:
                    continue
                for d, index in enumerate(load.indices):
                    got = _interval(index, intervals)
                    old = found[load.tensor.name][d]
                    if not seen[load.tensor.name][d]:
                        found[load.tensor.name][d], seen[load.tensor.name][d] = (got if got else "full"), True
                    elif old == "full" or got is None or old[0] != got[0]:
                        found[load.tensor.name][d] = "full"
                    else:
                        found[load.tensor.name][d] = (old[0], min(old[1], got[1]), max(old[2], got[2]))
        out = {}
        for p in attached:
            dims = []
            for d, n in enumerate(p.tensor.shape):
                got = found[p.name][d]
                if got in (None, "full"):
                    dims.append(("0", str(n - 1)))
                    continue
                base, lo, hi = got
                if not base:
                    dims.append((str(max(0, lo)), str(min(n - 1, hi))))
                else:
                    text = " + ".join(_term(v, c) for v, c in base)
                    dims.append((f"max(0, {_plus(text, lo)})", f"min({n - 1}, {_plus(text, hi)})"))
            out[p.name] = dims
        return out

    def attached_stage(self, stage: Stage, depth: int, region: list[tuple[str, str]]) -> None:
        """``stage``'s own loops over ``region`` (its reduction loops in full), inside a consumer's loop."""
        env = {axis: self.var(stage, loop) for axis, loop in stage.root.items()}
        bounds = {id(stage.root[a]): region[d] for d, a in enumerate(stage.op.axes)}

        def loops(leaves, k, d, innermost):
            if k == len(leaves):
                innermost(d)
                return
            for inner in self.open_loop(d, stage, leaves[k], bounds.get(id(leaves[k]))):
                loops(leaves, k + 1, inner, innermost)

        if stage.op.reduce is not None:
            identity = self.constant(REDUCERS[stage.op.reduce.combiner], stage.tensor.dtype)
            loops([l for l in stage.leaves if l.kind == "spatial"], 0, depth,
                  lambda d: self.init(d, stage, env, identity))
        loops(stage.leaves, 0, depth, lambda d: self.body(d, stage, env))


def _plus(text: str, constant: int) -> str:
    return text if constant == 0 else f"{text} {'+' if constant > 0 else '-'} {abs(constant)}"


def _term(name: str, coefficient: int) -> str:
    return name if coefficient == 1 else f"{coefficient} * {name}"


def _runs(terms: list[tuple]) -> list[tuple[int, int]]:
    """The offsets ``sum(c * l)`` that loops ``(l, c)`` reach along one axis, as runs ``(step, count)``,
    largest step first: the offsets are ``sum(step * w)`` over ``w in range(count)`` of each run. The
    parts of one split chain nested in order make one run of step 1 (a dense block); a part whose
    inner part is missing (outside local_at) starts a strided run."""
    runs: list[tuple[int, int]] = []  # smallest step first
    for loop, c in sorted(((l, c) for l, c in terms if l.extent > 1), key=lambda term: term[1]):
        if runs and c == runs[-1][0] * runs[-1][1]:
            runs[-1] = (runs[-1][0], runs[-1][1] * loop.extent)
        else:
            runs.append((c, loop.extent))
    return runs[::-1] or [(1, 1)]


def _interval(index: Expr, intervals: dict):
    """The range of an affine index over the loops inside the attach point: (base, lo, hi) or None."""
    coefs = affine(index)
    if coefs is None:
        return None
    base: dict[str, int] = {}
    lo = hi = int(coefs.get(None, 0))
    for axis, c in coefs.items():
        if axis is None or c == 0:
            continue
        got = intervals.get(axis)
        if got is None:
            return None
        axis_base, a_lo, a_hi = got
        for v, k in axis_base:
            base[v] = base.get(v, 0) + c * k
        lo, hi = lo + min(c * a_lo, c * a_hi), hi + max(c * a_lo, c * a_hi)
    return tuple(sorted((v, k) for v, k in base.items() if k)), lo, hi


@dataclass
class Kernel:
    """A compiled schedule: ``kernel(*inputs)`` returns the outputs, ``kernel.run(*inputs, *outputs)``
    writes into given outputs (for timing without allocation). ``source`` is the generated Python."""
    source: str
    inputs: list[Tensor]
    outputs: list[Tensor]
    parallel: bool
    _fn: object = field(repr=False, default=None)

    def _function(self):
        if self._fn is None:
            self._fn = _compiled(self.source, self.parallel)
        return self._fn

    def _check(self, arrays: Sequence[np.ndarray], tensors: Sequence[Tensor], what: str) -> list[np.ndarray]:
        if len(arrays) != len(tensors):
            raise ValueError(f"kernel: expected {len(tensors)} {what} ({', '.join(t.name for t in tensors)}), "
                             f"got {len(arrays)}")
        out = []
        for a, t in zip(arrays, tensors):
            if not isinstance(a, np.ndarray) or a.shape != t.shape or a.dtype != np.dtype(t.dtype):
                got = f"{a.dtype} {a.shape}" if isinstance(a, np.ndarray) else type(a).__name__
                raise ValueError(f"kernel: {t.name} must be a {t.dtype} array of shape {t.shape}, got {got}")
            out.append(a)
        return out

    def run(self, *arrays: np.ndarray) -> None:
        n = len(self.inputs)
        ins = self._check(arrays[:n], self.inputs, "inputs")
        outs = self._check(arrays[n:], self.outputs, "outputs")
        for o in outs:
            if not o.flags.writeable or any(np.shares_memory(o, a) for a in ins):
                raise ValueError("kernel: an output array must be writeable and must not overlap an input")
        self._function()(*[np.ascontiguousarray(a) for a in ins], *outs)

    def compile(self) -> Kernel:
        """Compile now (the first call would), so that timing does not count compilation."""
        self._function().compile(tuple(numba.typeof(np.empty(t.shape, t.dtype)) for t in self.inputs + self.outputs))
        return self

    def __call__(self, *inputs: np.ndarray):
        ins = self._check(inputs, self.inputs, "inputs")
        outs = [np.empty(t.shape, t.dtype) for t in self.outputs]
        self._function()(*[np.ascontiguousarray(a) for a in ins], *outs)
        return outs[0] if len(outs) == 1 else outs


#: A folder of this user's, not writable by others, where kernels compiled in one process are kept for
#: others (Numba's on-disk cache): the course's fixture checks set it for the processes they fork, which
#: compile the same schedules again and again. Unset, each process compiles its own kernels.
CACHE_ENV = "MLSYS_KERNEL_CACHE"


@functools.lru_cache(maxsize=256)
def _compiled(source: str, parallel: bool):
    """The ``kernel`` function of the generated ``source``, compiled by Numba (lazily): once per process
    for one source, and kept on disk for other processes in the folder ``$MLSYS_KERNEL_CACHE`` names."""
    options = {"parallel": parallel, "fastmath": FASTMATH, "error_model": "numpy"}
    folder = _cache_folder()
    if folder is None:
        namespace = {"np": np, "prange": numba.prange}
        exec(compile(source, "<mlsys_lib.compiler kernel>", "exec"), namespace)  # noqa: S102 (our own source)
        return numba.njit(**options)(namespace["kernel"])
    key = hashlib.sha256(repr((source, parallel, sorted(FASTMATH), numba.__version__)).encode()).hexdigest()[:32]
    path = folder / f"kernel_{key}.py"
    if not path.exists():  # written once: Numba's cache is valid while the file's time and size stay
        partial = folder / f".{key}.{os.getpid()}.tmp"
        partial.write_text("import numpy as np\nfrom numba import prange\n\n" + source)
        try:
            os.link(partial, path)  # a process beside us may have written it first: keep theirs
        except FileExistsError:
            pass
        finally:
            partial.unlink()
    spec = importlib.util.spec_from_file_location(f"mlsys_kernel_{key}", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # what Numba's cache names when it loads the kernel's parallel parts
    spec.loader.exec_module(module)
    return numba.njit(cache=True, **options)(module.kernel)


def _cache_folder() -> Path | None:
    """The folder ``$MLSYS_KERNEL_CACHE`` names, if it is a folder of this user's that others cannot write."""
    name = os.environ.get(CACHE_ENV)
    if not name or not hasattr(os, "getuid"):
        return None
    try:
        info = os.lstat(name)
    except OSError:
        return None
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o022:
        return None
    return Path(name)


def build(schedule: Schedule) -> Kernel:
    """Generate and (lazily, at the first call or :meth:`Kernel.compile`) compile ``schedule``."""
    source = lower(schedule)
    parallel = any(l.annotation == "parallel" for st in schedule.stages.values() for l in st.leaves)
    return Kernel(source, schedule.inputs, schedule.outputs, parallel)


# A schedule prints as the kernel it generates (``print(s)``, ``s.lower()``): set here, where lowering
# lives, since this module builds on schedule.py and schedule.py does not import it.
Schedule.lower = Schedule.__str__ = lower

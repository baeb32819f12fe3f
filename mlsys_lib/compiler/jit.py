"""JIT capture with guards: TorchDynamo's idea (``torch.compile``) small enough to read in one sitting.

``@jit`` turns a Python function over :mod:`mlsys_lib.autodiff` tensors into a :class:`Compiled`
function. Each call computes its *guard key* (:func:`~.guards.guard_key`); a key seen before runs
what was compiled for it (a *hit*), a new key compiles (a *miss*)::

    @jit
    def layer(x, w, scale, relu):
        y = (x @ w) * scale
        return y.relu() if relu else y

    layer(x5, w, 2.0, True)    # miss: trace, capture, optimize                (compiles == 1)
    layer(x7, w, 2.0, True)    # hit: lengths 5 and 7 share the bucket 8       (hits == 1)
    layer(x7, w, 2.0, False)   # miss: the branch taken on `relu` is in the key  (compiles == 2)

**Compiling** traces the function: array arguments become placeholders of the *bucket's* shape, Python
values are passed as they are, so ``if relu:`` runs in Python and only the branch taken is recorded
(which is why the value is in the guard). :func:`~mlsys_lib.graph.from_autodiff` captures the graph
IR and the passes (default :data:`~mlsys_lib.graph.INFERENCE_PASSES`) optimize it. A call zero-pads
its arrays up to the bucket, runs the graph with :func:`mlsys_lib.graph.evaluate` (the numpy
interpreter of the IR) and slices the outputs back to the shapes the ops' shape rules give for the
exact inputs (:func:`~.guards.output_shapes`, which also rejects shapes that padding would make fit).

**What bucketing buys, and when it may not**: one compile serves every length of a bucket (5 to 8),
but only if padding cannot change a real output. :func:`~.guards.padding_problem` checks the graph
(no op may mix padded positions into real ones: ``exp(x) @ w`` would add ``exp(0) = 1`` per padded
column), and the function is traced a second time, at the bucket's smallest shapes: a function that
reads a length (``x * (1 / x.shape[0])``) or branches on one gives another program there. If either
check fails, the key becomes a ``"per-shape"`` entry with the reason, and that bucket compiles once
per exact shape instead: slower, never wrong. By default every axis is bucketed; weights closed over
(constants of exact shape) do not fit a padded feature axis, so bucket the batch axis alone there:
``@jit(bucket={"x": 0})``.

**Graph breaks**: asking a traced tensor for its value (``if t:``, ``t.item()``, ``t.numpy()``,
``np.asarray(t)``: data-dependent control flow) raises :class:`GraphBreak` while tracing, as does an
op the graph IR cannot capture (``sum``, ``tanh``, ...). The break is recorded once in
``graph_breaks``, naming the function and the line, and that key runs the function eagerly from then
on, with no further trace. (TorchDynamo would compile the pieces on either side of the break; here
the whole function runs eagerly.)

Results are numpy arrays (inference only: no gradients), never aliasing an argument. Not guarded,
as in ``jax.jit``: globals and closed-over values (read at trace time and baked in as constants) and
Python side effects (they happen while tracing, up to twice per compile). The length check samples
two lengths, so a branch on one particular length (``if n == 6``) goes unseen. ``float(t)`` and
``int(t)`` are not defined for autodiff tensors at all (``t.item()`` is).
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import os
import threading
import traceback
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from mlsys_lib import autodiff
from mlsys_lib.autodiff import Tensor, no_grad, placeholder, topological_order
from mlsys_lib.graph import INFERENCE_PASSES, Graph, Node, PassManager, evaluate, from_autodiff
from mlsys_lib.graph.capture import CAPTURED
from mlsys_lib.graph.ir import attrs_key

from .guards import (ARRAYS, Bucket, Shape, array_value, bucket_axes, bucket_shape, guard_key, may_pad, output_shapes,
                     padding_problem, smallest_shape)

Pass = Callable[[Graph], Graph]
EXACT = ("exact",)
"""Tags the keys of a bucket compiled per exact shape: ``EXACT + guard_key(args, kwargs, bucket=False)``."""


class GraphBreak(Exception):
    """Tracing cannot go on: a traced tensor's value was needed (data-dependent control flow).

    Raised while tracing by ``bool(t)``, ``t.item()``, ``t.numpy()`` and ``np.asarray(t)`` of a traced
    tensor; a traced function may raise it itself to run eagerly.
    """


_TRACE_LOCK = threading.RLock()


@contextlib.contextmanager
def tracing() -> Iterator[None]:
    """Within the block a symbolic (traced) tensor asked for its value raises :class:`GraphBreak`.

    Outside a trace ``.numpy()`` (behind ``.item()`` and ``np.asarray``) raises TypeError, and
    ``bool(t)`` is True for every Tensor, as for any object (autodiff defines no ``__bool__``), so an
    ``if t:`` in a trace would silently take one branch. The two methods are swapped on the Tensor
    class for the block and restored after it; eager tensors behave as before, and one thread traces
    at a time.
    """
    numpy, truth = Tensor.__dict__["numpy"], Tensor.__dict__.get("__bool__")

    def traced_numpy(self: Tensor) -> np.ndarray:
        if self.data is None:
            raise GraphBreak("the value of a traced tensor (.item(), .numpy(), np.asarray): "
                             "data-dependent control flow")
        return numpy(self)

    def traced_bool(self: Tensor) -> bool:
        if self.data is None:
            raise GraphBreak("bool() of a traced tensor: data-dependent control flow")
        return True if truth is None else truth(self)

    with _TRACE_LOCK:
        Tensor.numpy, Tensor.__bool__ = traced_numpy, traced_bool
        try:
            yield
        finally:
            Tensor.numpy = numpy
            if truth is None:
                del Tensor.__bool__
            else:
                Tensor.__bool__ = truth


@dataclass
class CacheEntry:
    """What one guard key compiled to.

    kind: ``"graph"`` (run ``graph``, the optimized ``traced``), ``"eager"`` (a graph break, ``reason``:
        the function runs eagerly) or ``"per-shape"`` (padding to this bucket would be wrong, ``reason``
        says why: the exact shapes are keyed, under ``("exact", *exact key)``).
    structure: how the function returned its outputs: None (one), tuple or list.
    output_shapes: exact input shapes -> exact output shapes, for the calls a padded graph served.
    """

    kind: str
    reason: str = ""
    traced: Graph | None = None
    graph: Graph | None = None
    structure: type | None = None
    output_shapes: dict[tuple, list[Shape]] = field(default_factory=dict, repr=False)


class Compiled:
    """A function compiled per guard key (see the module docstring). Made by :func:`jit`.

    cache: guard key -> :class:`CacheEntry`.  compiles, hits: calls that compiled / found their key.
    graph_breaks: the reason of every graph break, once per key that broke.
    """

    def __init__(self, fn: Callable, bucket: Bucket, passes: Sequence[Pass]):
        self.fn, self.bucket, self.passes = fn, bucket, tuple(passes)
        self.cache: dict[tuple, CacheEntry] = {}
        self.compiles = self.hits = 0
        self.graph_breaks: list[str] = []
        self._name = getattr(fn, "__qualname__", repr(fn))
        self._positional = _positional_names(fn)
        functools.update_wrapper(self, fn)

    def __repr__(self) -> str:
        return (f"<Compiled {self._name}: {self.compiles} compiles, {self.hits} hits, "
                f"{len(self.graph_breaks)} graph breaks>")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if any(isinstance(v, Tensor) and v.is_symbolic for v in (*args, *kwargs.values())):
            return self.fn(*args, **kwargs)  # called while another function is traced: inline it
        names, arrays = self._names(len(args)), self._arrays(args, kwargs)
        key = guard_key(args, kwargs, self.bucket, names)
        entry = self.cache.get(key)
        if entry is not None and entry.kind == "per-shape":
            key = EXACT + guard_key(args, kwargs, False, names)
            entry = self.cache.get(key)
        if entry is None:
            entry = self._compile(key, args, kwargs, {name: array.shape for name, array in arrays.items()})
            self.compiles += 1
        else:
            self.hits += 1
        if entry.kind == "eager":
            return self._run_eagerly(args, kwargs, arrays)
        return _pack(entry.structure, [_own(out, arrays.values()) for out in _run_graph(entry, arrays)])

    # -- compiling -----------------------------------------------------------------------------
    def _compile(self, key: tuple, args: tuple, kwargs: dict, exact: Mapping[str, Shape]) -> CacheEntry:
        """Trace, check and optimize for ``key`` (``exact``: the call's array shapes); the entries made go
        into the cache."""
        if key[:1] != EXACT:
            entry, problem = self._trace_bucket(args, kwargs, exact)
            if problem is None:
                return self._keep(key, entry)
            self.cache[key] = CacheEntry("per-shape", reason=problem)
            key = EXACT + guard_key(args, kwargs, False, self._names(len(args)))
        return self._keep(key, self._trace(args, kwargs, exact))

    def _keep(self, key: tuple, entry: CacheEntry) -> CacheEntry:
        """Cache ``entry``: a graph optimized by the passes, a graph break recorded."""
        if entry.kind == "graph":
            entry.graph = PassManager(self.passes).run(entry.traced)
        else:
            self.graph_breaks.append(entry.reason)
        self.cache[key] = entry
        return entry

    def _trace_bucket(self, args: tuple, kwargs: dict,
                      exact: Mapping[str, Shape]) -> tuple[CacheEntry | None, str | None]:
        """The trace at the bucket's shapes, and why it cannot serve the whole bucket (None: it can).

        The traces at shapes the call does not have are probes: their errors do not fail the call (the
        trace at the exact shapes, made instead, raises them if they are the function's own)."""
        axes = {name: bucket_axes(self.bucket, name) for name in exact}
        bucket = {name: bucket_shape(shape, axes[name]) for name, shape in exact.items()}
        try:
            entry = self._trace(args, kwargs, bucket)
        except Exception as error:  # e.g. a constant of the exact length does not fit the bucket's
            if bucket == exact:
                raise
            return None, f"tracing at the bucket's shapes failed: {error}"
        if entry.kind == "eager":  # eager runs at the exact shapes: right for every shape in the bucket
            return entry, None
        problem = padding_problem(entry.traced, {name: may_pad(s, axes[name]) for name, s in bucket.items()})
        smallest = {name: smallest_shape(shape, axes[name]) for name, shape in bucket.items()}
        if problem is None and smallest != bucket:
            try:
                other = self._trace(args, kwargs, smallest)
            except Exception:
                other = None
            if other is None or other.kind == "eager" or _program(other) != _program(entry):
                problem = "the trace depends on the exact lengths: at the bucket's smallest shapes it differs"
        return entry, problem

    def _trace(self, args: tuple, kwargs: dict, shapes: Mapping[str, Shape]) -> CacheEntry:
        """Run the function on placeholders of ``shapes`` and capture it: a ``"graph"`` entry (not yet
        optimized) or, at a graph break, an ``"eager"`` one."""
        args, kwargs = self._substitute(args, kwargs, lambda name, v: placeholder(shapes[name], name, v.dtype))
        with tracing():
            try:
                result = self.fn(*args, **kwargs)
            except GraphBreak as error:
                return CacheEntry("eager", reason=f"{self._name} ({_user_line(error)}): {error}")
        structure, outputs = _outputs(result, self._name)
        for node in topological_order(outputs):
            if node.op is not None and node.op.name not in CAPTURED:
                return CacheEntry("eager", reason=f"{self._name}: op {node.op.name!r} has no graph-IR equivalent "
                                                  f"(captured ops: {', '.join(CAPTURED)})")
        return CacheEntry("graph", traced=from_autodiff(outputs), structure=structure)

    # -- calling -------------------------------------------------------------------------------
    def _run_eagerly(self, args: tuple, kwargs: dict, arrays: Mapping[str, np.ndarray]) -> Any:
        args, kwargs = self._substitute(args, kwargs, lambda name, v: Tensor(arrays[name]))
        with no_grad():
            structure, outputs = _outputs(self.fn(*args, **kwargs), self._name)
        return _pack(structure, [_own(out.numpy(), arrays.values()) for out in outputs])

    def _names(self, count: int) -> list[str]:
        """The names of ``count`` positional arguments: the parameters' (``arg<i>`` beyond them)."""
        return [self._positional[i] if i < len(self._positional) else f"arg{i}" for i in range(count)]

    def _substitute(self, args: tuple, kwargs: dict, make: Callable[[str, Any], Any]) -> tuple[tuple, dict]:
        """The arguments with each array ``v`` replaced by ``make(its name, v)``."""
        def swap(name: str, v: Any) -> Any:
            return make(name, v) if isinstance(v, ARRAYS) else v
        return (tuple(swap(name, v) for name, v in zip(self._names(len(args)), args)),
                {name: swap(name, v) for name, v in kwargs.items()})

    def _arrays(self, args: tuple, kwargs: dict) -> dict[str, np.ndarray]:
        """name -> numpy value of every array argument."""
        named = [*zip(self._names(len(args)), args), *kwargs.items()]
        return {name: array_value(v) for name, v in named if isinstance(v, ARRAYS)}


def jit(fn: Callable | None = None, *, bucket: Bucket = True,
        passes: Sequence[Pass] = INFERENCE_PASSES) -> Compiled | Callable[[Callable], Compiled]:
    """Compile ``fn`` per guard key: ``jit(fn)``, ``@jit`` or ``@jit(bucket={"x": 0})``.

    bucket: the axes rounded up to a power of two in the key (:data:`~.guards.Bucket`): True every axis
        of every array argument, False none, ``{"x": 0}`` the leading axis of ``x`` only (then weights
        closed over, whose lengths need not be powers of two, still fit the padded batch).
    passes: the graph passes, run by a :class:`~mlsys_lib.graph.PassManager` to a fixed point.
    TypeError for a ``fn`` that is not callable, a malformed ``bucket``, a pass that is not callable;
    ValueError for a ``bucket`` naming no parameter of ``fn``.
    """
    if fn is None:
        return functools.partial(jit, bucket=bucket, passes=passes)
    if not callable(fn):
        raise TypeError(f"jit: expects a function to compile, got {type(fn).__name__} {fn!r}")
    if not all(callable(p) for p in passes):
        raise TypeError(f"jit: every pass must be a function Graph -> Graph, got {list(passes)!r}")
    for name in bucket if isinstance(bucket, Mapping) else [""]:
        bucket_axes(bucket, name)  # TypeError unless True, False or a mapping from names to axes
    unknown = _unknown_names(fn, bucket) if isinstance(bucket, Mapping) else []
    if unknown:
        raise ValueError(f"jit: bucket names {unknown}, which are not parameters of {fn.__qualname__}"
                         f"{inspect.signature(fn)}")
    return Compiled(fn, bucket, passes)


# -- helpers ---------------------------------------------------------------------------------------
def _parameters(fn: Callable) -> list[inspect.Parameter]:
    """``fn``'s parameters, [] if Python cannot tell (some builtins)."""
    try:
        return list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return []


def _positional_names(fn: Callable) -> list[str]:
    """The names of ``fn``'s positional parameters (placeholders are named after them)."""
    return [p.name for p in _parameters(fn) if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]


def _unknown_names(fn: Callable, names: Iterable[str]) -> list[str]:
    """The ``names`` that name no parameter of ``fn`` (none when it takes ``*args`` or ``**kwargs``)."""
    parameters = _parameters(fn)
    if not parameters or any(p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in parameters):
        return []
    return [name for name in names if name not in {p.name for p in parameters}]


_LIBRARY = (os.path.dirname(autodiff.__file__) + os.sep, __file__)


def _user_line(error: BaseException) -> str:
    """``file:line `source``` of the innermost frame of the traceback outside this module and autodiff."""
    frames = [f for f in traceback.extract_tb(error.__traceback__) if not f.filename.startswith(_LIBRARY)]
    if not frames:
        return "unknown line"
    frame = frames[-1]
    return f"{os.path.basename(frame.filename)}:{frame.lineno} `{frame.line}`"


def _outputs(result: Any, name: str) -> tuple[type | None, list[Tensor]]:
    """(None, [t]) for one output, (tuple or list, [t, ...]) for several; numbers and arrays become constants."""
    if isinstance(result, (tuple, list)):
        structure, items = list if isinstance(result, list) else tuple, list(result)
    else:
        structure, items = None, [result]
    allowed = (Tensor, np.ndarray, np.generic, bool, int, float)
    if not items or not all(isinstance(item, allowed) for item in items):
        raise TypeError(f"{name} returned {result!r}; a compiled function must return a Tensor or a non-empty "
                        f"tuple or list of Tensors (arrays and numbers are taken as constants)")
    return structure, [item if isinstance(item, Tensor) else Tensor(np.asarray(item)) for item in items]


def _pack(structure: type | None, arrays: list[np.ndarray]) -> Any:
    return arrays[0] if structure is None else structure(arrays)


def _own(array: np.ndarray, arguments: Any) -> np.ndarray:
    """``array``, copied if it is read-only (a constant) or may share memory with an argument."""
    if not array.flags.writeable or any(np.may_share_memory(array, a) for a in arguments):
        return array.copy()
    return array


def _program(entry: CacheEntry) -> tuple:
    """A traced entry without its shapes: what two traces at different lengths must share."""
    def attributes(node: Node) -> tuple:
        return attrs_key({k: v for k, v in node.attrs.items() if (node.op, k) != ("input", "shape")})
    graph = entry.traced
    return entry.structure, graph.outputs, tuple((n.name, n.op, n.inputs, attributes(n)) for n in graph)


def _run_graph(entry: CacheEntry, arrays: Mapping[str, np.ndarray]) -> list[np.ndarray]:
    """The graph's outputs for these arguments: padded up to the shapes it was traced at, sliced back."""
    traced, graph = entry.traced, entry.graph
    exact = tuple((name, arrays[name].shape) for name in traced.inputs)
    if exact not in entry.output_shapes:
        entry.output_shapes[exact] = output_shapes(traced, dict(exact))
    feeds = {name: _pad(arrays[name], graph[name].shape) for name in graph.inputs}
    return [out[tuple(slice(0, n) for n in shape)]
            for out, shape in zip(evaluate(graph, feeds), entry.output_shapes[exact])]


def _pad(array: np.ndarray, shape: Shape) -> np.ndarray:
    """``array`` with zeros appended on every axis up to ``shape``."""
    if array.shape == shape:
        return array
    return np.pad(array, [(0, n - m) for m, n in zip(array.shape, shape)])

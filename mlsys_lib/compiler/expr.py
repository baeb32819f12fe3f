"""Tensor expressions: *what* an operator computes, with no word about loops (Halide's "algorithm").

A :class:`Tensor` is either a :func:`placeholder` (an input) or the result of :func:`compute`, which
gives the value of every output element as an expression of its index variables::

    A = placeholder((n, k), "A")
    B = placeholder((k, m), "B")
    r = reduce_axis(k, "k")
    C = compute((n, m), lambda i, j: sum(A[i, r] * B[r, j], r), "C")

Expressions are small trees: :class:`Const`, :class:`Axis` (an index variable with its extent),
:class:`Load` (``A[i, k]``), :class:`BinOp` (``+ - * /``), :class:`Call` (``exp``, ``maximum``) and
:class:`Reduce` (``sum``/``max`` over reduction axes, only at the top of a compute's body). Index
expressions are affine in the axes (``y * 2 + ry``); :func:`affine` reads their coefficients.
The schedule (:mod:`.schedule`) decides the loops; :func:`mlsys_lib.compiler.evaluate` is the meaning.
"""

from __future__ import annotations

import builtins
import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

DTYPES = ("float32", "float64", "int32", "int64")
REDUCERS = {"sum": 0.0, "max": -np.inf}  # combiner -> identity


class Expr:
    """An expression tree node; ``+ - * /`` and unary ``-`` build :class:`BinOp` nodes."""

    def __add__(self, other): return BinOp("+", self, as_expr(other))
    def __radd__(self, other): return BinOp("+", as_expr(other), self)
    def __sub__(self, other): return BinOp("-", self, as_expr(other))
    def __rsub__(self, other): return BinOp("-", as_expr(other), self)
    def __mul__(self, other): return BinOp("*", self, as_expr(other))
    def __rmul__(self, other): return BinOp("*", as_expr(other), self)
    def __truediv__(self, other): return BinOp("/", self, as_expr(other))
    def __rtruediv__(self, other): return BinOp("/", as_expr(other), self)
    def __neg__(self): return BinOp("-", Const(0), self)

    def __bool__(self):
        raise TypeError("a tensor expression has no truth value: it is a formula, not a number "
                        "(use maximum()/minimum() instead of if/else)")


@dataclass(frozen=True, eq=False)
class Const(Expr):
    value: float


@dataclass(frozen=True, eq=False)
class Axis(Expr):
    """An index variable: ``kind`` is "spatial" (an output index) or "reduce" (summed over)."""
    name: str
    extent: int
    kind: str = "spatial"

    def __repr__(self):
        return f"Axis({self.name}, {self.extent}, {self.kind})"


@dataclass(frozen=True, eq=False)
class Load(Expr):
    tensor: Tensor
    indices: tuple[Expr, ...]


@dataclass(frozen=True, eq=False)
class BinOp(Expr):
    op: str
    a: Expr
    b: Expr


@dataclass(frozen=True, eq=False)
class Call(Expr):
    name: str
    args: tuple[Expr, ...]


@dataclass(frozen=True, eq=False)
class Reduce(Expr):
    combiner: str
    body: Expr
    axes: tuple[Axis, ...]


@dataclass(eq=False)
class Tensor:
    """A named array of ``shape``; ``op`` is None for a placeholder, else its :class:`ComputeOp`."""
    name: str
    shape: tuple[int, ...]
    dtype: str = "float32"
    op: ComputeOp | None = field(default=None, repr=False)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def __getitem__(self, index) -> Load:
        index = index if isinstance(index, tuple) else (index,)
        if len(index) != self.ndim:
            raise IndexError(f"{self.name} has {self.ndim} dimensions {self.shape}, indexed with {len(index)}")
        return Load(self, tuple(as_expr(i) for i in index))

    def __repr__(self):
        return f"Tensor({self.name}, {self.shape}, {self.dtype})"


@dataclass(eq=False)
class ComputeOp:
    """``output[axes] = body``: ``axes`` the spatial axes (one per output dimension), ``body`` may be a
    :class:`Reduce` at its top; ``inputs`` the tensors it reads, in order of first use."""
    axes: tuple[Axis, ...]
    body: Expr
    inputs: tuple[Tensor, ...]

    @property
    def reduce(self) -> Reduce | None:
        return self.body if isinstance(self.body, Reduce) else None

    @property
    def reduce_axes(self) -> tuple[Axis, ...]:
        return self.reduce.axes if self.reduce is not None else ()


def as_expr(value) -> Expr:
    if isinstance(value, Expr):
        return value
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise TypeError(f"cannot use {value!r} ({type(value).__name__}) in a tensor expression: "
                        f"expected a number, an axis or a tensor element")
    return Const(value.item() if isinstance(value, np.generic) else value)


def _check_shape(shape, what: str) -> tuple[int, ...]:
    shape = tuple(shape) if isinstance(shape, (tuple, list)) else (shape,)
    if not shape or not all(isinstance(s, (int, np.integer)) and not isinstance(s, bool) and s > 0 for s in shape):
        raise ValueError(f"{what}: shape must be a non-empty tuple of positive ints, got {shape!r}")
    return tuple(int(s) for s in shape)


def _check_dtype(dtype) -> str:
    name = np.dtype(dtype).name
    if name not in DTYPES:
        raise ValueError(f"dtype {name!r} is not supported; use one of {DTYPES}")
    return name


def placeholder(shape: Sequence[int], name: str, dtype="float32") -> Tensor:
    """An input tensor of ``shape`` (positive ints) and ``dtype`` (float32 by default)."""
    if not isinstance(name, str) or not name.isidentifier():
        raise ValueError(f"placeholder name must be a Python identifier, got {name!r}")
    return Tensor(name, _check_shape(shape, f"placeholder {name}"), _check_dtype(dtype))


def reduce_axis(extent: int, name: str) -> Axis:
    """A reduction axis over ``range(extent)``, used in :func:`sum`/:func:`max` and indexing."""
    if not isinstance(name, str) or not name.isidentifier():
        raise ValueError(f"axis name must be a Python identifier, got {name!r}")
    return Axis(name, _check_shape(extent, f"reduce_axis {name}")[0], "reduce")


def _reduce(combiner: str, body, axes) -> Reduce:
    axes = tuple(axes) if isinstance(axes, (tuple, list)) else (axes,)
    if not axes or not all(isinstance(a, Axis) and a.kind == "reduce" for a in axes):
        raise TypeError(f"{combiner}(body, axes): axes must be reduce_axis()es, got {axes!r}")
    return Reduce(combiner, as_expr(body), axes)


def sum(body, axes) -> Reduce:  # noqa: A001 (te.sum's name)
    """The sum of ``body`` over the reduction axes ``axes`` (one Axis or a tuple)."""
    return _reduce("sum", body, axes)


def max(body, axes) -> Reduce:  # noqa: A001
    """The maximum of ``body`` over the reduction axes ``axes``."""
    return _reduce("max", body, axes)


def exp(x) -> Call:
    return Call("exp", (as_expr(x),))


def sqrt(x) -> Call:
    return Call("sqrt", (as_expr(x),))


def maximum(a, b) -> Call:
    return Call("maximum", (as_expr(a), as_expr(b)))


def minimum(a, b) -> Call:
    return Call("minimum", (as_expr(a), as_expr(b)))


def children(e: Expr) -> tuple[Expr, ...]:
    if isinstance(e, Load):
        return e.indices
    if isinstance(e, BinOp):
        return (e.a, e.b)
    if isinstance(e, Call):
        return e.args
    if isinstance(e, Reduce):
        return (e.body,)
    return ()


def walk(e: Expr):
    """Every node of the tree under ``e``, parents first."""
    yield e
    for c in children(e):
        yield from walk(c)


def loads(e: Expr) -> list[Load]:
    return [n for n in walk(e) if isinstance(n, Load)]


def compute(shape: Sequence[int], fcompute: Callable[..., Expr], name: str, dtype=None) -> Tensor:
    """The tensor ``out[i, j, ...] = fcompute(i, j, ...)``; the axes take ``fcompute``'s parameter names.

    ``dtype`` defaults to that of the first tensor read. A :class:`Reduce` may only be the whole body.
    """
    shape = _check_shape(shape, f"compute {name}")
    if not isinstance(name, str) or not name.isidentifier():
        raise ValueError(f"compute name must be a Python identifier, got {name!r}")
    params = list(inspect.signature(fcompute).parameters)
    if len(params) != len(shape):
        raise ValueError(f"compute {name}: shape {shape} has {len(shape)} dimensions but fcompute takes "
                         f"{len(params)} index arguments {params}")
    axes = tuple(Axis(p, s) for p, s in zip(params, shape))
    body = as_expr(fcompute(*axes))
    for node in walk(body):
        if isinstance(node, Reduce) and node is not body:
            raise ValueError(f"compute {name}: a sum/max must be the whole body (write the rest as another compute)")
    inputs: list[Tensor] = []
    allowed = set(map(id, axes)) | ({id(a) for a in body.axes} if isinstance(body, Reduce) else set())
    for node in walk(body):
        if isinstance(node, Axis) and id(node) not in allowed:
            raise ValueError(f"compute {name}: axis {node.name!r} is not one of its index arguments or the "
                             f"reduction axes of its sum/max")
        if isinstance(node, Load):
            if node.tensor not in inputs:
                inputs.append(node.tensor)
            for index in node.indices:
                if affine(index) is None:
                    raise ValueError(f"compute {name}: index {show(index)} of {node.tensor.name} is not affine "
                                     f"in the axes (sums of integer multiples of axes and constants)")
    names = [a.name for a in axes] + [a.name for a in (body.axes if isinstance(body, Reduce) else ())]
    if len(set(names)) != len(names):
        raise ValueError(f"compute {name}: axis names must differ, got {names}")
    if dtype is None:
        dtype = inputs[0].dtype if inputs else "float32"
    out = Tensor(name, shape, _check_dtype(dtype))
    out.op = ComputeOp(axes, body, tuple(inputs))
    return out


def affine(e: Expr) -> dict | None:
    """``e`` as {Axis or None (the constant): integer coefficient}, or None when it is not affine."""
    if isinstance(e, Const):
        return {None: e.value} if float(e.value).is_integer() else None
    if isinstance(e, Axis):
        return {e: 1}
    if isinstance(e, BinOp) and e.op in "+-":
        a, b = affine(e.a), affine(e.b)
        if a is None or b is None:
            return None
        sign = 1 if e.op == "+" else -1
        out = dict(a)
        for key, c in b.items():
            out[key] = out.get(key, 0) + sign * c
        return out
    if isinstance(e, BinOp) and e.op == "*":
        a, b = affine(e.a), affine(e.b)
        if a is None or b is None:
            return None
        for const, other in ((a, b), (b, a)):
            if builtins.set(const) <= {None}:
                k = const.get(None, 0)
                return {key: k * c for key, c in other.items()}
    return None


def show(e: Expr) -> str:
    """``e`` as readable text (also valid Python for the generated kernels)."""
    if isinstance(e, Const):
        return repr(e.value)
    if isinstance(e, Axis):
        return e.name
    if isinstance(e, Load):
        return f"{e.tensor.name}[{', '.join(show(i) for i in e.indices)}]"
    if isinstance(e, BinOp):
        return f"({show(e.a)} {e.op} {show(e.b)})"
    if isinstance(e, Call):
        return f"{e.name}({', '.join(show(a) for a in e.args)})"
    if isinstance(e, Reduce):
        return f"{e.combiner}({show(e.body)}, axes=[{', '.join(a.name for a in e.axes)}])"
    raise TypeError(f"not an expression: {e!r}")


def producers(outputs: Sequence[Tensor]) -> list[Tensor]:
    """Every tensor the outputs depend on, themselves included, inputs before their readers."""
    order: list[Tensor] = []

    def visit(t: Tensor):
        if t in order:
            return
        for x in (t.op.inputs if t.op else ()):
            visit(x)
        order.append(t)

    for t in outputs:
        if not isinstance(t, Tensor):
            raise TypeError(f"expected a Tensor, got {type(t).__name__}")
        visit(t)
    names = [t.name for t in order]
    if len(set(names)) != len(names):
        raise ValueError(f"two tensors share a name in {names}: every placeholder and compute needs its own")
    return order

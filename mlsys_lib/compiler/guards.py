"""Guards: the key a JIT's cache is looked up by, and when one bucketed key may serve several shapes.

A trace is specialized to what it saw. The *guard* is everything the trace depended on, so a call
with the same guard may reuse the compiled graph and any other call must compile again:

* per array argument (numpy array, numpy scalar or autodiff Tensor) its dtype and its shape, with the
  *bucketed* axes rounded up to a power of two (:func:`next_power_of_two`): lengths 5, 6, 7 and 8
  share the bucket 8, so a new length need not recompile (the lecture: "compile for different values
  of x (powers of 2)"). A numpy scalar is a 0-d array, ``np.float64`` too although it is also a
  Python float: the compiled function takes it as an input, not as a constant;
* per Python value (bool, int, float, str, None, tuples and lists of these) its type and its value:
  the trace ran Python code on it (``if flag:``), so the graph has it baked in.

One graph serves a whole bucket when the inputs are zero-padded to the bucket's shape and the outputs
are sliced back. That is exact only if no padded position reaches a real output:
:func:`padding_problem` checks a graph for it, and :func:`output_shapes` gives the shapes to slice to.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from mlsys_lib.autodiff import Tensor
from mlsys_lib.graph import Graph, Node
from mlsys_lib.graph.ops import OPS

Shape = tuple[int, ...]
Axes = tuple[int, ...] | None  # the bucketed axes of one array: None all of them
Bucket = bool | Mapping[str, int | Sequence[int]]
"""Which axes a guard rounds up: True every axis of every array argument, False none (exact shapes),
``{name: axes}`` these axes of these arguments and no others (``{"x": 0}``: the leading, batch axis of
``x``, the lecture's "[x, c1, c2] where x is variable"). Negative axes count from the end."""

SCALARS = (bool, int, float, str, type(None))
ARRAYS = (np.ndarray, np.generic, Tensor)


def next_power_of_two(n: int) -> int:
    """The smallest power of two >= n: 1 -> 1, 3 -> 4, 8 -> 8, 9 -> 16. An empty axis stays empty: 0 -> 0
    (a bucket of its own, so an empty input is never padded with values that are not there)."""
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)):
        raise TypeError(f"next_power_of_two: expects an int, got {type(n).__name__}")
    if n < 0:
        raise ValueError(f"next_power_of_two: expects n >= 0, got {n}")
    return 0 if n == 0 else 1 << (int(n) - 1).bit_length()


def bucket_axes(bucket: Bucket, name: str) -> Axes:
    """The axes of argument ``name`` that ``bucket`` rounds up (None: all). TypeError for a bucket that
    is not a bool or a mapping from names to an int or a sequence of ints."""
    if isinstance(bucket, bool):
        return None if bucket else ()
    if isinstance(bucket, Mapping):
        axes = bucket.get(name, ())
        axes = (axes,) if isinstance(axes, int) and not isinstance(axes, bool) else axes
        if isinstance(axes, Sequence) and all(isinstance(a, int) and not isinstance(a, bool) for a in axes):
            return tuple(axes)
    raise TypeError(f"bucket must be True, False or a mapping from argument names to axes (an int or a sequence "
                    f"of ints), got {bucket!r}")


def bucket_shape(shape: Shape, axes: Axes) -> Shape:
    """``shape`` with ``axes`` (None: all) rounded up to a power of two."""
    return tuple(next_power_of_two(n) if _bucketed(a, len(shape), axes) else n for a, n in enumerate(shape))


def _bucketed(axis: int, ndim: int, axes: Axes) -> bool:
    return axes is None or axis in axes or axis - ndim in axes


def may_pad(bucket: Shape, axes: Axes) -> tuple[bool, ...]:
    """Per axis of a bucket's shape: whether the bucket holds several lengths there (bucket 4: 3 and 4;
    bucket 8: 5 to 8), so that a call may have to pad it. Buckets 0, 1 and 2 hold one length each."""
    return tuple(_bucketed(a, len(bucket), axes) and n > 2 for a, n in enumerate(bucket))


def smallest_shape(bucket: Shape, axes: Axes) -> Shape:
    """The smallest shape in the bucket: ``n // 2 + 1`` on every axis that may be padded."""
    return tuple(n // 2 + 1 if padded else n for n, padded in zip(bucket, may_pad(bucket, axes)))


def array_value(value: Any) -> np.ndarray:
    """An array argument's value as a numpy array (an autodiff Tensor's data, a numpy scalar as 0-d)."""
    return value.numpy() if isinstance(value, Tensor) else np.asarray(value)


def guard_key(args: Sequence[Any], kwargs: Mapping[str, Any] | None = None, bucket: Bucket = True,
              names: Sequence[str] | None = None) -> tuple:
    """The guard of a call ``f(*args, **kwargs)``: a hashable tuple, equal for calls one trace may serve.

    * array (numpy array or scalar, ``np.float64`` included, autodiff Tensor): ``("array", dtype, shape)``,
      the shape bucketed (:data:`Bucket`; names: the positional arguments' names, default ``arg0``, ...);
    * Python value: ``(type name, repr)``. The type keeps ``True``, ``1`` and ``1.0`` apart (equal and
      hash-equal in Python, yet the trace bakes in a bool, int or float constant and may branch on its
      type); the repr keeps ``0.0`` and ``-0.0`` apart (``x / c`` gives +inf or -inf) and makes every
      NaN the same key, so a NaN argument hits the cache although ``nan != nan``;
    * tuple or list of Python values: ``(type name, keys of the items)``.

    Keywords are keyed by name, sorted. TypeError naming the argument for anything else (an array or
    numpy scalar inside a tuple or list included: pass arrays as arguments of their own) and for arrays
    of non-numeric dtype.
    """
    names = [f"arg{i}" for i in range(len(args))] if names is None else list(names)
    if len(names) != len(args):
        raise ValueError(f"guard_key: {len(names)} names for {len(args)} positional arguments")
    keys = tuple(_key(value, f"argument {name!r}", bucket, name) for name, value in zip(names, args))
    return keys + tuple((name, _key(value, f"argument {name!r}", bucket, name))
                        for name, value in sorted((kwargs or {}).items()))


def _key(value: Any, where: str, bucket: Bucket, name: str | None) -> tuple:
    """One argument's key (``name`` None: an item of a tuple or list, where arrays are not allowed).

    Arrays are recognised first: ``np.float64`` is a subclass of ``float`` and ``np.str_`` of ``str``."""
    if isinstance(value, ARRAYS):
        if name is None:
            raise TypeError(f"guard_key: {where} is an array inside a tuple or list; pass each array as an "
                            f"argument of its own")
        if value.dtype.kind not in "biufc":
            raise TypeError(f"guard_key: {where} is an array of dtype {value.dtype}; expected a bool, integer, "
                            f"floating or complex dtype")
        return ("array", str(value.dtype), bucket_shape(tuple(value.shape), bucket_axes(bucket, name)))
    if isinstance(value, SCALARS):
        return (type(value).__name__, repr(value))
    if isinstance(value, (tuple, list)):
        return (type(value).__name__,
                tuple(_key(item, f"{where}[{k}]", bucket, None) for k, item in enumerate(value)))
    raise TypeError(f"guard_key: {where} is a {type(value).__name__}; a compiled function takes numpy arrays, "
                    f"autodiff Tensors, Python bool, int, float, str, None and tuples or lists of these")


# -- one graph for a whole bucket: zero-padding ------------------------------------------------------
def padding_problem(graph: Graph, padded: Mapping[str, Sequence[bool]]) -> str | None:
    """Why running ``graph`` on inputs zero-padded at the end of some axes and slicing its outputs could
    give something else than running it on the unpadded inputs; None when it cannot.

    padded: per input node, per axis, whether that axis may hold padding (:func:`may_pad`).
    Padding is exact when no padded position reaches a real output. Rules, per op the outputs need:

    * elementwise: a padded position stays padded (broadcasting a length-1 axis over it is fine); an
      operand with fixed values along a padded axis (a constant of the bucket's length) is a problem;
    * transpose moves padded axes; matmul keeps its batch, row and column axes, and may contract over
      a padded axis only if the padding is zero in both operands (``0 · 0`` adds nothing);
    * reshape of a padded axis, and any other op on one, mixes positions: a problem.

    "Zero" is tracked per value: inputs are padded with zeros, which add, sub, mul, neg and relu keep
    (mul also with a finite constant); exp, div and matmul results are not assumed zero (``exp(0) = 1``).
    """
    state: dict[str, tuple[tuple[bool, ...], bool]] = {}  # name -> (per axis: padded, padding is zero)
    live = graph.ancestors(graph.outputs)
    for node in (node for node in graph if node.name in live):
        if node.op == "input":
            state[node.name] = (tuple(padded[node.name]), True)
        elif node.op == "const":  # no padded axis (so, vacuously, zero padding)
            state[node.name] = ((False,) * len(node.shape), True)
        else:
            operands = [(graph[i], *state[i]) for i in node.inputs]
            result = _padding_through(node, operands)
            if isinstance(result, str):
                return f"node {node.name!r} ({node.op}): {result}"
            state[node.name] = result
    return None


Operand = tuple[Node, tuple[bool, ...], bool]  # the input node, its padded axes, whether its padding is zero


def _padding_through(node: Node, operands: list[Operand]) -> tuple[tuple[bool, ...], bool] | str:
    """The padded axes of ``node``'s result and whether that padding is zero, or what goes wrong."""
    if OPS[node.op].elementwise:
        return _elementwise(node, operands)
    if node.op == "transpose":
        (_, axes, zero), = operands
        return tuple(axes[a] for a in node.attrs["perm"]), zero
    if node.op == "matmul":
        (x, x_axes, x_zero), (y, y_axes, y_zero) = operands
        if (x_axes[-1] or y_axes[-2]) and not (x_axes[-1] and y_axes[-2] and x_zero and y_zero):
            return "contracts over a padded axis whose padding is not zero in both operands"
        batch = _broadcast(len(node.shape) - 2, [(x.shape[:-2], x_axes[:-2]), (y.shape[:-2], y_axes[:-2])])
        return batch if isinstance(batch, str) else (batch + (x_axes[-2], y_axes[-1]), False)
    if any(any(axes) for _, axes, _ in operands):
        return f"{node.op} of a padded axis mixes padded and real positions"
    return (False,) * len(node.shape), True


def _aligned(axes: tuple, ndim: int, fill: Any) -> tuple:
    """Per-axis values of an operand aligned with a broadcast result of ``ndim`` axes (numpy aligns the last axes)."""
    return (fill,) * (ndim - len(axes)) + tuple(axes)


def _broadcast(ndim: int, operands: list[tuple[Shape, tuple[bool, ...]]]) -> tuple[bool, ...] | str:
    """The padded axes of a broadcast result: an axis is padded if any operand's is. An operand that is
    not padded along a padded axis must broadcast over it (length 1)."""
    aligned = [(_aligned(shape, ndim, 1), _aligned(axes, ndim, False)) for shape, axes in operands]
    result = tuple(any(axes[a] for _, axes in aligned) for a in range(ndim))
    for shape, axes in aligned:
        for a in range(ndim):
            if result[a] and not axes[a] and shape[a] > 1:
                return f"an operand of shape {shape} has fixed values along padded axis {a}"
    return result


def _elementwise(node: Node, operands: list[Operand]) -> tuple[tuple[bool, ...], bool] | str:
    ndim = len(node.shape)
    result = _broadcast(ndim, [(x.shape, axes) for x, axes, _ in operands])
    if isinstance(result, str):
        return result
    # zero at every padded position of the result: padded there itself (not broadcast), with zeros
    zero_at = [zero and all(a for a, r in zip(_aligned(axes, ndim, False), result) if r) for _, axes, zero in operands]
    if node.op in ("add", "sub"):
        zero = all(zero_at)
    elif node.op == "mul":
        zero = any(zero_at) and all(z or _finite_const(x) for z, (x, _, _) in zip(zero_at, operands))
    else:
        zero = node.op in ("neg", "relu") and zero_at[0]
    return result, zero


def _finite_const(node: Node) -> bool:
    return node.op == "const" and bool(np.isfinite(node.attrs["value"]).all())


def output_shapes(graph: Graph, input_shapes: Mapping[str, Shape]) -> list[Shape]:
    """The graph's output shapes when its inputs have ``input_shapes`` instead of the shapes it was traced
    at: every op's shape rule runs again (a shape function, not a trace). ValueError naming the node
    where the shapes do not fit together (``x + y`` with lengths 5 and 7, which padding to 8 would hide)."""
    shapes: dict[str, Shape] = {}
    live = graph.ancestors(graph.outputs)
    for node in (node for node in graph if node.name in live):
        if node.op == "input":
            shapes[node.name] = tuple(input_shapes[node.name])
        elif node.op == "const":
            shapes[node.name] = node.shape
        else:
            try:
                shapes[node.name], _ = OPS[node.op].infer(node.attrs, [shapes[i] for i in node.inputs],
                                                          [graph[i].dtype for i in node.inputs])
            except ValueError as error:
                raise ValueError(f"node {node.name!r} ({node.op}): {error}") from None
    return [tuple(shapes[name]) for name in graph.outputs]

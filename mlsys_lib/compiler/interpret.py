"""The meaning of a tensor expression, in numpy: the oracle every generated kernel is tested against.

:func:`evaluate` ignores schedules: each compute is evaluated at once over all its indices with
numpy broadcasting (axis ``d`` of ``n`` spatial and reduction axes is an ``arange`` shaped to lie
along dimension ``d``), in float64, then cast to the tensor's dtype. Memory grows with the product
of all axes' extents, so it is for test sizes (a 64×64×64 matmul: 262 144 elements per operand).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from .expr import Axis, BinOp, Call, Const, Expr, Load, Reduce, Tensor, producers

_BINARY = {"+": np.add, "-": np.subtract, "*": np.multiply, "/": np.divide}
_CALLS = {"exp": np.exp, "sqrt": np.sqrt, "maximum": np.maximum, "minimum": np.minimum}


def evaluate(outputs: Tensor | Sequence[Tensor], inputs: Mapping[str, np.ndarray]):
    """The values of ``outputs`` (one Tensor or a list) given ``inputs`` {placeholder name: array}.

    ValueError for a missing input or one of the wrong shape.
    """
    single = isinstance(outputs, Tensor)
    order = producers([outputs] if single else list(outputs))
    values: dict[str, np.ndarray] = {}
    for t in order:
        if t.op is None:
            if t.name not in inputs:
                raise ValueError(f"evaluate: no value for placeholder {t.name!r}; got {sorted(inputs)}")
            value = np.asarray(inputs[t.name])
            if value.shape != t.shape:
                raise ValueError(f"evaluate: {t.name} must have shape {t.shape}, got {value.shape}")
            values[t.name] = value
        else:
            values[t.name] = _compute(t, values)
    return values[outputs.name] if single else [values[t.name] for t in outputs]


def _compute(t: Tensor, values: dict[str, np.ndarray]) -> np.ndarray:
    op = t.op
    axes = list(op.axes) + list(op.reduce_axes)
    grid = {a: np.arange(a.extent).reshape([-1 if d == k else 1 for d in range(len(axes))])
            for k, a in enumerate(axes)}
    body = op.reduce.body if op.reduce is not None else op.body
    with np.errstate(all="ignore"):
        value = np.broadcast_to(_value(body, grid, values), [a.extent for a in axes])
        if op.reduce is not None:
            reduced = tuple(range(len(op.axes), len(axes)))
            value = value.sum(axis=reduced) if op.reduce.combiner == "sum" else value.max(axis=reduced)
    return np.ascontiguousarray(value, dtype=t.dtype)


def _value(e: Expr, grid: dict, values: dict[str, np.ndarray]):
    if isinstance(e, Const):
        return np.float64(e.value)
    if isinstance(e, Axis):
        return grid[e]
    if isinstance(e, Load):
        array = values[e.tensor.name]
        index = [np.asarray(_value(i, grid, values)).astype(np.int64) for i in e.indices]
        for d, (i, n) in enumerate(zip(index, array.shape)):
            if i.size and (i.min() < 0 or i.max() >= n):
                raise IndexError(f"{e.tensor.name} is read at index {int(i.min())}..{int(i.max())} of dimension {d}, "
                                 f"which has {n} elements")
        return array[tuple(index)].astype(np.float64)
    if isinstance(e, BinOp):
        return _BINARY[e.op](_value(e.a, grid, values), _value(e.b, grid, values))
    if isinstance(e, Call):
        return _CALLS[e.name](*(_value(a, grid, values) for a in e.args))
    if isinstance(e, Reduce):
        raise ValueError("a sum/max may only be the whole body of a compute")
    raise TypeError(f"not an expression: {e!r}")

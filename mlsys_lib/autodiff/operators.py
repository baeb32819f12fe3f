"""The Tensor's Python operators and method forms, set on the class here: ``x + y``, ``x @ w``, ``x.sum()``, ``loss.backward()``.

Dependencies go one way: :mod:`~mlsys_lib.autodiff.tensor` (``Tensor``, ``Op``, ``apply``) imports no
op; the op modules (``elementwise``, ``layout``, ``linalg``, ``reductions``) and the reverse-mode
``engine`` import ``tensor``; this module imports both sides and is the only place that joins them.
``mlsys_lib.autodiff`` imports it, so a Tensor has its operators as soon as any part of the package
is imported.

Each operator is the op function itself (``Tensor.__mul__`` is :func:`~mlsys_lib.autodiff.elementwise.mul`,
``Tensor.backward`` is :func:`~mlsys_lib.autodiff.engine.backward`): numpy semantics and
broadcasting, and the reflected forms (``2 - x``, ``array @ x``) accept scalars and arrays.
"""

from __future__ import annotations

from collections.abc import Callable

from .elementwise import add, div, exp, log, mul, neg, power, relu, sigmoid, sub, tanh
from .engine import backward
from .layout import reshape, transpose
from .linalg import matmul
from .reductions import max, mean, sum  # noqa: A004
from .tensor import Tensor


def _reflected(op: Callable[[object, object], Tensor]) -> Callable[[Tensor, object], Tensor]:
    """``other <op> self``: what Python calls when the left operand is not a Tensor (``2 - x``)."""
    def reflected(self: Tensor, other) -> Tensor:
        return op(other, self)
    reflected.__name__ = reflected.__qualname__ = f"reflected_{op.__name__}"
    return reflected


def _reshape(self: Tensor, *shape) -> Tensor:
    """``t.reshape(2, 3)`` and ``t.reshape((2, 3))`` both mean shape (2, 3)."""
    return reshape(self, tuple(shape[0]) if len(shape) == 1 and isinstance(shape[0], (tuple, list)) else shape)


def _matrix_transpose(self: Tensor) -> Tensor:
    """``t.T``: the axes reversed."""
    return transpose(self)


# operators (numpy semantics, broadcasting; reflected forms accept scalars and arrays)
Tensor.__add__, Tensor.__radd__ = add, _reflected(add)
Tensor.__sub__, Tensor.__rsub__ = sub, _reflected(sub)
Tensor.__mul__, Tensor.__rmul__ = mul, _reflected(mul)
Tensor.__truediv__, Tensor.__rtruediv__ = div, _reflected(div)
Tensor.__pow__, Tensor.__rpow__ = power, _reflected(power)
Tensor.__matmul__, Tensor.__rmatmul__ = matmul, _reflected(matmul)
Tensor.__neg__ = neg

# method forms of common ops
Tensor.sum, Tensor.mean, Tensor.max = sum, mean, max
Tensor.reshape, Tensor.transpose, Tensor.T = _reshape, transpose, property(_matrix_transpose)
Tensor.exp, Tensor.log, Tensor.tanh, Tensor.sigmoid, Tensor.relu = exp, log, tanh, sigmoid, relu

# reverse mode
Tensor.backward = backward

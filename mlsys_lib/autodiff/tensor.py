"""Tensor, Op and ``apply``: the dataflow-graph node, the primitive operation, and the one function that runs an op.

A :class:`Tensor` is **eager** when it holds a numpy array (define-and-run, like PyTorch) and **symbolic**
when it does not (a placeholder, or a node built from one: define-then-run, like TF v1 / tinyflow).
Every op goes through :func:`apply`, which

* checks the input shapes with the op's shape rule (ValueError naming the op and the shapes);
* for eager inputs runs the op's numpy ``forward`` and, when an input requires grad and grad mode is
  on, records the node (op + inputs) so that reverse mode can walk back through it;
* for symbolic inputs computes nothing and records the node (an ``Executor`` evaluates it later);
* inside :func:`~mlsys_lib.autodiff.forward_mode.jvp`, pushes tangents forward with the op's JVP.

So each op is written once and serves eager, symbolic, reverse and forward mode.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator, Sequence

import numpy as np

from .shapes import Shape


class Op:
    """One primitive operation. Subclasses set ``name`` and define, once:

    * ``forward(*arrays) -> ndarray``: the numpy computation;
    * ``shape(*shapes) -> Shape``: the output shape, raising ValueError for invalid inputs;
    * ``vjp(g, out, *inputs) -> tuple``: one entry per input, the adjoint ``ḡᵀ ∂out/∂input`` (a Tensor,
      or None where the input gets no gradient). It may have the *broadcast* shape: the engine sums
      it back to the input's shape (:func:`~mlsys_lib.autodiff.layout.sum_to`);
    * ``jvp(tangents, out, *inputs) -> Tensor | None``: out's tangent ``Σ ∂out/∂input_i · t_i``, given one
      tangent per input (None where it is zero). It may have a shape that broadcasts to out's: forward
      mode broadcasts it up. None means a zero tangent.

    VJP and JVP are written with library ops on Tensors, so the backward graph they build is itself
    differentiable (second derivatives) and, given symbolic inputs, is made of symbolic nodes.
    """

    name = "op"

    def forward(self, *arrays: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def shape(self, *shapes: Shape) -> Shape:
        raise NotImplementedError

    def dtype(self, *dtypes: np.dtype) -> np.dtype:
        """Output dtype, needed only for symbolic nodes (eager ones take their array's dtype)."""
        return np.result_type(*dtypes)

    def vjp(self, g: Tensor, out: Tensor, *inputs: Tensor) -> tuple[Tensor | None, ...]:
        raise NotImplementedError

    def jvp(self, tangents: tuple[Tensor | None, ...], out: Tensor, *inputs: Tensor) -> Tensor | None:
        raise NotImplementedError

    def __repr__(self) -> str:
        return self.name


class _Mode:
    """Process-wide switches read by :func:`apply`."""

    grad_enabled = True  # record eager nodes whose inputs require grad
    forward_mode = False  # jvp() is running: push tangents forward


_mode = _Mode()


@contextlib.contextmanager
def no_grad() -> Iterator[None]:
    """Within the block eager ops record no graph (the backward pass without create_graph uses this)."""
    with _switch("grad_enabled", False):
        yield


@contextlib.contextmanager
def _switch(flag: str, value: bool) -> Iterator[None]:
    saved = getattr(_mode, flag)
    setattr(_mode, flag, value)
    try:
        yield
    finally:
        setattr(_mode, flag, saved)


class Tensor:
    """A value in a dataflow graph.

    data: the numpy array, or None for a symbolic node.  shape, dtype: always known.
    op, inputs: the Op that made this node and its input Tensors; None and () for leaves (inputs,
        parameters, placeholders) and for values computed without recording (e.g. under no_grad()).
    requires_grad: gradients flow to this tensor.  grad: the gradient backward() accumulated here (a Tensor).
    tangent: its forward-mode tangent while jvp() runs.

    ``Tensor(data)`` wraps ``np.asarray(data)`` without copying, so optimizers update it in place.
    Python scalars mixed into ops take the tensor's dtype (``x * 2.0`` stays float32).
    """

    __slots__ = ("data", "shape", "dtype", "op", "inputs", "requires_grad", "grad", "name", "tangent")
    __array_ufunc__ = None  # `ndarray + Tensor` defers to Tensor.__radd__ instead of converting the Tensor

    def __init__(self, data, requires_grad: bool = False, name: str | None = None):
        data = np.asarray(data)
        if requires_grad and not np.issubdtype(data.dtype, np.floating):
            raise TypeError(f"Tensor: requires_grad=True needs a floating-point dtype, got {data.dtype}")
        self._set(data, data.shape, data.dtype, None, (), requires_grad, name)

    @classmethod
    def node(cls, data: np.ndarray | None, shape: Shape, dtype: np.dtype, op: Op | None,
             inputs: tuple[Tensor, ...], requires_grad: bool, name: str | None = None) -> Tensor:
        """A Tensor from parts already checked (used by apply() and placeholder())."""
        t = cls.__new__(cls)
        t._set(data, shape, dtype, op, inputs, requires_grad, name)
        return t

    def _set(self, data, shape, dtype, op, inputs, requires_grad, name) -> None:
        self.data, self.shape, self.dtype = data, tuple(shape), np.dtype(dtype)
        self.op, self.inputs, self.requires_grad = op, inputs, requires_grad
        self.grad = self.tangent = None
        self.name = name

    # -- inspection -----------------------------------------------------------------------------
    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def is_symbolic(self) -> bool:
        return self.data is None

    def numpy(self) -> np.ndarray:
        """The value as a numpy array (TypeError for a symbolic node: run it with an Executor)."""
        if self.data is None:
            raise TypeError(f"{self!r} is symbolic and has no value; evaluate it with Executor(...).run(feeds)")
        return self.data

    def __array__(self, dtype=None, copy=None) -> np.ndarray:
        array = np.asarray(self.numpy(), dtype=dtype)
        return array.copy() if copy else array

    def item(self) -> float:
        return self.numpy().item()

    def detach(self) -> Tensor:
        """The same data as a new leaf that records nothing."""
        return Tensor(self.numpy())

    def __repr__(self) -> str:
        what = f"op={self.op}" if self.op is not None else ("placeholder" if self.data is None else "leaf")
        name = f" {self.name!r}" if self.name else ""
        return f"Tensor({what}{name}, shape={self.shape}, dtype={self.dtype}, requires_grad={self.requires_grad})"

    # -- reverse mode ---------------------------------------------------------------------------
    def backward(self, grad=None, create_graph: bool = False) -> None:
        """Accumulate d(self)/d(leaf) into ``leaf.grad`` of every leaf that requires grad.

        grad: the seed ∂L/∂self, needed (with self's shape) unless self is a scalar.
        create_graph: record the backward pass as a graph, so the gradients can be differentiated again.
        """
        _engine.backward(self, grad, create_graph)

    # -- operators (numpy semantics, broadcasting; reflected forms accept scalars and arrays) ---
    def __add__(self, other): return _ew.add(self, other)
    def __radd__(self, other): return _ew.add(other, self)
    def __sub__(self, other): return _ew.sub(self, other)
    def __rsub__(self, other): return _ew.sub(other, self)
    def __mul__(self, other): return _ew.mul(self, other)
    def __rmul__(self, other): return _ew.mul(other, self)
    def __truediv__(self, other): return _ew.div(self, other)
    def __rtruediv__(self, other): return _ew.div(other, self)
    def __pow__(self, other): return _ew.power(self, other)
    def __rpow__(self, other): return _ew.power(other, self)
    def __matmul__(self, other): return _linalg.matmul(self, other)
    def __rmatmul__(self, other): return _linalg.matmul(other, self)
    def __neg__(self): return _ew.neg(self)

    # -- method forms of common ops -------------------------------------------------------------
    def sum(self, axis=None, keepdims: bool = False) -> Tensor: return _reduce.sum(self, axis, keepdims)
    def mean(self, axis=None, keepdims: bool = False) -> Tensor: return _reduce.mean(self, axis, keepdims)
    def max(self, axis=None, keepdims: bool = False) -> Tensor: return _reduce.max(self, axis, keepdims)
    def reshape(self, *shape) -> Tensor: return _layout.reshape(self, _flatten_shape_args(shape))
    def transpose(self, axes=None) -> Tensor: return _layout.transpose(self, axes)
    @property
    def T(self) -> Tensor: return _layout.transpose(self)
    def exp(self) -> Tensor: return _ew.exp(self)
    def log(self) -> Tensor: return _ew.log(self)
    def tanh(self) -> Tensor: return _ew.tanh(self)
    def sigmoid(self) -> Tensor: return _ew.sigmoid(self)
    def relu(self) -> Tensor: return _ew.relu(self)


def _flatten_shape_args(shape: tuple) -> tuple:
    """``t.reshape(2, 3)`` and ``t.reshape((2, 3))`` both mean shape (2, 3)."""
    return tuple(shape[0]) if len(shape) == 1 and isinstance(shape[0], (tuple, list)) else shape


def as_tensor(value, like: Tensor | None = None) -> Tensor:
    """``value`` as a Tensor: Tensors pass through; Python scalars take ``like``'s floating dtype; arrays keep theirs."""
    if isinstance(value, Tensor):
        return value
    if isinstance(value, (int, float, np.number)) and like is not None and np.issubdtype(like.dtype, np.floating):
        return Tensor(np.asarray(value, dtype=like.dtype))
    return Tensor(value)


def operands(x, y) -> tuple[Tensor, Tensor]:
    """The two operands of a binary op as Tensors (a Python scalar takes the other operand's dtype)."""
    x = as_tensor(x, like=y if isinstance(y, Tensor) else None)
    return x, as_tensor(y, like=x)


def apply(op: Op, *inputs: Tensor) -> Tensor:
    """Run ``op`` on ``inputs`` (see the module docstring): the single entry point of every primitive op."""
    shape = op.shape(*[x.shape for x in inputs])
    if any(x.data is None for x in inputs):
        out = Tensor.node(None, shape, op.dtype(*[x.dtype for x in inputs]), op, inputs, True)
    else:
        data = np.asarray(op.forward(*[x.data for x in inputs]))
        if _mode.grad_enabled and any(x.requires_grad for x in inputs):
            out = Tensor.node(data, shape, data.dtype, op, inputs, True)
        else:
            out = Tensor.node(data, shape, data.dtype, None, (), False)
    if _mode.forward_mode and any(x.tangent is not None for x in inputs):
        out.tangent = _push_tangent(op, out, inputs)
    return out


def _push_tangent(op: Op, out: Tensor, inputs: Sequence[Tensor]) -> Tensor | None:
    """out's tangent from its inputs' tangents by the op's JVP, broadcast to out's shape."""
    with _switch("forward_mode", False):  # the JVP's own ops carry no tangents
        tangent = op.jvp(tuple(x.tangent for x in inputs), out, *inputs)
        if tangent is not None and tangent.shape != out.shape:
            tangent = _layout.broadcast_to(tangent, out.shape)
    return tangent


def total(*terms: Tensor | None) -> Tensor | None:
    """The sum of the terms that are not None; None if all are (a sum of zero tangents)."""
    present = [t for t in terms if t is not None]
    return functools.reduce(_ew.add, present) if present else None


# The operators and methods above call op functions defined in modules that import this one.
from . import elementwise as _ew  # noqa: E402
from . import engine as _engine  # noqa: E402
from . import layout as _layout  # noqa: E402
from . import linalg as _linalg  # noqa: E402
from . import reductions as _reduce  # noqa: E402

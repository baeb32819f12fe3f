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

Dependencies go one way, upwards: this module imports none of the ops. The op modules
(``elementwise``, ``layout``, ``linalg``, ``reductions``), the reverse-mode ``engine`` and
``forward_mode`` are built on it; :mod:`~mlsys_lib.autodiff.operators`, which imports both sides,
gives ``Tensor`` its operators (``x + y``, ``x @ w``) and method forms (``x.sum()``, ``loss.backward()``),
and ``jvp()`` plugs forward mode into :func:`apply` while it runs (``_mode.push_tangent``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

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
    push_tangent = None  # while jvp() runs: forward_mode.push_tangent, which gives each new node its tangent


_mode = _Mode()


@contextlib.contextmanager
def no_grad() -> Iterator[None]:
    """Within the block eager ops record no graph (the backward pass without create_graph uses this)."""
    with _switch("grad_enabled", False):
        yield


@contextlib.contextmanager
def _switch(flag: str, value) -> Iterator[None]:
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

    The operators (``+ - * / ** @``, unary ``-``; numpy semantics, broadcasting) and the method forms
    (``sum``, ``mean``, ``max``, ``reshape``, ``transpose``, ``T``, ``exp``, ``log``, ``tanh``,
    ``sigmoid``, ``relu``, and ``backward``, the reverse-mode engine's entry point) are set on this
    class by :mod:`~mlsys_lib.autodiff.operators`: the ops are built on this class, so it cannot
    import them.
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
    if _mode.push_tangent is not None and any(x.tangent is not None for x in inputs):
        out.tangent = _mode.push_tangent(op, out, inputs)
    return out

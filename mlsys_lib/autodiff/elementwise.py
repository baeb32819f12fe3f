"""Elementwise ops with numpy broadcasting: add, sub, neg, mul, div, pow, exp, log, tanh, sigmoid, relu, gelu.

A smooth elementwise op is defined by its local partial derivatives ``d_i = ∂out/∂x_i`` (Tensors that
broadcast against out), written once and used by both modes:

    VJP:  x̄_i = ḡ · d_i          (the engine sums it back to x_i's shape)
    JVP:  ṫ   = Σ_i d_i · t_i    (over the inputs that have a tangent)

Linear ops (add, sub, neg) skip the multiplication by a constant partial and state VJP and JVP directly.
"""

from __future__ import annotations

import functools
import math

import numpy as np

from .shapes import Shape, broadcast_shapes
from .tensor import Op, Tensor, apply, as_tensor, operands


class Elementwise(Op):
    """Broadcasting shape rule, and VJP/JVP from ``partials``."""

    def shape(self, *shapes: Shape) -> Shape:
        return broadcast_shapes(self.name, *shapes)

    def partials(self, out: Tensor, *inputs: Tensor) -> tuple[Tensor, ...]:
        """∂out/∂x_i for each input, as Tensors that broadcast against out."""
        raise NotImplementedError

    def vjp(self, g, out, *inputs):
        return tuple(g * d if x.requires_grad else None for d, x in zip(self.partials(out, *inputs), inputs))

    def jvp(self, tangents, out, *inputs):
        return total(*(d * t for d, t in zip(self.partials(out, *inputs), tangents) if t is not None))


class Add(Elementwise):
    name = "add"

    def forward(self, x, y):
        return x + y

    def vjp(self, g, out, x, y):
        return g, g

    def jvp(self, tangents, out, x, y):
        return total(*tangents)


class Sub(Elementwise):
    name = "sub"

    def forward(self, x, y):
        return x - y

    def vjp(self, g, out, x, y):
        return g, (-g if y.requires_grad else None)

    def jvp(self, tangents, out, x, y):
        tx, ty = tangents
        return total(tx, None if ty is None else -ty)


class Neg(Elementwise):
    name = "neg"

    def forward(self, x):
        return -x

    def vjp(self, g, out, x):
        return (-g,)

    def jvp(self, tangents, out, x):
        return -tangents[0]


class Mul(Elementwise):
    name = "mul"

    def forward(self, x, y):
        return x * y

    def partials(self, out, x, y):
        return y, x


class Div(Elementwise):
    name = "div"

    def forward(self, x, y):
        return x / y

    def partials(self, out, x, y):
        return 1.0 / y, -out / y


class PowScalar(Elementwise):
    """x ** p for a constant Python number p."""

    name = "pow"

    def __init__(self, exponent: float):
        self.exponent = exponent

    def forward(self, x):
        return x ** self.exponent

    def partials(self, out, x):
        return (self.exponent * x ** (self.exponent - 1),)


class Pow(Elementwise):
    """x ** y for a tensor exponent; ∂/∂y = out · log x needs x > 0."""

    name = "pow"

    def forward(self, x, y):
        return x ** y

    def partials(self, out, x, y):
        return y * x ** (y - 1.0), out * log(x)


class Exp(Elementwise):
    name = "exp"

    def forward(self, x):
        return np.exp(x)

    def partials(self, out, x):
        return (out,)


class Log(Elementwise):
    name = "log"

    def forward(self, x):
        return np.log(x)

    def partials(self, out, x):
        return (1.0 / x,)


class Tanh(Elementwise):
    name = "tanh"

    def forward(self, x):
        return np.tanh(x)

    def partials(self, out, x):
        return (1.0 - out * out,)


class Sigmoid(Elementwise):
    name = "sigmoid"

    def forward(self, x):
        z = np.exp(-np.abs(x))  # never overflows
        return np.where(x >= 0, 1.0, z) / (1.0 + z)

    def partials(self, out, x):
        return (out * (1.0 - out),)


class Relu(Elementwise):
    """max(x, 0); its derivative at 0 is taken to be 0."""

    name = "relu"

    def forward(self, x):
        return np.maximum(x, 0)

    def partials(self, out, x):
        return (apply(Positive(), x),)


class Positive(Elementwise):
    """The step function x > 0 (bool): relu's derivative. Piecewise constant, so no gradient flows through it."""

    name = "positive"

    def forward(self, x):
        return x > 0

    def dtype(self, *dtypes):
        return np.dtype(bool)

    def vjp(self, g, out, x):
        return (None,)

    def jvp(self, tangents, out, x):
        return None


def total(*terms: Tensor | None) -> Tensor | None:
    """The sum of the terms that are not None; None if all are (a sum of zero tangents)."""
    present = [t for t in terms if t is not None]
    return functools.reduce(add, present) if present else None


def add(x, y) -> Tensor:
    """x + y, broadcasting."""
    return apply(Add(), *operands(x, y))


def sub(x, y) -> Tensor:
    """x - y, broadcasting."""
    return apply(Sub(), *operands(x, y))


def neg(x) -> Tensor:
    """-x."""
    return apply(Neg(), as_tensor(x))


def mul(x, y) -> Tensor:
    """x * y, broadcasting."""
    return apply(Mul(), *operands(x, y))


def div(x, y) -> Tensor:
    """x / y, broadcasting."""
    return apply(Div(), *operands(x, y))


def power(x, y) -> Tensor:
    """x ** y: a Python-number exponent gives ``PowScalar``; a tensor exponent (x > 0 for its gradient) ``Pow``."""
    if isinstance(y, (int, float, np.number)) and isinstance(x, Tensor):
        return apply(PowScalar(y), x)
    return apply(Pow(), *operands(x, y))


def exp(x) -> Tensor:
    """e ** x."""
    return apply(Exp(), as_tensor(x))


def log(x) -> Tensor:
    """Natural logarithm (x > 0)."""
    return apply(Log(), as_tensor(x))


def tanh(x) -> Tensor:
    """Hyperbolic tangent."""
    return apply(Tanh(), as_tensor(x))


def sigmoid(x) -> Tensor:
    """1 / (1 + e ** -x), computed without overflow."""
    return apply(Sigmoid(), as_tensor(x))


def relu(x) -> Tensor:
    """max(x, 0)."""
    return apply(Relu(), as_tensor(x))


_GELU_C = math.sqrt(2.0 / math.pi)


def gelu(x) -> Tensor:
    """GELU, **tanh approximation** (as in GPT-2): 0.5 x (1 + tanh(√(2/π) (x + 0.044715 x³))).

    Composite of primitive ops, so its VJP, JVP and higher derivatives come from theirs.
    """
    x = as_tensor(x)
    return 0.5 * x * (1.0 + tanh(_GELU_C * (x + 0.044715 * x ** 3)))

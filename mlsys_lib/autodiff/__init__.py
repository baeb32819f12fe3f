"""Automatic differentiation on numpy arrays: reverse and forward mode, eager and define-then-run.

* **Eager (define-and-run)**: ``Tensor(data, requires_grad=True)``, ops compute at once and record the
  graph; ``loss.backward()`` fills ``.grad``; ``grad(outputs, inputs, create_graph=True)`` returns
  gradients that can be differentiated again (Hessian-vector products).
* **Symbolic (define-then-run)**: ``placeholder(shape, name)``, the same ops build nodes,
  ``gradients(y, xs)`` returns gradient *nodes*, ``Executor(nodes).run(feed_dict)`` evaluates them.
* **Forward mode**: ``jvp(f, primals, tangents)`` -> (outputs, J·tangents).

Every primitive op is one class (``Op``) in elementwise / layout / linalg / reductions / functional
with its numpy forward, shape rule, VJP and JVP; the VJP and JVP are themselves written with these
ops. Also: ``gradcheck``, ``draw_graph``, ``optim`` (SGD, Momentum, RMSProp, Adam, decay schedules)
and ``nn`` (Module, Linear, ReLU, Sequential, MLP).

Dependencies go one way, each layer importing only those before it: ``tensor`` (Tensor, Op, apply)
imports no op; the op modules (``elementwise``, ``layout``, ``linalg``, ``reductions``) import
``tensor``; ``engine`` (reverse mode) and ``forward_mode`` import ``tensor`` and ``layout``;
``operators`` imports the ops and the engine and sets the Tensor's operators and methods
(``x + y``, ``x.sum()``, ``loss.backward()``). This package imports ``operators`` first.
"""

from . import operators  # noqa: F401  (first: gives Tensor its operators and methods)
from . import nn, optim
from .draw import draw_graph
from .elementwise import add, div, exp, gelu, log, mul, neg, power, relu, sigmoid, sub, tanh
from .engine import grad, topological_order
from .forward_mode import jvp
from .functional import cross_entropy, layer_norm, log_softmax, one_hot, softmax
from .gradcheck import gradcheck
from .layout import broadcast_to, reshape, sum_to, transpose
from .linalg import linear, matmul
from .reductions import max, mean, sum  # noqa: A004
from .symbolic import Executor, gradients, placeholder
from .tensor import Op, Tensor, apply, no_grad

__all__ = [
    "Tensor", "Op", "apply", "no_grad", "grad", "topological_order", "jvp",
    "placeholder", "gradients", "Executor", "gradcheck", "draw_graph", "nn", "optim",
    "add", "sub", "mul", "div", "neg", "power", "exp", "log", "tanh", "sigmoid", "relu", "gelu",
    "matmul", "linear", "transpose", "reshape", "broadcast_to", "sum_to", "sum", "mean", "max",
    "softmax", "log_softmax", "one_hot", "cross_entropy", "layer_norm",
]

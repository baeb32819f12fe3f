"""Define-then-run (TF v1 / tinyflow): declare placeholders, build the graph, differentiate it
symbolically, then evaluate the nodes you want with an Executor and a feed_dict.

Graph building uses the same op functions as eager mode: given a placeholder, an op records a
symbolic node (shape and dtype inferred) instead of computing. ``gradients`` runs the reverse-mode
engine on those nodes; the VJPs then build *gradient nodes*, so the backward graph is an ordinary
graph that can be evaluated, drawn, or differentiated again.

Eager Tensors used in a symbolic graph are constants: an op whose inputs are all eager is computed
at once, when the graph is built. A value that changes between runs (weights updated by a training
loop, the lecture's ``tf.Variable``) should be a placeholder, fed on every run.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from .engine import grad, topological_order
from .tensor import Tensor


def placeholder(shape: Sequence[int], name: str, dtype=np.float64) -> Tensor:
    """A symbolic input of a fixed ``shape`` and ``dtype``, given a value by ``Executor.run(feed_dict)``."""
    shape = tuple(int(n) for n in shape)
    if any(n < 0 for n in shape):
        raise ValueError(f"placeholder {name!r}: dimensions must be >= 0, got {shape}")
    return Tensor.node(None, shape, np.dtype(dtype), None, (), np.issubdtype(dtype, np.floating), name)


def gradients(y: Tensor, xs: Sequence[Tensor], grad_y=None) -> list[Tensor]:
    """Symbolic gradient nodes dy/dx for each x in xs (like ``tf.gradients``): y scalar, or seeded by grad_y."""
    return list(grad(y, list(xs), grad_y, create_graph=True))


class Executor:
    """Evaluates the given nodes: ``Executor([y, dy_dw]).run({x: x_value})`` -> [y value, dy_dw value].

    The evaluation order (a topological order of everything the nodes need) is computed once.
    """

    def __init__(self, nodes: Sequence[Tensor]):
        self.nodes = list(nodes)
        self.order = topological_order(self.nodes)

    def run(self, feed_dict: Mapping[Tensor, object]) -> list[np.ndarray]:
        """The numpy values of the nodes, given a value for each placeholder they depend on."""
        values = {id(node): _checked_feed(node, value) for node, value in feed_dict.items()}
        for node in self.order:
            if id(node) in values:
                continue
            if node.data is not None:
                values[id(node)] = node.data
            elif node.op is None:
                raise ValueError(f"Executor.run: placeholder {node.name!r} (shape {node.shape}) was not fed")
            else:
                values[id(node)] = np.asarray(node.op.forward(*[values[id(x)] for x in node.inputs]))
        return [values[id(node)] for node in self.nodes]


def _checked_feed(node: Tensor, value) -> np.ndarray:
    if not isinstance(node, Tensor):
        raise TypeError(f"Executor.run: feed_dict keys must be placeholders, got {type(node).__name__}")
    value = np.asarray(value)
    if value.shape != node.shape:
        raise ValueError(f"Executor.run: placeholder {node.name!r} expects shape {node.shape}, was fed shape {value.shape}")
    if not np.can_cast(value.dtype, node.dtype, casting="same_kind"):
        raise TypeError(f"Executor.run: placeholder {node.name!r} expects {node.dtype}, was fed {value.dtype}")
    return value.astype(node.dtype, copy=False)

"""draw_graph: a matplotlib picture of a dataflow graph and, when one was built, its backward graph."""

from __future__ import annotations

from collections.abc import Sequence

from .engine import topological_order
from .tensor import Tensor

COLORS = {"leaf": "#d9ead3", "forward": "#cfe2f3", "backward": "#fce5cd", "constant": "#eeeeee"}


def draw_graph(output: Tensor | Sequence[Tensor], gradients: Sequence[Tensor] | None = None):
    """A matplotlib Figure of the graph behind ``output``: one box per node (op and shape), one arrow per edge.

    Columns are depths (longest path from a leaf), so data flows left to right. Colors: inputs,
    parameters and placeholders green; forward ops blue; backward-graph ops orange; constants grey.
    gradients: backward-graph results to include (e.g. from ``gradients(y, xs)`` or
    ``grad(..., create_graph=True)``); by default the ``.grad`` of the leaves, when
    ``backward(create_graph=True)`` recorded how they were computed.
    """
    from mlsys_lib.viz.dag import DagNode, draw_dag  # matplotlib only when drawing

    outputs = [output] if isinstance(output, Tensor) else list(output)
    forward = topological_order(outputs)
    if gradients is None:
        gradients = [n.grad for n in forward if n.op is None and n.grad is not None and n.grad.op is not None]
    in_forward = {id(n) for n in forward}
    nodes = topological_order(outputs + list(gradients))
    return draw_dag([DagNode(id(n), [id(x) for x in n.inputs], _label(n), _kind(n, id(n) in in_forward))
                     for n in nodes], COLORS)


def _kind(node: Tensor, in_forward: bool) -> str:
    if node.op is not None:
        return "forward" if in_forward else "backward"
    return "leaf" if node.requires_grad or node.data is None else "constant"


def _label(node: Tensor) -> str:
    if node.op is not None:
        title = node.op.name
    elif node.data is None:
        title = f"placeholder {node.name or ''}".strip()
    elif node.name or node.requires_grad:
        title = node.name or "param"
    else:
        title = f"const {node.data.item():.3g}" if node.data.size == 1 else "const"
    return f"{title}\n{node.shape}"

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
    from matplotlib.figure import Figure
    from matplotlib.patches import Patch

    outputs = [output] if isinstance(output, Tensor) else list(output)
    forward = topological_order(outputs)
    if gradients is None:
        gradients = [n.grad for n in forward if n.op is None and n.grad is not None and n.grad.op is not None]
    in_forward = {id(n) for n in forward}
    nodes = topological_order(outputs + list(gradients))

    depth: dict[int, int] = {}
    columns: dict[int, list[Tensor]] = {}
    for n in nodes:
        depth[id(n)] = 1 + max((depth[id(x)] for x in n.inputs), default=-1)
        columns.setdefault(depth[id(n)], []).append(n)
    position = {id(n): (d, i - (len(column) - 1) / 2) for d, column in columns.items() for i, n in enumerate(column)}

    height = max(len(column) for column in columns.values())
    figure = Figure(figsize=(max(4.0, 1.7 * len(columns)), max(3.0, 0.9 * height)))
    ax = figure.add_subplot()
    for n in nodes:
        for x in n.inputs:
            ax.annotate("", xy=position[id(n)], xytext=position[id(x)],
                        arrowprops=dict(arrowstyle="->", color="grey", shrinkA=14, shrinkB=14))
    for n in nodes:
        kind = _kind(n, id(n) in in_forward)
        ax.text(*position[id(n)], _label(n), ha="center", va="center", fontsize=8,
                bbox=dict(boxstyle="round", facecolor=COLORS[kind], edgecolor="grey"))
    ax.set_xlim(-0.7, len(columns) - 0.3)
    ax.set_ylim(-height / 2 - 0.2, height / 2 + 0.2)
    ax.axis("off")
    ax.legend(handles=[Patch(facecolor=c, edgecolor="grey", label=k) for k, c in COLORS.items()],
              loc="upper center", bbox_to_anchor=(0.5, 0.0), ncol=len(COLORS), fontsize=7, frameon=False)
    return figure


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

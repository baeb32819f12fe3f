"""Drawing a dataflow graph: one box per node in columns by depth, one arrow per edge, left to right.

Shared by :func:`mlsys_lib.autodiff.draw_graph` and :func:`mlsys_lib.graph.draw_graph`, which only
say what each node is called and which color it gets.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from matplotlib.figure import Figure


@dataclass(frozen=True)
class DagNode:
    """A node to draw: ``key`` names it, ``inputs`` are the keys of the nodes it reads."""

    key: Hashable
    inputs: Sequence[Hashable]
    label: str
    kind: str  # a key of the colors
    bold: bool = False  # a thick edge (e.g. a graph output)


def draw_dag(nodes: Sequence[DagNode], colors: Mapping[str, str]) -> Figure:
    """A matplotlib Figure of ``nodes`` (topological order: inputs before the nodes that read them).

    Column = depth (longest path from a node without inputs), rows centred in each column; the
    legend lists ``colors`` (kind -> fill color).
    """
    from matplotlib.figure import Figure
    from matplotlib.patches import Patch

    depth: dict[Hashable, int] = {}
    columns: dict[int, list[Hashable]] = {}
    for node in nodes:
        depth[node.key] = 1 + max((depth[i] for i in node.inputs), default=-1)
        columns.setdefault(depth[node.key], []).append(node.key)
    position = {key: (d, i - (len(column) - 1) / 2) for d, column in columns.items() for i, key in enumerate(column)}

    height = max(len(column) for column in columns.values())
    figure = Figure(figsize=(max(4.0, 1.8 * len(columns)), max(3.0, 0.9 * height)))
    ax = figure.add_subplot()
    for node in nodes:
        for i in node.inputs:
            ax.annotate("", xy=position[node.key], xytext=position[i],
                        arrowprops=dict(arrowstyle="->", color="grey", shrinkA=16, shrinkB=16))
    for node in nodes:
        ax.text(*position[node.key], node.label, ha="center", va="center", fontsize=7,
                bbox=dict(boxstyle="round", facecolor=colors[node.kind], edgecolor="black",
                          linewidth=2.0 if node.bold else 0.5))
    ax.set_xlim(-0.7, len(columns) - 0.3)
    ax.set_ylim(-height / 2 - 0.2, height / 2 + 0.2)
    ax.axis("off")
    ax.legend(handles=[Patch(facecolor=c, edgecolor="grey", label=k) for k, c in colors.items()],
              loc="upper center", bbox_to_anchor=(0.5, 0.0), ncol=len(colors), fontsize=7, frameon=False)
    return figure

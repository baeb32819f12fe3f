"""Drawing a graph with matplotlib (:func:`draw_graph`).

The text listing, :func:`~mlsys_lib.graph.ir.format_graph` (what ``str(graph)`` prints), is part of
the IR and lives in :mod:`~mlsys_lib.graph.ir`; this module builds on the IR and the IR does not
import it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .ir import Graph

if TYPE_CHECKING:
    from matplotlib.figure import Figure

COLORS = {"input": "#d9ead3", "const": "#eeeeee", "op": "#cfe2f3", "fused": "#fce5cd"}


def draw_graph(graph: Graph) -> Figure:
    """A matplotlib Figure: one box per node (name, op, shape), one arrow per edge, data flowing left to right.

    Columns are depths (longest path from an input or constant); outputs have a bold edge. Colors:
    inputs green, constants grey, ops blue, fused kernels orange.
    """
    from mlsys_lib.viz.dag import DagNode, draw_dag  # matplotlib only when drawing

    return draw_dag([DagNode(node.name, node.inputs, f"{node.name}\n{node.op} {list(node.shape)}",
                             node.op if node.op in COLORS else "op", bold=node.name in graph.outputs)
                     for node in graph], COLORS)

"""Showing a graph: a readable text listing (:func:`format_graph`) and a matplotlib drawing (:func:`draw_graph`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .ir import Graph, Node

if TYPE_CHECKING:
    from matplotlib.figure import Figure

COLORS = {"input": "#d9ead3", "const": "#eeeeee", "op": "#cfe2f3", "fused": "#fce5cd"}


def format_graph(graph: Graph) -> str:
    """One line per node in topological order, inputs first::

        graph(x: float32[4, 3]) -> (y)
          c: float32[] = const 7.0
          y: float32[4, 3] = add(x, c)

    Constants of up to 4 elements show their values; fused kernels show their program, whose
    ``%i`` are the kernel's inputs and then its earlier steps.
    """
    inputs = ", ".join(f"{graph[n].name}: {_type(graph[n])}" for n in graph.inputs)
    lines = [f"graph({inputs}) -> ({', '.join(graph.outputs)})"]
    lines += [f"  {node.name}: {_type(node)} = {_expression(node)}" for node in graph if node.op != "input"]
    return "\n".join(lines)


def _type(node: Node) -> str:
    return f"{node.dtype}[{', '.join(map(str, node.shape))}]"


def _expression(node: Node) -> str:
    if node.op == "const":
        value = node.attrs["value"]
        return f"const {value.tolist() if value.size <= 4 else '<' + str(value.size) + ' values>'}"
    if node.op == "fused":
        first = len(node.inputs)
        steps = "; ".join(f"%{first + j} = {op}({', '.join(f'%{i}' for i in args)})"
                          for j, (op, args) in enumerate(node.attrs["program"]))
        return f"fused[{steps}]({', '.join(node.inputs)})"
    attrs = [f"{k}={v}" for k, v in node.attrs.items()]
    return f"{node.op}({', '.join(list(node.inputs) + attrs)})"


def draw_graph(graph: Graph) -> Figure:
    """A matplotlib Figure: one box per node (name, op, shape), one arrow per edge, data flowing left to right.

    Columns are depths (longest path from an input or constant); outputs have a bold edge. Colors:
    inputs green, constants grey, ops blue, fused kernels orange.
    """
    from mlsys_lib.viz.dag import DagNode, draw_dag  # matplotlib only when drawing

    return draw_dag([DagNode(node.name, node.inputs, f"{node.name}\n{node.op} {list(node.shape)}",
                             node.op if node.op in COLORS else "op", bold=node.name in graph.outputs)
                     for node in graph], COLORS)

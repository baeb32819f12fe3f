"""The standard compiler passes on the graph IR, each a function ``Graph -> Graph``.

* :func:`constant_fold`: an op whose inputs are all constants becomes a constant, and constants are
  reassociated through add/mul chains: ``(x + 3) + 4 -> x + 7`` (the lecture's example);
* :func:`simplify`: algebraic identities (:data:`SIMPLIFICATIONS`, rewrite templates): ``x + 0 -> x``,
  ``neg(neg(x)) -> x``, ``transpose(transpose(x)) -> x``, ...;
* :func:`cse`: common-subexpression elimination, one node per (op, inputs, attributes);
* :func:`dce`: dead-code elimination, the nodes no output depends on.

Each returns a new graph, or the *same* graph object when it changes nothing. None modifies its input.
Reassociation and folding are exact in real arithmetic; in floating point they may change the
last bits (``(x + 3) + 4`` rounds twice, ``x + 7`` once).
"""

from __future__ import annotations

import numpy as np

from .edit import GraphEditor
from .ir import Graph, Node, attrs_key, make_node
from .ops import OPS
from .pattern import Rule, rewrite

REASSOCIATIVE = ("add", "mul")


def constant_fold(graph: Graph) -> Graph:
    """Evaluate every op whose inputs are all constants (the result has the node's name and dtype), and
    rewrite ``op(op(x, c1), c2)`` to ``op(x, op(c1, c2))`` for op in add, mul (either operand order)."""
    editor = GraphEditor(graph)
    for node in graph:
        node = editor.remapped(node)
        inputs = [editor.nodes[i] for i in node.inputs]
        if inputs and all(x.op == "const" for x in inputs):
            value = OPS[node.op].compute(node.attrs, *[x.attrs["value"] for x in inputs])
            editor.add(make_node(node.name, "const", value=np.asarray(value, dtype=node.dtype)))
        elif not _reassociate(node, inputs, editor):
            editor.keep(node)
    return editor.finish()


def _split_const(inputs: list[Node]) -> tuple[Node, Node] | None:
    """(non-constant operand, constant operand) of a binary op with exactly one constant operand."""
    a, b = inputs
    if (a.op == "const") == (b.op == "const"):
        return None
    return (b, a) if a.op == "const" else (a, b)


def _reassociate(node: Node, inputs: list[Node], editor: GraphEditor) -> bool:
    """``op(op(x, c1), c2) -> op(x, c)`` with the constant ``c = op(c1, c2)``; True if it was rewritten."""
    if node.op not in REASSOCIATIVE or (outer := _split_const(inputs)) is None:
        return False
    inner, c2 = outer
    if inner.op != node.op or (split := _split_const([editor.nodes[i] for i in inner.inputs])) is None:
        return False
    x, c1 = split
    value = OPS[node.op].compute(node.attrs, c1.attrs["value"], c2.attrs["value"])
    c = make_node(editor.fresh("c"), "const", value=np.asarray(value))
    result = make_node(node.name, node.op, [x, c])
    if (result.shape, result.dtype) != (node.shape, node.dtype):
        return False
    editor.add(c)
    editor.add(result)
    return True


SIMPLIFICATIONS: tuple[Rule, ...] = tuple(Rule.parse(text) for text in (
    "add(x, 0) -> x",
    "sub(x, 0) -> x",
    "mul(x, 1) -> x",
    "div(x, 1) -> x",
    "sub(0, x) -> neg(x)",
    "mul(x, -1) -> neg(x)",
    "neg(neg(x)) -> x",
    "add(x, neg(y)) -> sub(x, y)",
    "sub(x, neg(y)) -> add(x, y)",
    "relu(relu(x)) -> relu(x)",
    "transpose(transpose(x)) -> x",
    "reshape(reshape(x, shape=s), shape=t) -> reshape(x, shape=t)",
    "reshape(x, shape=s) -> x",  # applies only when s is x's own shape (targets keep the node's shape)
))


def simplify(graph: Graph) -> Graph:
    """Algebraic simplification: one :func:`~mlsys_lib.graph.pattern.rewrite` sweep with :data:`SIMPLIFICATIONS`.

    Every identity is exact in IEEE arithmetic (up to the sign of a zero result). None that merely
    holds in real arithmetic but can change a NaN or an infinity (``x * 0 -> 0``, ``x - x -> 0``) is included.
    """
    return rewrite(graph, SIMPLIFICATIONS)


def cse(graph: Graph) -> Graph:
    """Common-subexpression elimination: nodes with the same op, the same inputs (in either order for a
    commutative op) and equal attributes become one (equal constants included). Inputs are never merged."""
    editor = GraphEditor(graph)
    first: dict[tuple, str] = {}
    for node in graph:
        node = editor.remapped(node)
        if node.op == "input":
            editor.keep(node)
            continue
        inputs = tuple(sorted(node.inputs)) if OPS[node.op].commutative else node.inputs
        key = (node.op, inputs, attrs_key(node.attrs))
        if key in first:
            editor.use_instead(node, first[key])
        else:
            first[key] = node.name
            editor.keep(node)
    return editor.finish()


def dce(graph: Graph) -> Graph:
    """Dead-code elimination: drop every node that no output depends on. Input nodes are kept (they are
    the graph's signature: the feeds ``evaluate`` expects do not change)."""
    live = graph.ancestors(graph.outputs)
    kept = [node for node in graph if node.name in live or node.op == "input"]
    return graph if len(kept) == len(graph) else Graph(kept, graph.outputs, check_shapes=False)

"""GraphEditor: how a pass makes its result graph without touching the input graph.

A pass walks the old graph in topological order. For each node it asks :meth:`GraphEditor.remapped`
for the node with its inputs renamed to their replacements so far, then keeps it, adds new nodes in
its place (a new node that takes the old node's name replaces it for every consumer), or sends its
consumers to an existing node instead (:meth:`use_instead`, which insists on equal shape and dtype).
:meth:`finish` returns the *same* graph object when nothing changed, so a pass manager can detect a
fixed point with ``is``. Because every node is kept, re-pointed to an equal-typed node, or made by
``make_node`` from nodes of the new graph, the result skips the re-check of every shape.
"""

from __future__ import annotations

import dataclasses

from .ir import Graph, Node


class GraphEditor:
    """The graph under construction: ``nodes`` (name -> Node, the new graph so far, in topological order)."""

    def __init__(self, graph: Graph):
        self.graph = graph
        self.nodes: dict[str, Node] = {}
        self._alias: dict[str, str] = {}
        self._taken: set[str] | None = None
        self._suffix: dict[str, int] = {}
        self.changed = False

    def remapped(self, node: Node) -> Node:
        """``node`` reading the replacements of its inputs (the same object if none was replaced)."""
        if not self._alias:
            return node
        inputs = tuple(self._alias.get(i, i) for i in node.inputs)
        return node if inputs == node.inputs else dataclasses.replace(node, inputs=inputs)

    def keep(self, node: Node) -> None:
        """Put ``node`` (as returned by :meth:`remapped`) in the new graph unchanged."""
        self.nodes[node.name] = node

    def add(self, node: Node) -> None:
        """Put a new node in the new graph; one named like an old node replaces it."""
        self.nodes[node.name] = node
        self.changed = True

    def drop(self) -> None:
        """Record that a node was left out (DCE)."""
        self.changed = True

    def use_instead(self, old: Node, name: str) -> None:
        """Consumers of ``old`` (and outputs naming it) read the new graph's node ``name`` instead.

        ValueError naming both nodes unless they have the same shape and dtype.
        """
        new = self.nodes[name]
        if (new.shape, new.dtype) != (old.shape, old.dtype):
            raise ValueError(f"node {old.name!r} ({old.op}, {old.dtype}{list(old.shape)}) cannot be replaced by "
                             f"{name!r} ({new.op}, {new.dtype}{list(new.shape)})")
        self._alias[old.name] = name
        self.changed = True

    def fresh(self, base: str) -> str:
        """A name used by neither graph: ``base``, or ``base_1``, ``base_2``, ..."""
        if self._taken is None:
            self._taken = set(self.graph.nodes)
        name, k = base, self._suffix.get(base, 0)
        while name in self._taken or name in self.nodes:
            k += 1
            name = f"{base}_{k}"
        self._suffix[base] = k
        self._taken.add(name)
        return name

    def finish(self) -> Graph:
        """The new graph, or the old graph itself when nothing changed."""
        if not self.changed:
            return self.graph
        return Graph(self.nodes.values(), [self._alias.get(o, o) for o in self.graph.outputs], check_shapes=False)

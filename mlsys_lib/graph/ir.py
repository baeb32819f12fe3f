"""The dataflow IR: :class:`Node` (op, inputs, attributes, inferred shape and dtype) and :class:`Graph`.

Both are immutable. A Node refers to its inputs by name; a Graph holds its nodes in a topological
order and names its outputs. ``Graph(nodes, outputs)`` checks what a hand-built graph can get wrong
and raises ValueError naming the node: duplicate names, dangling inputs (a name that is no node),
cycles, and shapes or dtypes that disagree with the op's rule. :func:`make_node` infers a node's
shape and dtype from its input nodes; :class:`GraphBuilder` builds graphs by hand.

Placeholders are ``input`` nodes (fed by name); constants are ``const`` nodes whose value is a
read-only numpy array. :func:`format_graph` is the text listing ``str(graph)`` prints; drawing is
in :mod:`~mlsys_lib.graph.show`, which builds on this module (this module imports only ``ops``).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

import numpy as np

from .ops import OPS, Shape


@dataclass(frozen=True, eq=False)
class Node:
    """One operation: ``name`` (unique in its graph), ``op`` (a key of :data:`~mlsys_lib.graph.ops.OPS`),
    ``inputs`` (names of the nodes it reads, in order), ``attrs`` (read-only, every attribute set),
    and the inferred output ``shape`` and ``dtype``. Build it with :func:`make_node`."""

    name: str
    op: str
    inputs: tuple[str, ...]
    attrs: Mapping[str, Any]
    shape: Shape
    dtype: np.dtype

    def __repr__(self) -> str:
        return f"Node({self.name!r}: {self.op}({', '.join(self.inputs)}) -> {self.dtype}{list(self.shape)})"


def _freeze(value: Any) -> Any:
    """An attribute value that cannot change: arrays become read-only copies, lists tuples."""
    if isinstance(value, np.ndarray):
        if value.flags.writeable or value.base is not None:
            value = value.copy()
            value.flags.writeable = False
        return value
    if isinstance(value, (list, tuple)):
        return tuple(_freeze(v) for v in value)
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.floating):
        return float(value)
    return value


def attrs_key(attrs: Mapping[str, Any]) -> tuple:
    """A hashable key equal for equal attributes (arrays compare by dtype, shape and bytes)."""
    return tuple((k, ("array", v.dtype.str, v.shape, v.tobytes()) if isinstance(v, np.ndarray) else v)
                 for k, v in sorted(attrs.items()))


def _infer(name: str, op: str, attrs: Mapping[str, Any], inputs: Sequence[Node]) -> tuple[Shape, np.dtype]:
    """The op's arity check and shape and dtype rule; errors (ValueError/TypeError) name the node."""
    arity = OPS[op].arity
    if (len(inputs) not in arity) if arity is not None else not inputs:
        expected = "one or more" if arity is None else " or ".join(map(str, arity))
        raise ValueError(f"node {name!r} ({op}): expects {expected} inputs, got {len(inputs)}")
    try:
        shape, dtype = OPS[op].infer(attrs, [x.shape for x in inputs], [x.dtype for x in inputs])
    except (ValueError, TypeError) as error:
        raise type(error)(f"node {name!r} ({op}): {error}") from None
    return tuple(int(n) for n in shape), np.dtype(dtype)


def make_node(name: str, op: str, inputs: Sequence[Node] = (), **attrs: Any) -> Node:
    """A node ``name = op(*inputs, **attrs)`` with its shape and dtype inferred from the input nodes.

    Unset attributes take the op's defaults. ValueError, naming the node, for an unknown op, a wrong
    number of inputs, unknown or missing attributes, or inputs the op rejects (shape mismatch).
    """
    if op not in OPS:
        raise ValueError(f"node {name!r}: unknown op {op!r}; the ops are {sorted(OPS)}")
    opdef = OPS[op]
    unknown = set(attrs) - set(opdef.attributes)
    if unknown:
        raise ValueError(f"node {name!r} ({op}): unknown attributes {sorted(unknown)}; "
                         f"{op} has {list(opdef.attributes)}")
    complete = {**opdef.defaults([x.shape for x in inputs]), **{k: _freeze(v) for k, v in attrs.items()}}
    missing = [a for a in opdef.attributes if a not in complete]
    if missing:
        raise ValueError(f"node {name!r} ({op}): missing attributes {missing}")
    shape, dtype = _infer(name, op, complete, inputs)
    return Node(name, op, tuple(x.name for x in inputs), MappingProxyType(complete), shape, dtype)


class Graph:
    """An immutable dataflow graph: nodes in topological order and the names of its outputs.

    ``graph[name]`` is a node, ``iter(graph)`` walks the nodes in topological order (each after its
    inputs), ``graph.inputs`` are the names of its ``input`` nodes in that order. The nodes may be
    given in any order; ValueError naming the node for duplicates, dangling inputs, cycles, shape or
    dtype mismatches, and unknown outputs. ``check_shapes=False`` skips re-running every op's shape
    rule: for passes, whose nodes are made by :func:`make_node` from the new graph's own nodes.
    """

    def __init__(self, nodes: Iterable[Node], outputs: Sequence[str], check_shapes: bool = True):
        by_name: dict[str, Node] = {}
        for node in nodes:
            if node.name in by_name:
                raise ValueError(f"node {node.name!r}: two nodes have this name")
            by_name[node.name] = node
        self._nodes = _topological(by_name)
        self._outputs = tuple(outputs)
        if not self._outputs:
            raise ValueError("a graph needs at least one output")
        for out in self._outputs:
            if out not in self._nodes:
                raise ValueError(f"output {out!r} is not a node of the graph")
        for node in self._nodes.values() if check_shapes else ():
            if node.op not in OPS:
                raise ValueError(f"node {node.name!r}: unknown op {node.op!r}")
            shape, dtype = _infer(node.name, node.op, node.attrs, [self._nodes[i] for i in node.inputs])
            if shape != node.shape or dtype != node.dtype:
                raise ValueError(f"node {node.name!r} ({node.op}): says {node.dtype}{list(node.shape)} but its "
                                 f"inputs give {dtype}{list(shape)}")

    @property
    def outputs(self) -> tuple[str, ...]:
        """The names of the output nodes, in order (``evaluate`` returns their values in this order)."""
        return self._outputs

    @property
    def nodes(self) -> Mapping[str, Node]:
        """name -> Node, in topological order (read-only)."""
        return MappingProxyType(self._nodes)

    def __getitem__(self, name: str) -> Node:
        return self._nodes[name]

    def __contains__(self, name: object) -> bool:
        return name in self._nodes

    def __iter__(self) -> Iterator[Node]:
        return iter(self._nodes.values())

    def __len__(self) -> int:
        return len(self._nodes)

    @functools.cached_property
    def inputs(self) -> tuple[str, ...]:
        """The names of the ``input`` nodes (the values ``evaluate`` needs fed)."""
        return tuple(n.name for n in self if n.op == "input")

    @functools.cached_property
    def consumers(self) -> Mapping[str, tuple[str, ...]]:
        """name -> the names of the nodes that read it (each once, in topological order)."""
        users: dict[str, list[str]] = {name: [] for name in self._nodes}
        for node in self:
            for name in dict.fromkeys(node.inputs):
                users[name].append(node.name)
        return MappingProxyType({name: tuple(u) for name, u in users.items()})

    def ancestors(self, names: Iterable[str]) -> set[str]:
        """``names`` and every node they depend on (what evaluating them needs; what DCE keeps)."""
        stack = list(names)
        found = set(stack)
        while stack:
            for i in self._nodes[stack.pop()].inputs:
                if i not in found:
                    found.add(i)
                    stack.append(i)
        return found

    @property
    def num_ops(self) -> int:
        """The number of nodes that are not inputs or constants."""
        return sum(n.op not in ("input", "const") for n in self)

    def __str__(self) -> str:
        return format_graph(self)

    def __repr__(self) -> str:
        return f"Graph({len(self)} nodes, outputs={list(self._outputs)})"


def _topological(by_name: dict[str, Node]) -> dict[str, Node]:
    """The nodes re-ordered so that each comes after its inputs (given order when it already is one).

    ValueError naming the node for an input that is no node, and naming the nodes of a cycle.
    """
    seen: set[str] = set()
    for node in by_name.values():  # fast path: already topological
        if not all(i in seen for i in node.inputs):
            break
        seen.add(node.name)
    else:
        return by_name
    order: dict[str, Node] = {}
    on_path: dict[str, None] = {}  # the DFS path, in order, for naming a cycle
    for root in by_name:
        if root in order:
            continue
        stack = [(root, iter(by_name[root].inputs))]
        on_path[root] = None
        while stack:
            name, pending = stack[-1]
            child = next(pending, None)
            if child is None:
                stack.pop()
                del on_path[name]
                order[name] = by_name[name]
            elif child not in by_name:
                node = by_name[name]
                raise ValueError(f"node {name!r} ({node.op}): input {child!r} is not a node of the graph "
                                 f"(dangling input)")
            elif child in on_path:
                path = list(on_path)
                cycle = path[path.index(child):] + [child]
                raise ValueError(f"node {child!r} is on a cycle: {' <- '.join(cycle)} (each reads the next)")
            elif child not in order:
                on_path[child] = None
                stack.append((child, iter(by_name[child].inputs)))
    return order


class GraphBuilder:
    """Builds a graph by hand; each call returns the new Node (shape and dtype inferred at once)::

        b = GraphBuilder()
        x = b.input("x", (4, 3))
        y = b.add(b.mul(x, b.const(2.0)), b.const(1.0))   # any op of OPS: b.<op>(*inputs, name=None, **attrs)
        graph = b.build([y])

    Unnamed nodes are called ``<op>_<k>``. Shape errors are raised by the call that makes the node.
    """

    def __init__(self) -> None:
        self._nodes: dict[str, Node] = {}
        self._counter = 0

    def input(self, name: str, shape: Sequence[int], dtype: Any = np.float32) -> Node:
        """A placeholder fed by name when the graph is evaluated."""
        return self.op("input", name=name, shape=tuple(int(n) for n in shape), dtype=np.dtype(dtype))

    def const(self, value: Any, dtype: Any = np.float32, name: str | None = None) -> Node:
        """A constant: ``value`` as a read-only array of ``dtype``."""
        return self.op("const", name=name, value=np.array(value, dtype=dtype))

    def op(self, op: str, *inputs: Node, name: str | None = None, **attrs: Any) -> Node:
        """The node ``op(*inputs, **attrs)``, added to the graph."""
        if name is None:
            while f"{op}_{self._counter}" in self._nodes:
                self._counter += 1
            name = f"{op}_{self._counter}"
        elif name in self._nodes:
            raise ValueError(f"node {name!r}: the builder already has a node of this name")
        for x in inputs:
            if self._nodes.get(getattr(x, "name", None)) is not x:
                raise ValueError(f"node {name!r} ({op}): input {x!r} was not made by this builder")
        node = make_node(name, op, inputs, **attrs)
        self._nodes[name] = node
        return node

    def __getattr__(self, op: str) -> Callable[..., Node]:
        if op in OPS:
            return functools.partial(self.op, op)
        raise AttributeError(f"GraphBuilder has no method {op!r} and there is no op of that name")

    def __len__(self) -> int:
        """The number of nodes built so far."""
        return len(self._nodes)

    def build(self, outputs: Sequence[Node]) -> Graph:
        """The graph of every node built so far, with ``outputs`` as its outputs."""
        return Graph(self._nodes.values(), [out.name for out in outputs])


# -- the text listing: str(graph) ----------------------------------------------------------------
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

"""Rewrite rules as small source/target templates, matched on the graph (the lecture's "templates").

A template is an expression in Python syntax over the ops of :data:`~mlsys_lib.graph.ops.OPS`::

    add(x, 0)                       x: any node;  0: a constant whose elements are all 0
    transpose(transpose(x))         an unset attribute matches only the op's default (reversed axes)
    reshape(reshape(x, shape=s), shape=t)   s, t: attribute variables, bound by matching

A :class:`Rule` is ``source -> target``: ``Rule.parse("add(x, 0) -> x")``. Matching binds each variable
to one node (a variable used twice must meet the same node) and tries both operand orders of a
commutative op. A match is applied only if the target's shape and dtype equal the matched node's,
so ``add(x, 0) -> x`` leaves ``x + zeros`` alone when the zeros broadcast ``x`` to a larger shape.

:func:`rewrite` applies a list of rules in one sweep over the graph; :func:`apply_rule` applies
one rule at one node (the cost-based search enumerates these).
"""

from __future__ import annotations

import ast
import dataclasses
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Union

import numpy as np

from .edit import GraphEditor
from .ir import Graph, Node, make_node
from .ops import OPS


@dataclass(frozen=True)
class Var:
    """A variable: matches any node."""

    name: str

    def __str__(self) -> str:
        return self.name


@dataclass(frozen=True)
class Lit:
    """A number: matches a constant whose every element equals it; builds a scalar constant."""

    value: float

    def __str__(self) -> str:
        return repr(self.value)


@dataclass(frozen=True)
class AttrVar:
    """An attribute variable (``shape=s``): matches any attribute value, binds it."""

    name: str

    def __str__(self) -> str:
        return self.name


@dataclass(frozen=True)
class Apply:
    """``op(*args, **attrs)``; attrs is a sorted tuple of (name, value or AttrVar)."""

    op: str
    args: tuple[Template, ...]
    attrs: tuple[tuple[str, Any], ...] = ()

    def __str__(self) -> str:
        return f"{self.op}({', '.join([str(a) for a in self.args] + [f'{k}={v}' for k, v in self.attrs])})"


Template = Union[Var, Lit, Apply]
TEMPLATE_OPS = frozenset(OPS) - {"input", "const", "fused"}  # sources are variables and numbers


def parse_template(text: str) -> Template:
    """The template written as ``text`` (Python call syntax). ValueError saying which part is not a template."""
    try:
        tree = ast.parse(text.strip(), mode="eval").body
    except SyntaxError as error:
        raise ValueError(f"template {text!r}: {error.msg}") from None
    return _convert(tree, text)


def _convert(tree: ast.expr, text: str) -> Template:
    if isinstance(tree, ast.Name):
        if tree.id in OPS:
            raise ValueError(f"template {text!r}: {tree.id!r} is an op; call it, e.g. {tree.id}(x)")
        return Var(tree.id)
    if isinstance(tree, (ast.Constant, ast.UnaryOp)):
        value = ast.literal_eval(tree)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return Lit(value)
    if isinstance(tree, ast.Call) and isinstance(tree.func, ast.Name) and tree.func.id in TEMPLATE_OPS:
        attrs = tuple(sorted((kw.arg, AttrVar(kw.value.id) if isinstance(kw.value, ast.Name)
                              else _literal(kw.value, text)) for kw in tree.keywords))
        return Apply(tree.func.id, tuple(_convert(a, text) for a in tree.args), attrs)
    raise ValueError(f"template {text!r}: cannot read {ast.unparse(tree)!r} (expected a variable, a number, "
                     f"or a call of one of {sorted(TEMPLATE_OPS)})")


def _literal(tree: ast.expr, text: str) -> Any:
    try:
        value = ast.literal_eval(tree)
    except ValueError:
        raise ValueError(f"template {text!r}: attribute value {ast.unparse(tree)!r} is not a literal") from None
    return tuple(value) if isinstance(value, list) else value


def walk(template: Template) -> Iterator[Template | AttrVar]:
    """Every part of ``template``: itself, its attribute variables and, recursively, its arguments."""
    yield template
    if isinstance(template, Apply):
        yield from (v for _, v in template.attrs if isinstance(v, AttrVar))
        for arg in template.args:
            yield from walk(arg)


def variables(template: Template) -> set[str]:
    """The names of the node variables and attribute variables in ``template``."""
    return {part.name for part in walk(template) if isinstance(part, (Var, AttrVar))}


def attribute_variables(template: Template) -> set[str]:
    """The names of the attribute variables in ``template``."""
    return {part.name for part in walk(template) if isinstance(part, AttrVar)}


def ops_of(template: Template) -> list[str]:
    """The ops of ``template``, one entry per Apply (a tree: shared subexpressions count each time)."""
    return [part.op for part in walk(template) if isinstance(part, Apply)]


def evaluate_template(template: Template, values: Mapping[str, Any]) -> np.ndarray:
    """The numpy value of ``template`` with its variables (node and attribute ones) taken from ``values``."""
    if isinstance(template, Var):
        return values[template.name]
    if isinstance(template, Lit):
        return np.asarray(template.value)
    args = [evaluate_template(a, values) for a in template.args]
    attrs = {**OPS[template.op].defaults([a.shape for a in args]),
             **{k: values[v.name] if isinstance(v, AttrVar) else v for k, v in template.attrs}}
    return np.asarray(OPS[template.op].compute(attrs, *args))


@dataclass(frozen=True)
class Rule:
    """A rewrite rule ``source -> target``; the source is an op application, the target uses only its variables.
    ``name`` defaults to the rule's text."""

    source: Apply
    target: Template
    name: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "name", self.name or str(self))
        if not isinstance(self.source, Apply):
            raise ValueError(f"rule {self}: the source must be an op application, got {self.source}")
        unbound = variables(self.target) - variables(self.source)
        if unbound:
            raise ValueError(f"rule {self}: target variables {sorted(unbound)} do not occur in the source")

    @classmethod
    def parse(cls, text: str, name: str = "") -> Rule:
        """``Rule.parse("neg(neg(x)) -> x")``."""
        source, arrow, target = text.partition("->")
        if not arrow:
            raise ValueError(f"rule {text!r}: expected 'source -> target'")
        return cls(parse_template(source), parse_template(target), name)

    def __str__(self) -> str:
        return f"{self.source} -> {self.target}"


Bindings = dict[str, Any]


def match(template: Template, node: Node, nodes: Mapping[str, Node], bindings: Bindings | None = None) -> Bindings | None:
    """The variable bindings under which ``template`` matches ``node`` (inputs looked up in ``nodes``), or None."""
    bindings = {} if bindings is None else bindings
    if isinstance(template, Var):
        bound = bindings.get(template.name)
        if bound is None:
            return {**bindings, template.name: node.name}
        return bindings if bound == node.name else None
    if isinstance(template, Lit):
        value = node.attrs["value"] if node.op == "const" else None
        return bindings if value is not None and value.size and bool(np.all(value == template.value)) else None
    if node.op != template.op or len(node.inputs) != len(template.args):
        return None
    bindings = _match_attrs(template, node, nodes, bindings)
    if bindings is None:
        return None
    orders = [node.inputs]
    if OPS[node.op].commutative and node.inputs[0] != node.inputs[1]:
        orders.append(node.inputs[::-1])
    for inputs in orders:
        found: Bindings | None = bindings
        for arg, name in zip(template.args, inputs):
            found = match(arg, nodes[name], nodes, found)
            if found is None:
                break
        if found is not None:
            return found
    return None


def _match_attrs(template: Apply, node: Node, nodes: Mapping[str, Node], bindings: Bindings) -> Bindings | None:
    """Attributes the template sets must be equal (or bind its variables); the others must be the defaults."""
    given = dict(template.attrs)
    defaults = OPS[node.op].defaults([nodes[i].shape for i in node.inputs]) if len(given) < len(node.attrs) else {}
    for key, value in node.attrs.items():
        wanted = given.get(key, defaults.get(key))
        if isinstance(wanted, AttrVar):
            if wanted.name in bindings and bindings[wanted.name] != value:
                return None
            bindings = {**bindings, wanted.name: value}
        elif wanted != value:
            return None
    return bindings


def _build(template: Template, bindings: Bindings, editor: GraphEditor, made: list[Node], dtype: np.dtype) -> Node:
    """Build ``template`` bottom-up; new nodes (fresh names) are appended to ``made``, the top one last."""
    if isinstance(template, Var):
        return editor.nodes[bindings[template.name]]
    if isinstance(template, Lit):
        node = make_node(editor.fresh("c"), "const", value=np.array(template.value, dtype=dtype))
    else:
        inputs = [_build(a, bindings, editor, made, dtype) for a in template.args]
        attrs = {k: bindings[v.name] if isinstance(v, AttrVar) else v for k, v in template.attrs}
        node = make_node(editor.fresh(template.op), template.op, inputs, **attrs)
    made.append(node)
    return node


def _same_type(a: Node, b: Node) -> bool:
    return a.shape == b.shape and a.dtype == b.dtype


def try_rule(rule: Rule, node: Node, editor: GraphEditor) -> bool:
    """Apply ``rule`` at ``node`` (as returned by ``editor.remapped``) if it matches and its target has
    ``node``'s shape and dtype; True when the editor now replaces ``node`` (the caller must not keep it)."""
    bindings = match(rule.source, node, editor.nodes)
    if bindings is None:
        return False
    if isinstance(rule.target, Var):
        result = editor.nodes[bindings[rule.target.name]]
        if not _same_type(result, node):
            return False
        editor.use_instead(node, result.name)
        return True
    made: list[Node] = []
    try:
        top = _build(rule.target, bindings, editor, made, node.dtype)
    except ValueError:  # the target does not type-check on these inputs
        return False
    if not _same_type(top, node):
        return False
    for new in made[:-1]:
        editor.add(new)
    editor.add(dataclasses.replace(top, name=node.name))
    return True


def rewrite(graph: Graph, rules: Sequence[Rule]) -> Graph:
    """One sweep in topological order: at each node the first matching rule (in list order) is applied.

    Consumers see the rewritten node, so chains (``neg(neg(neg(neg(x))))``) collapse in one sweep.
    Returns a new graph, or ``graph`` itself when no rule applied; the matched nodes that are now
    unused stay until dead-code elimination.
    """
    by_op: dict[str, list[Rule]] = {}
    for rule in rules:
        by_op.setdefault(rule.source.op, []).append(rule)
    editor = GraphEditor(graph)
    for node in graph:
        node = editor.remapped(node)
        if not any(try_rule(rule, node, editor) for rule in by_op.get(node.op, ())):
            editor.keep(node)
    return editor.finish()


def apply_rule(graph: Graph, rule: Rule, name: str) -> Graph | None:
    """``graph`` with ``rule`` applied at node ``name``, or None if it does not apply there."""
    editor = GraphEditor(graph)
    for node in graph:
        node = editor.remapped(node)
        if node.name != name:
            editor.keep(node)
        elif not try_rule(rule, node, editor):
            return None
    return editor.finish()

"""from_autodiff: capture a define-then-run graph of :mod:`mlsys_lib.autodiff` as a graph IR.

Placeholders become ``input`` nodes (same names), eager tensors used in the graph (weights given as
arrays, Python numbers such as the 2 of ``x * 2``) become ``const`` nodes, and each symbolic op
becomes the IR op of the same meaning. ``linear`` (matmul plus bias in one autodiff op) becomes a
matmul and an add. The captured graph evaluates to what ``Executor(outputs).run(feeds)`` gives.
"""

from __future__ import annotations

from collections.abc import Sequence

from mlsys_lib.autodiff import Tensor, topological_order

from .ir import Graph, Node, make_node

SAME_NAME = ("add", "sub", "mul", "div", "neg", "exp", "relu", "matmul")
CAPTURED = SAME_NAME + ("transpose", "reshape", "linear")


def from_autodiff(outputs: Tensor | Sequence[Tensor]) -> Graph:
    """The graph IR of the autodiff graph behind ``outputs`` (a Tensor or a list of them).

    Node names: a placeholder's (or tensor's) own name, else ``<op>_<k>`` (k: position in topological
    order). ValueError naming the autodiff node for an op the IR does not have (the captured ops are
    :data:`CAPTURED`), for a placeholder without a name and for two placeholders of one name.
    """
    outputs = [outputs] if isinstance(outputs, Tensor) else list(outputs)
    made: dict[str, Node] = {}
    of_tensor: dict[int, Node] = {}

    def node(name: str, op: str, inputs: Sequence[Node] = (), **attrs) -> Node:
        base, k = name, 0
        while name in made:
            k += 1
            name = f"{base}_{k}"
        made[name] = make_node(name, op, inputs, **attrs)
        return made[name]

    for k, tensor in enumerate(topological_order(outputs)):
        inputs = [of_tensor[id(x)] for x in tensor.inputs]
        if tensor.op is None and tensor.data is None:
            if not tensor.name or tensor.name in made:
                raise ValueError(f"from_autodiff: placeholder #{k} (shape {tensor.shape}) needs a name of its own, "
                                 f"got {tensor.name!r}")
            result = node(tensor.name, "input", shape=tensor.shape, dtype=tensor.dtype)
        elif tensor.op is None:
            result = node(tensor.name or f"const_{k}", "const", value=tensor.data)
        else:
            op, name = tensor.op.name, tensor.name or f"{tensor.op.name}_{k}"
            if op in SAME_NAME:
                result = node(name, op, inputs)
            elif op == "transpose":
                result = node(name, op, inputs, perm=tensor.op.axes)
            elif op == "reshape":
                result = node(name, op, inputs, shape=tensor.op.target)
            elif op == "linear":
                result = node(name, "add", [node(f"{name}_matmul", "matmul", inputs[:2]), inputs[2]])
            else:
                raise ValueError(f"from_autodiff: node {name!r} has op {op!r}, which the graph IR does not "
                                 f"capture; captured ops: {list(CAPTURED)}")
        of_tensor[id(tensor)] = result
    return Graph(made.values(), [of_tensor[id(out)].name for out in outputs])

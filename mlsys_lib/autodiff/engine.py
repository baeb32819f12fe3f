"""Reverse mode: walk the graph from the outputs back to the inputs, accumulating adjoints.

The adjoint of a node is ``v̄ = ∂L/∂v``. Visiting nodes in *reverse topological order* means every
consumer of v has added its contribution ``ū · ∂u/∂v`` (the op's VJP) before v is visited, so a value
used twice (``b = a + a``) gets the sum of both contributions.

With ``create_graph=True`` the VJPs run as ordinary recorded ops: the result is a *backward graph*
that can itself be differentiated (second derivatives, Hessian-vector products). With it off they
run under ``no_grad()`` and record nothing. Symbolic inputs always give symbolic gradient nodes.

The engine is built on :mod:`~mlsys_lib.autodiff.tensor` (nodes, ``no_grad``) and one op, ``sum_to``;
``tensor`` does not import it back: ``loss.backward()`` is :func:`backward`, set on ``Tensor`` by
:mod:`~mlsys_lib.autodiff.operators`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence

import numpy as np

from .layout import sum_to
from .tensor import Tensor, as_tensor, no_grad


def topological_order(outputs: Sequence[Tensor]) -> list[Tensor]:
    """Every node the outputs depend on, each after all of its inputs.

    Iterative depth-first search with an explicit stack (no recursion, so a 10,000-node chain is fine):
    a node is pushed once to expand its inputs and once more to be emitted after them.
    """
    order: list[Tensor] = []
    seen: set[int] = set()
    stack: list[tuple[Tensor, bool]] = [(out, False) for out in reversed(outputs)]
    while stack:
        node, inputs_done = stack.pop()
        if inputs_done:
            order.append(node)
        elif id(node) not in seen:
            seen.add(id(node))
            stack.append((node, True))
            stack.extend((x, False) for x in node.inputs if id(x) not in seen)
    return order


def backprop(outputs: Sequence[Tensor], seeds: Sequence[Tensor], keep: Callable[[Tensor], bool],
             create_graph: bool) -> dict[Tensor, Tensor]:
    """The adjoints of the nodes for which ``keep(node)`` is true, given the outputs' adjoints ``seeds``.

    A node's adjoint is final when the node is visited, so it is handed out (if kept) and dropped.
    """
    adjoints: dict[Tensor, Tensor] = {}
    for out, seed in zip(outputs, seeds):
        _accumulate(adjoints, out, seed)
    kept: dict[Tensor, Tensor] = {}
    with contextlib.nullcontext() if create_graph else no_grad():
        for node in reversed(topological_order(outputs)):
            g = adjoints.pop(node, None)
            if g is None:
                continue
            if keep(node):
                kept[node] = g
            if node.op is None:
                continue
            for x, gx in zip(node.inputs, node.op.vjp(g, node, *node.inputs)):
                if gx is not None and x.requires_grad:
                    _accumulate(adjoints, x, sum_to(gx, x.shape))
    return kept


def _accumulate(adjoints: dict[Tensor, Tensor], node: Tensor, g: Tensor) -> None:
    adjoints[node] = adjoints[node] + g if node in adjoints else g


def seed_for(output: Tensor, grad, op: str) -> Tensor:
    """The adjoint to start from: ``grad`` (output's shape), or 1 for a scalar output."""
    if grad is None:
        if output.shape != ():
            raise ValueError(f"{op}: the output has shape {output.shape}, not a scalar; pass a seed gradient "
                             f"of shape {output.shape} (e.g. grad=np.ones({output.shape}))")
        return Tensor(np.ones((), output.dtype))
    grad = as_tensor(grad, like=output)
    if grad.shape != output.shape:
        raise ValueError(f"{op}: seed gradient has shape {grad.shape}, the output has shape {output.shape}")
    return grad


def backward(output: Tensor, grad=None, create_graph: bool = False) -> None:
    """``output.backward(grad)``: accumulate d(output)/d(leaf) into the ``.grad`` of every leaf that requires grad.

    grad: the seed ∂L/∂output, needed (with output's shape) unless output is a scalar.
    create_graph: record the backward pass as a graph, so the gradients can be differentiated again.
    This function is the method ``Tensor.backward`` (:mod:`~mlsys_lib.autodiff.operators` sets it).
    """
    if output.data is None:
        raise TypeError("backward: the output is symbolic; use gradients(y, xs) and an Executor instead")
    if not output.requires_grad:
        raise ValueError("backward: the output does not depend on any tensor with requires_grad=True")
    seed = seed_for(output, grad, "backward")
    for leaf, g in backprop([output], [seed], lambda node: node.op is None, create_graph).items():
        leaf.grad = g if leaf.grad is None else leaf.grad + g


def grad(outputs: Tensor | Sequence[Tensor], inputs: Tensor | Sequence[Tensor], grad_outputs=None,
         create_graph: bool = False) -> tuple[Tensor, ...]:
    """d(Σ outputs · grad_outputs)/d(input) for each input, returned (not accumulated into ``.grad``).

    outputs: a Tensor or a list; grad_outputs: its seed, or a list of seeds for a list of outputs
    (None: each output must be a scalar, seed 1).
    inputs: any Tensors of the graph (leaves or intermediate); one that the outputs do not depend on
    gets zeros. create_graph=True records the backward pass so the result can be differentiated again.
    """
    single = isinstance(outputs, Tensor)
    outputs = [outputs] if single else list(outputs)
    inputs = [inputs] if isinstance(inputs, Tensor) else list(inputs)
    if grad_outputs is None:
        grad_outputs = [None] * len(outputs)
    elif single:
        grad_outputs = [grad_outputs]
    if len(grad_outputs) != len(outputs):
        raise ValueError(f"grad: {len(outputs)} outputs but {len(grad_outputs)} grad_outputs")
    seeds = [seed_for(out, g, "grad") for out, g in zip(outputs, grad_outputs)]
    wanted = {id(x) for x in inputs}
    adjoints = backprop(outputs, seeds, lambda node: id(node) in wanted, create_graph)
    return tuple(adjoints[x] if x in adjoints else Tensor(np.zeros(x.shape, x.dtype)) for x in inputs)

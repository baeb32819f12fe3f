"""Conv + batch-norm folding for inference: the lecture's motivating graph rewrite.

At inference batch norm uses fixed statistics, so it is a per-channel affine map of the conv output
``Y = conv(X, W) + B``: ``Z[n,c,h,w] = Y[n,c,h,w]·R[c] + P[c]`` with ``R = γ/√(σ²+ε)``, ``P = β − μR``.
Because conv is linear in its weights, the scale moves into them:

    W₂[c,d,u,v] = W[c,d,u,v] · R[c]        (scale output channel c)
    B₂[c]       = B[c] · R[c] + P[c]       (B = 0 for a conv without bias)

and ``Z = conv(X, W₂) + B₂``: one conv, no batch-norm kernel, no intermediate tensor.
"""

from __future__ import annotations

import numpy as np

from .edit import GraphEditor
from .ir import Graph, Node, make_node
from .ops import batch_norm_scale_shift


def fold_conv_batch_norm(graph: Graph) -> Graph:
    """Replace ``batch_norm(conv2d(x, W[, B]), γ, β, μ, σ²)`` by ``conv2d(x, W₂, B₂)`` (see the module docstring).

    Applies when W, B and the four statistics are constants and the conv feeds only this batch norm
    (otherwise the conv would still have to run). W₂ and B₂ are computed in float64 and stored in the
    weights' dtype. Returns a new graph, or ``graph`` itself when nothing was folded.
    """
    editor = GraphEditor(graph)
    for node in graph:
        node = editor.remapped(node)
        folded = _folded(node, graph, editor) if node.op == "batch_norm" else None
        if folded is None:
            editor.keep(node)
            continue
        for new in folded:
            editor.add(new)
    return editor.finish()


def _folded(bn: Node, graph: Graph, editor: GraphEditor) -> list[Node] | None:
    """The new nodes (W₂, B₂, the conv named like ``bn``) that replace ``bn``, or None if it does not fold."""
    conv = editor.nodes[bn.inputs[0]]
    stats = [editor.nodes[i] for i in bn.inputs[1:]]
    params = [editor.nodes[i] for i in conv.inputs[1:]] if conv.op == "conv2d" else []
    if (not params or conv.name in graph.outputs or len(graph.consumers.get(conv.name, ())) != 1
            or any(p.op != "const" for p in params + stats)):
        return None
    gamma, beta, mean, var = (s.attrs["value"].astype(np.float64) for s in stats)
    scale, shift = batch_norm_scale_shift(gamma, beta, mean, var, bn.attrs["eps"])  # R, P
    weight = params[0].attrs["value"]
    bias = params[1].attrs["value"].astype(np.float64) if len(params) == 2 else np.zeros(weight.shape[0])
    w2 = make_node(editor.fresh(f"{bn.name}_weight"), "const",
                   value=(weight * scale[:, None, None, None]).astype(weight.dtype))
    b2 = make_node(editor.fresh(f"{bn.name}_bias"), "const", value=(bias * scale + shift).astype(weight.dtype))
    folded = make_node(bn.name, "conv2d", [editor.nodes[conv.inputs[0]], w2, b2], **conv.attrs)
    if (folded.shape, folded.dtype) != (bn.shape, bn.dtype):
        return None
    return [w2, b2, folded]

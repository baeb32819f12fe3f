"""Forward mode: push a tangent (a direction in input space) through the computation alongside the values.

Each op's JVP maps its inputs' tangents to its output's tangent, so one pass of f gives the
directional derivative J·v. That costs one pass per input direction, against one pass per output
for reverse mode: forward mode wins for few inputs and many outputs.

:func:`~mlsys_lib.autodiff.tensor.apply` runs every op; while :func:`jvp` runs it hands each new node
to :func:`push_tangent` here (``_mode.push_tangent``), so the core in ``tensor`` needs no import of
this module or of the ops the tangents are computed with.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from .layout import broadcast_to
from .tensor import Op, Tensor, _mode, _switch, as_tensor


def jvp(f: Callable[..., Tensor | Sequence[Tensor]], primals: Sequence, tangents: Sequence):
    """f's outputs at ``primals`` and their tangents J·tangents: ``(outputs, tangent_outputs)``.

    primals: arrays or Tensors, one per argument of f; tangents: one per primal, same shape, or None
    for a zero tangent (e.g. integer labels). f returns a Tensor or a tuple/list of Tensors; the
    tangents come back in the same structure. A Tensor primal keeps its ``requires_grad``, so f may
    itself call ``grad`` (forward-over-reverse gives Hessian-vector products). Calls do not nest.
    """
    if _mode.push_tangent is not None:
        raise RuntimeError("jvp: nested forward mode is not supported")
    if len(primals) != len(tangents):
        raise ValueError(f"jvp: {len(primals)} primals but {len(tangents)} tangents")
    inputs = []
    for i, (p, t) in enumerate(zip(primals, tangents)):
        p = as_tensor(p)
        x = Tensor(p.numpy(), requires_grad=p.requires_grad)
        if t is not None:
            x.tangent = as_tensor(t, like=x)
            if x.tangent.shape != x.shape:
                raise ValueError(f"jvp: tangent {i} has shape {x.tangent.shape}, its primal has shape {x.shape}")
        inputs.append(x)
    with _switch("push_tangent", push_tangent):
        outputs = f(*inputs)
    single = isinstance(outputs, Tensor)
    outs = [outputs] if single else list(outputs)
    tangent_outs = [o.tangent if o.tangent is not None else Tensor(np.zeros(o.shape, o.dtype)) for o in outs]
    return (outputs, tangent_outs[0]) if single else (outputs, type(outputs)(tangent_outs))


def push_tangent(op: Op, out: Tensor, inputs: Sequence[Tensor]) -> Tensor | None:
    """out's tangent from its inputs' tangents by the op's JVP, broadcast to out's shape (apply() calls it)."""
    with _switch("push_tangent", None):  # the JVP's own ops carry no tangents
        tangent = op.jvp(tuple(x.tangent for x in inputs), out, *inputs)
        if tangent is not None and tangent.shape != out.shape:
            tangent = broadcast_to(tangent, out.shape)
    return tangent

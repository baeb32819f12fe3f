"""Autodiff ops the transformer needs beyond ``mlsys_lib.autodiff``: the embedding lookup, and RMSNorm.

``embedding(table, ids)`` gathers rows of a table: ``out[..., :] = table[ids[...], :]``. Its adjoint
scatters the output's adjoint back and **adds** rows that were read more than once (a token that
occurs twice in the batch gets both contributions), ``np.add.at``. Gather and scatter-add are each
other's VJP (as ``broadcast_to`` and ``sum_to`` are), so derivatives of every order come for free.
The ids are integers and carry no gradient. A lookup does no arithmetic: it costs 0 FLOPs.
"""

from __future__ import annotations

import numpy as np

from ..autodiff import Op, Tensor, apply, mean
from ..autodiff.tensor import as_tensor


class Gather(Op):
    """table (V, D), ids (...) of integers in [0, V) -> (..., D): the rows ``table[ids]``."""

    name = "gather"

    def forward(self, table, ids):
        return table[ids]

    def shape(self, table, ids):
        if len(table) != 2:
            raise ValueError(f"{self.name}: the table must be 2-D (rows, features), got shape {table}")
        return ids + table[1:]

    def dtype(self, table, ids):
        return table

    def vjp(self, g, out, table, ids):
        return apply(ScatterAdd(table.shape[0]), g, ids), None

    def jvp(self, tangents, out, table, ids):
        return None if tangents[0] is None else apply(Gather(), tangents[0], ids)


class ScatterAdd(Op):
    """g (..., D), ids (...) -> (rows, D) zeros with ``g[i]`` added into row ``ids[i]`` for every i."""

    name = "scatter_add"

    def __init__(self, rows: int):
        self.rows = rows

    def forward(self, g, ids):
        out = np.zeros((self.rows,) + g.shape[ids.ndim:], g.dtype)
        np.add.at(out, ids, g)
        return out

    def shape(self, g, ids):
        if g[:len(ids)] != ids:
            raise ValueError(f"{self.name}: the adjoint {g} must start with the ids' shape {ids}")
        return (self.rows,) + g[len(ids):]

    def dtype(self, g, ids):
        return g

    def vjp(self, g, out, g_in, ids):
        return apply(Gather(), g, ids), None

    def jvp(self, tangents, out, g_in, ids):
        return None if tangents[0] is None else apply(ScatterAdd(self.rows), tangents[0], ids)


def embedding(table, ids) -> Tensor:
    """Rows of ``table`` (V, D) picked by integer ``ids`` (...) in [0, V) -> (..., D)."""
    table, ids = as_tensor(table), as_tensor(ids)
    if not np.issubdtype(ids.dtype, np.integer):
        raise TypeError(f"embedding: ids must be integers, got {ids.dtype}")
    if ids.data is not None and ids.data.size and (ids.data.min() < 0 or ids.data.max() >= table.shape[0]):
        raise ValueError(f"embedding: ids must lie in [0, {table.shape[0]}), "
                         f"got values in [{ids.data.min()}, {ids.data.max()}]")
    return apply(Gather(), table, ids)


def rms_norm(x, weight, eps: float = 1e-5) -> Tensor:
    """RMSNorm (Zhang & Sennrich 2019): x / √(mean(x²) + eps) · weight over the last axis.

    x: (..., D); weight: (D,). Unlike LayerNorm it neither subtracts the mean nor adds a bias.
    Composed of autodiff primitives, so its derivatives come from theirs.
    """
    x, weight = as_tensor(x), as_tensor(weight)
    if x.ndim < 1 or weight.shape != x.shape[-1:]:
        raise ValueError(f"rms_norm: expected x (..., D) and weight (D,), got {x.shape} and {weight.shape}")
    return x * (mean(x * x, axis=-1, keepdims=True) + eps) ** -0.5 * weight

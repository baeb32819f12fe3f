"""Matrix products: matmul (2-D and batched) and linear (matmul plus bias, in one op).

For C = A B with A (..., m, k), B (..., k, n) -> C (..., m, n), batch axes broadcasting:
    VJP  Ā = C̄ Bᵀ,  B̄ = Aᵀ C̄   (summed back over broadcast batch axes by the engine)
    JVP  Ċ = Ȧ B + A Ḃ
"""

from __future__ import annotations

import numpy as np

from .elementwise import total
from .layout import swap_last_axes
from .shapes import broadcast_shapes
from .tensor import Op, Tensor, apply, as_tensor, operands


class MatMul(Op):
    name = "matmul"

    def forward(self, a, b):
        return a @ b

    def shape(self, a, b):
        if len(a) < 2 or len(b) < 2:
            raise ValueError(f"{self.name}: operands must be at least 2-D (reshape vectors to (1, n) or (n, 1)), "
                             f"got {a} @ {b}")
        if a[-1] != b[-2]:
            raise ValueError(f"{self.name}: inner dimensions differ: {a} @ {b} ({a[-1]} != {b[-2]})")
        return broadcast_shapes(self.name, a[:-2], b[:-2]) + (a[-2], b[-1])

    def vjp(self, g, out, a, b):
        return (g @ swap_last_axes(b) if a.requires_grad else None,
                swap_last_axes(a) @ g if b.requires_grad else None)

    def jvp(self, tangents, out, a, b):
        ta, tb = tangents
        return total(None if ta is None else ta @ b, None if tb is None else a @ tb)


class Linear(MatMul):
    """x W + b in one op, the bias added in place to the fresh product: one array instead of two, per layer,
    both in memory traffic and in what the graph keeps alive until backward. Derivatives: matmul's, plus b̄ = ḡ."""

    name = "linear"

    def forward(self, x, w, b):
        out = x @ w
        return np.add(out, b, out=out) if out.dtype == np.result_type(out, b) else out + b

    def shape(self, x, w, b):
        out = super().shape(x, w)
        if b != out[-1:]:
            raise ValueError(f"{self.name}: bias must have shape {out[-1:]}, got {b} (x {x}, weight {w})")
        return out

    def vjp(self, g, out, x, w, b):
        return super().vjp(g, out, x, w) + (g,)

    def jvp(self, tangents, out, x, w, b):
        return total(super().jvp(tangents[:2], out, x, w), tangents[2])


def matmul(a, b) -> Tensor:
    """a @ b for a: (..., m, k), b: (..., k, n) -> (..., m, n); leading batch axes broadcast."""
    return apply(MatMul(), *operands(a, b))


def linear(x, weight, bias=None) -> Tensor:
    """x @ weight + bias for x (..., in), weight (in, out), bias (out,) or None -> (..., out)."""
    if bias is None:
        return matmul(x, weight)
    x, weight = operands(x, weight)
    return apply(Linear(), x, weight, as_tensor(bias, like=weight))

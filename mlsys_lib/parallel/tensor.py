"""Tensor parallelism (Megatron-LM, Shoeybi et al. 2019) on autodiff Tensors over ``mlsys_lib.comm``.

Each of the t ranks of a tensor-parallel group holds a slice of every weight. Two conjugate operators
mark where the ranks' partial results meet:

* ``f``: identity in the forward pass, **all-reduce** of the gradient in the backward pass (the input
  of a column-parallel layer is used by every rank, so its gradient is the sum of theirs);
* ``g``: **all-reduce** in the forward pass (the row-parallel layer's partial products add up to the
  output), identity in the backward pass.

A Megatron MLP ``GeLU(x A) B`` splits A by columns and B by rows: ``Y_r = GeLU(f(x) A_r)`` needs no
communication (GeLU is elementwise), and ``g(Σ_r Y_r B_r)`` gives the output. Self-attention splits
the heads the same way (Q, K, V by columns, the output projection by rows). So a transformer block
(attention + MLP) does 2 all-reduces forward and 2 backward, counted in ``TensorParallel.all_reduces``.

Weights are given whole (W: (in, out), as ``x W + b``) and each rank keeps its slice, so the results
can be compared with the single-device model; outputs and gradients equal it up to rounding.

The same two layers by hand on numpy arrays, forward and backward, given this rank's slices
(:func:`column_parallel_forward`, :func:`column_parallel_backward`, :func:`row_parallel_forward`,
:func:`row_parallel_backward`): each all-reduce is one ``group.all_reduce`` call.
"""

from __future__ import annotations

import math

import numpy as np

from mlsys_lib.autodiff import Tensor, apply, gelu, linear, matmul, softmax
from mlsys_lib.autodiff.nn import Module
from mlsys_lib.autodiff.tensor import Op
from mlsys_lib.comm import ProcessGroup


class TensorParallel:
    """A rank's tensor-parallel group: the operators ``f`` and ``g`` and the all-reduces they made.

    ``all_reduces``: {"forward": count, "backward": count} since construction or :meth:`reset_count`.
    """

    def __init__(self, group: ProcessGroup) -> None:
        self.group = group
        self.all_reduces = {"forward": 0, "backward": 0}

    @property
    def rank(self) -> int:
        return self.group.rank

    @property
    def size(self) -> int:
        """t, the number of ranks a weight is split over."""
        return self.group.world_size

    def reset_count(self) -> None:
        self.all_reduces = {"forward": 0, "backward": 0}

    def all_reduce(self, x: np.ndarray, phase: str) -> np.ndarray:
        """Sum of ``x`` over the ranks, counted under ``phase`` ("forward" or "backward")."""
        self.all_reduces[phase] += 1
        return self.group.all_reduce(x, op="sum")

    def shard(self, n: int, what: str) -> slice:
        """This rank's contiguous share of n items (n must be divisible by t)."""
        if n % self.size:
            raise ValueError(f"{what} = {n} must be divisible by the tensor-parallel size t = {self.size}")
        share = n // self.size
        return slice(self.rank * share, (self.rank + 1) * share)

    def f(self, x: Tensor) -> Tensor:
        """Identity forward, all-reduce of the gradient backward (the entry of a parallel region)."""
        return apply(_Enter(self), x)

    def g(self, x: Tensor) -> Tensor:
        """All-reduce forward, identity backward (the exit of a parallel region)."""
        return apply(_Exit(self), x)


class _Enter(Op):
    name = "f"

    def __init__(self, tp: TensorParallel) -> None:
        self.tp = tp

    def forward(self, x: np.ndarray) -> np.ndarray:
        return x

    def shape(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        return shape

    def vjp(self, g: Tensor, out: Tensor, x: Tensor) -> tuple[Tensor]:
        return (Tensor(self.tp.all_reduce(g.numpy(), "backward")),)


class _Exit(_Enter):
    name = "g"

    def forward(self, x: np.ndarray) -> np.ndarray:
        return self.tp.all_reduce(x, "forward")

    def vjp(self, g: Tensor, out: Tensor, x: Tensor) -> tuple[Tensor]:
        return (g,)


def column_parallel_forward(group: ProcessGroup, x: np.ndarray, A_r: np.ndarray, b_r: np.ndarray) -> np.ndarray:
    """This rank's columns ``Y_r = x A_r + b_r`` of ``Y = x A + b``: x (n, in) whole, A_r (in, out/t), b_r (out/t,).

    No communication (``f`` is the identity forward)."""
    return x @ A_r + b_r


def column_parallel_backward(group: ProcessGroup, x: np.ndarray, A_r: np.ndarray,
                             dY_r: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(dx, dA_r, db_r)`` from this rank's columns dY_r (n, out/t): dx = Σ_r dY_r A_rᵀ is whole on every
    rank (one all-reduce, ``f``'s backward); dA_r = xᵀ dY_r and db_r need none."""
    return group.all_reduce(dY_r @ A_r.T), x.T @ dY_r, dY_r.sum(axis=0)


def row_parallel_forward(group: ProcessGroup, X_r: np.ndarray, B_r: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``Y = Σ_r X_r B_r + b``, whole on every rank: X_r (n, in/t) this rank's input columns, B_r (in/t, out)
    its rows, b (out,) added once. One all-reduce (``g``)."""
    return group.all_reduce(X_r @ B_r) + b


def row_parallel_backward(group: ProcessGroup, X_r: np.ndarray, B_r: np.ndarray,
                          dY: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(dX_r, dB_r, db)`` from the whole dY (n, out), the same on every rank: no communication."""
    return dY @ B_r.T, X_r.T @ dY, dY.sum(axis=0)


def _parameter(array: np.ndarray | None) -> Tensor | None:
    return None if array is None else Tensor(np.array(array, copy=True), requires_grad=True)


class ColumnParallelLinear(Module):
    """``Y_r = f(x) A_r + b_r``: rank r keeps columns r·out/t .. (r+1)·out/t of A (in, out) and of b.

    x (..., in), the same on every rank -> Y_r (..., out/t), this rank's columns of x A + b.
    """

    def __init__(self, weight: np.ndarray, bias: np.ndarray | None, tp: TensorParallel) -> None:
        columns = tp.shard(weight.shape[1], "out_features")
        self.tp = tp
        self.weight = _parameter(weight[:, columns])
        self.bias = _parameter(None if bias is None else bias[columns])

    def forward(self, x: Tensor) -> Tensor:
        return linear(self.tp.f(x), self.weight, self.bias)


class RowParallelLinear(Module):
    """``Y = g(X_r B_r) + b``: rank r keeps rows r·in/t .. (r+1)·in/t of B (in, out); b is added once.

    X_r (..., in/t), this rank's columns of the input -> Y (..., out), the same on every rank.
    """

    def __init__(self, weight: np.ndarray, bias: np.ndarray | None, tp: TensorParallel) -> None:
        rows = tp.shard(weight.shape[0], "in_features")
        self.tp = tp
        self.weight = _parameter(weight[rows])
        self.bias = _parameter(bias)

    def forward(self, x: Tensor) -> Tensor:
        y = self.tp.g(matmul(x, self.weight))
        return y if self.bias is None else y + self.bias


class MegatronMLP(Module):
    """``GeLU(x A + a) B + b`` with A (h, 4h) split by columns and B (4h, h) by rows: x (..., h) -> (..., h).

    One all-reduce forward (in B's ``g``) and one backward (in A's ``f``).
    """

    def __init__(self, A: np.ndarray, a: np.ndarray | None, B: np.ndarray, b: np.ndarray | None,
                 tp: TensorParallel) -> None:
        self.fc1 = ColumnParallelLinear(A, a, tp)
        self.fc2 = RowParallelLinear(B, b, tp)

    def forward(self, x: Tensor) -> Tensor:
        return self.fc2(gelu(self.fc1(x)))


class ParallelSelfAttention(Module):
    """Multi-head self-attention with the heads split over the ranks: x (batch, seq, h) -> (batch, seq, h).

    Wq, Wk, Wv (h, h): head j uses columns j·d .. (j+1)·d (d = h / num_heads); rank r computes heads
    r·H/t .. (r+1)·H/t (column-parallel Q, K, V after one ``f``), softmax(Q Kᵀ/√d) V per head, and its
    rows of Wo (h, h) (row-parallel, one ``g``). No mask, no biases.
    """

    def __init__(self, Wq: np.ndarray, Wk: np.ndarray, Wv: np.ndarray, Wo: np.ndarray, num_heads: int,
                 tp: TensorParallel) -> None:
        hidden = Wq.shape[0]
        if hidden % num_heads:
            raise ValueError(f"hidden size {hidden} must be divisible by num_heads = {num_heads}")
        if num_heads % tp.size:
            raise ValueError(f"num_heads = {num_heads} must be divisible by the tensor-parallel size t = {tp.size}")
        columns = tp.shard(hidden, "hidden size")
        self.tp, self.head_dim = tp, hidden // num_heads
        self.local_heads = num_heads // tp.size
        self.Wq, self.Wk, self.Wv = (_parameter(W[:, columns]) for W in (Wq, Wk, Wv))
        self.out = RowParallelLinear(Wo, None, tp)

    def _heads(self, x: Tensor, W: Tensor) -> Tensor:
        batch, seq, _ = x.shape
        return matmul(x, W).reshape(batch, seq, self.local_heads, self.head_dim).transpose((0, 2, 1, 3))

    def forward(self, x: Tensor) -> Tensor:
        batch, seq, _ = x.shape
        x = self.tp.f(x)
        q, k, v = (self._heads(x, W) for W in (self.Wq, self.Wk, self.Wv))
        scores = softmax(matmul(q, k.transpose((0, 1, 3, 2))) / math.sqrt(self.head_dim), axis=-1)
        heads = matmul(scores, v).transpose((0, 2, 1, 3)).reshape(batch, seq, self.local_heads * self.head_dim)
        return self.out(heads)


class ParallelBlock(Module):
    """A transformer block without layer norms: ``h = x + attention(x)``, output ``h + mlp(h)``."""

    def __init__(self, attention: ParallelSelfAttention, mlp: MegatronMLP) -> None:
        self.attention, self.mlp = attention, mlp

    def forward(self, x: Tensor) -> Tensor:
        h = x + self.attention(x)
        return h + self.mlp(h)

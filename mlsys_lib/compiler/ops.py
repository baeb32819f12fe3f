"""Compute definitions of the operators the lecture compiles (TVM's ``topi``, in a few lines each).

Each takes placeholder (or computed) tensors and returns the output tensor; shapes are checked.
"""

from __future__ import annotations

from . import expr as te
from .expr import Tensor


def _shape_error(what: str, detail: str) -> ValueError:
    return ValueError(f"{what}: {detail}")


def matmul(A: Tensor, B: Tensor, name: str = "C") -> Tensor:
    """``C[i, j] = sum_k A[i, k] B[k, j]``: A (n, k), B (k, m) -> C (n, m)."""
    if A.ndim != 2 or B.ndim != 2 or A.shape[1] != B.shape[0]:
        raise _shape_error("matmul", f"expected A (n, k) and B (k, m), got {A.shape} and {B.shape}")
    k = te.reduce_axis(A.shape[1], "k")
    return te.compute((A.shape[0], B.shape[1]), lambda i, j: te.sum(A[i, k] * B[k, j], k), name)


def batch_matmul(A: Tensor, B: Tensor, name: str = "C") -> Tensor:
    """``C[b, i, j] = sum_k A[b, i, k] B[b, k, j]``: A (batch, n, k), B (batch, k, m) -> (batch, n, m)."""
    if A.ndim != 3 or B.ndim != 3 or A.shape[0] != B.shape[0] or A.shape[2] != B.shape[1]:
        raise _shape_error("batch_matmul", f"expected A (b, n, k) and B (b, k, m), got {A.shape} and {B.shape}")
    k = te.reduce_axis(A.shape[2], "k")
    return te.compute((A.shape[0], A.shape[1], B.shape[2]),
                      lambda b, i, j: te.sum(A[b, i, k] * B[b, k, j], k), name)


def conv2d(data: Tensor, weight: Tensor, stride: int = 1, name: str = "out") -> Tensor:
    """Valid 2-D convolution, NCHW: data (n, c, h, w), weight (f, c, kh, kw) -> (n, f, oh, ow) with
    ``oh = (h - kh) // stride + 1``. Pad the input beforehand for "same" outputs (a 3×3 kernel on
    a 56×56 image padded to 58×58 gives 56×56)."""
    if data.ndim != 4 or weight.ndim != 4 or data.shape[1] != weight.shape[1]:
        raise _shape_error("conv2d", f"expected data (n, c, h, w) and weight (f, c, kh, kw), got {data.shape} "
                                     f"and {weight.shape}")
    if isinstance(stride, bool) or not isinstance(stride, int) or stride < 1:
        raise _shape_error("conv2d", f"stride must be a positive int, got {stride!r}")
    n, c, h, w = data.shape
    f, _, kh, kw = weight.shape
    if kh > h or kw > w:
        raise _shape_error("conv2d", f"kernel {kh}×{kw} is larger than the image {h}×{w}")
    rc, ry, rx = te.reduce_axis(c, "rc"), te.reduce_axis(kh, "ry"), te.reduce_axis(kw, "rx")
    shape = (n, f, (h - kh) // stride + 1, (w - kw) // stride + 1)
    return te.compute(shape, lambda b, o, y, x: te.sum(
        data[b, rc, y * stride + ry, x * stride + rx] * weight[o, rc, ry, rx], (rc, ry, rx)), name)


def bias_relu(X: Tensor, bias: Tensor, name: str = "Y") -> Tensor:
    """An elementwise chain: ``Y[i, j] = max(X[i, j] + bias[j], 0)``; X (n, m), bias (m,)."""
    if X.ndim != 2 or bias.shape != (X.shape[1],):
        raise _shape_error("bias_relu", f"expected X (n, m) and bias (m,), got {X.shape} and {bias.shape}")
    shifted = te.compute(X.shape, lambda i, j: X[i, j] + bias[j], f"{name}_add")
    return te.compute(X.shape, lambda i, j: te.maximum(shifted[i, j], 0.0), name)


def softmax(X: Tensor, name: str = "P") -> Tensor:
    """Row softmax of X (n, m) in four stages: row max, ``exp(x - max)``, row sum, division."""
    if X.ndim != 2:
        raise _shape_error("softmax", f"expected X (n, m), got {X.shape}")
    n, m = X.shape
    j1, j2 = te.reduce_axis(m, "j"), te.reduce_axis(m, "j")
    row_max = te.compute((n,), lambda i: te.max(X[i, j1], j1), f"{name}_max")
    e = te.compute((n, m), lambda i, j: te.exp(X[i, j] - row_max[i]), f"{name}_exp")
    row_sum = te.compute((n,), lambda i: te.sum(e[i, j2], j2), f"{name}_sum")
    return te.compute((n, m), lambda i, j: e[i, j] / row_sum[i], name)

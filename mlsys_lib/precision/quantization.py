"""Linear quantization: r ≈ S (q - Z), with q an n-bit integer, per tensor, per channel or per group.

The lecture's affine scheme maps [r_min, r_max] onto the integer range [q_min, q_max]::

    S = (r_max - r_min) / (q_max - q_min)        Z = round(q_min - r_min / S)
    q = clip(round(r / S) + Z, q_min, q_max)     r̂ = S (q - Z)

with q_min, q_max = -2^(n-1), 2^(n-1) - 1 (signed, two's complement) or 0, 2^n - 1 (unsigned).
The range is widened to include 0 so that 0 is exact (padding, ReLU zeros). The symmetric scheme uses
Z = 0 and S = max|r| / q_max (signed: levels -q_max..q_max, symmetric about 0; unsigned: for r >= 0).
For r inside the range the error is at most S / 2.

Granularity (one (S, Z) pair per slice):

* per tensor: ``axis=None`` (one pair);
* per channel: ``axis=k``: one pair per index along axis k (statistics over all other axes);
* per group: ``axis=k, group_size=g``: one pair per run of g consecutive elements along axis k
  (and per position along the other axes), e.g. groups of 128 input features of a weight matrix.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .integers import check_bits, integer_range, to_integers
from .kmeans import KMeansQuantized
from .rounding import as_float_array


def linear_quant_params(r_min, r_max, bits: int = 8, signed: bool = True,
                        symmetric: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Scale S (float64) and zero point Z (int32) for real ranges [r_min, r_max] (arrays broadcast).

    Affine: S = (r_max - r_min) / (q_max - q_min), Z = round(q_min - r_min / S), after widening the
    range to include 0. Symmetric: S = max(|r_min|, |r_max|) / q_max, Z = 0. An all-zero range gets S = 1.
    """
    q_min, q_max = integer_range(bits, signed)
    r_min, r_max = np.asarray(r_min, np.float64), np.asarray(r_max, np.float64)
    if np.any(r_min > r_max):
        raise ValueError("linear_quant_params: r_min must be <= r_max")
    if symmetric:
        scale = np.maximum(np.abs(r_min), np.abs(r_max)) / q_max
    else:
        r_min, r_max = np.minimum(r_min, 0.0), np.maximum(r_max, 0.0)
        scale = (r_max - r_min) / (q_max - q_min)
    scale = np.where(scale > 0, scale, 1.0)
    zero_point = np.zeros_like(scale) if symmetric else np.round(q_min - r_min / scale)
    return scale, zero_point.astype(np.int32)  # in [q_min, q_max] because the range holds 0


@dataclass(frozen=True)
class QuantizedTensor:
    """Integers ``q`` (shape of the original tensor; int8/uint8 up to 8 bits, else int16/uint16) with
    ``scale`` S and ``zero_point`` Z shaped to broadcast against ``q.reshape(grouped_shape)``."""

    q: np.ndarray
    scale: np.ndarray
    zero_point: np.ndarray
    bits: int
    signed: bool
    grouped_shape: tuple[int, ...]

    def dequantize(self) -> np.ndarray:
        """r̂ = S (q - Z) as float64, in q's shape."""
        grouped = self.q.reshape(self.grouped_shape).astype(np.float64)
        return (self.scale * (grouped - self.zero_point)).reshape(self.q.shape)


def _grouped(r: np.ndarray, axis: int | None, group_size: int | None) -> tuple[np.ndarray, tuple[int, ...]]:
    """r reshaped so that each (S, Z) slice is what the returned axes reduce over."""
    if axis is None:
        if group_size is not None:
            raise ValueError("quantize: group_size needs an axis to group along")
        return r, tuple(range(r.ndim))
    if not isinstance(axis, (int, np.integer)) or not -r.ndim <= axis < r.ndim:
        raise ValueError(f"quantize: axis {axis} is out of range for a tensor of shape {r.shape}")
    axis %= r.ndim
    if group_size is None:
        return r, tuple(a for a in range(r.ndim) if a != axis)
    if not isinstance(group_size, (int, np.integer)) or group_size < 1 or r.shape[axis] % group_size:
        raise ValueError(f"quantize: group_size must be >= 1 and divide the length {r.shape[axis]} of axis {axis}, "
                         f"got {group_size}")
    shape = r.shape[:axis] + (r.shape[axis] // group_size, group_size) + r.shape[axis + 1:]
    return r.reshape(shape), (axis + 1,)


def quantize(r, bits: int = 8, signed: bool = True, symmetric: bool = False,
             axis: int | None = None, group_size: int | None = None) -> QuantizedTensor:
    """Linear quantization of the real tensor r (any shape) to n-bit integers; see the module docstring
    for the scheme (affine or symmetric) and the granularity (axis, group_size)."""
    check_bits(bits, "quantize")
    r = as_float_array(r, "quantize")
    if r.size == 0 or not np.all(np.isfinite(r)):
        raise ValueError("quantize: r must be a non-empty tensor of finite values")
    grouped, reduce_axes = _grouped(r, axis, group_size)
    scale, zero_point = linear_quant_params(grouped.min(axis=reduce_axes, keepdims=True),
                                            grouped.max(axis=reduce_axes, keepdims=True), bits, signed, symmetric)
    q = to_integers(grouped / scale, zero_point, bits, signed)
    return QuantizedTensor(q.reshape(r.shape), scale, zero_point, bits, signed, grouped.shape)


def dequantize(qt: QuantizedTensor | KMeansQuantized) -> np.ndarray:
    """The reals a quantized tensor stands for (float64): S (q - Z) for linear quantization,
    codebook[indices] for k-means quantization."""
    if not isinstance(qt, (QuantizedTensor, KMeansQuantized)):
        raise TypeError(f"dequantize: expected a QuantizedTensor or KMeansQuantized, got {type(qt).__name__}")
    return qt.dequantize()

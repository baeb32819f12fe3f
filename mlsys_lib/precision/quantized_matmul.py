"""Integer matrix multiply of linearly quantized matrices, with int32 accumulation and requantization.

For Y = A B with A ≈ S_A (q_A - Z_A) and B ≈ S_B (q_B - Z_B)::

    Y ≈ S_A S_B Σ_k (q_A - Z_A)(q_B - Z_B)
      = S_A S_B ( q_A q_B  -  Z_B Σ_k q_A  -  Z_A Σ_k q_B  +  K Z_A Z_B )

q_A q_B is the integer GEMM (int32 accumulators); for static weights Z_A Σ_k q_B and K Z_A Z_B are
precomputed, and Z_B = 0 (symmetric weights) removes Z_B Σ_k q_A. The output is requantized:

    q_Y = clip(round(M · acc) + Z_Y, q_min, q_max),   M = S_A S_B / S_Y

(hardware computes M as a fixed-point multiplier and a shift; here M is a float64).
S_A may be per tensor or per row of A, S_B per tensor or per column of B (per output channel):
scales along the summed axis K would not factor out of the sum.
"""

from __future__ import annotations

import numpy as np

from .integers import check_bits, integer_range, to_integers
from .quantization import QuantizedTensor

INT32_MAX = np.iinfo(np.int32).max


def _check_operand(x: QuantizedTensor, name: str, param_axis: int) -> None:
    if not isinstance(x, QuantizedTensor):
        raise TypeError(f"quantized_matmul: {name} must be a QuantizedTensor, got {type(x).__name__}")
    if x.q.ndim != 2 or x.grouped_shape != x.q.shape:
        raise ValueError(f"quantized_matmul: {name} must be a 2-D matrix quantized per tensor or per channel, "
                         f"got shape {x.q.shape} with grouped shape {x.grouped_shape}")
    if x.scale.shape[1 - param_axis] != 1:
        raise ValueError(f"quantized_matmul: {name}'s scales must not vary along the summed axis; quantize {name} "
                         f"per tensor or with axis={param_axis}")


def int32_accumulate(a: QuantizedTensor, b: QuantizedTensor) -> np.ndarray:
    """acc = Σ_k (q_A - Z_A)(q_B - Z_B) for A (M, K) and B (K, N), computed with int32 arithmetic
    throughout; (M, N) int32. ValueError if an accumulator could overflow int32."""
    _check_operand(a, "a", 0)
    _check_operand(b, "b", 1)
    k = a.q.shape[1]
    if b.q.shape[0] != k:
        raise ValueError(f"quantized_matmul: inner dimensions differ: a is {a.q.shape}, b is {b.q.shape}")
    qa, qb = a.q.astype(np.int32), b.q.astype(np.int32)
    za, zb = a.zero_point, b.zero_point  # int32, (M, 1) or (1, 1) and (1, N) or (1, 1)
    worst = k * int(np.abs(qa - za).max(initial=0)) * int(np.abs(qb - zb).max(initial=0))
    if worst > INT32_MAX:
        raise ValueError(f"quantized_matmul: accumulators could reach {worst} and overflow int32; "
                         f"use fewer bits or a smaller K (= {k})")
    # Each term may wrap around int32, but the sum fits (checked above), so two's-complement
    # arithmetic makes it exact, as on integer hardware.
    return qa @ qb - zb * qa.sum(axis=1, keepdims=True, dtype=np.int32) \
        - za * qb.sum(axis=0, keepdims=True, dtype=np.int32) + np.int32(k) * za * zb


def quantized_matmul(a: QuantizedTensor, b: QuantizedTensor, out_scale: float, out_zero_point: int,
                     bits: int = 8, signed: bool = True) -> QuantizedTensor:
    """Y = A B on quantized A (M, K) and B (K, N): int32 accumulation (:func:`int32_accumulate`), then
    requantization to the output's scale and zero point as an n-bit integer matrix (M, N)."""
    check_bits(bits, "quantized_matmul")
    if not out_scale > 0:
        raise ValueError(f"quantized_matmul: out_scale must be > 0, got {out_scale}")
    q_min, q_max = integer_range(bits, signed)
    if not q_min <= out_zero_point <= q_max:
        raise ValueError(f"quantized_matmul: out_zero_point must lie in [{q_min}, {q_max}], got {out_zero_point}")
    acc = int32_accumulate(a, b)
    multiplier = a.scale * b.scale / out_scale
    q = to_integers(multiplier * acc, out_zero_point, bits, signed)
    scale, zero_point = np.full((1, 1), float(out_scale)), np.full((1, 1), out_zero_point, np.int32)
    return QuantizedTensor(q, scale, zero_point, bits, signed, q.shape)

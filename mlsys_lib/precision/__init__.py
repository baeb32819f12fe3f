"""Numerical precision: floating-point formats, mixed-precision training, loss scaling, quantization.

* ``formats``: :class:`FloatFormat` (sign/exponent/mantissa widths, bias; max, min_normal,
  min_subnormal, eps) and FP32, FP16, BF16, FP8_E4M3, FP8_E5M2 (OCP); ``get_format(name)``.
* ``rounding``: ``round_to(x, fmt, saturate=False)``, round-to-nearest-even by integer bit manipulation.
* ``bits``: ``encode``/``decode`` (bit strings), ``to_bits``/``from_bits`` (integer codes), ``classify``.
* ``loss_scaling``: :class:`StaticLossScaler`, :class:`DynamicLossScaler`.
* ``mixed_precision``: ``cast`` (a differentiable rounding op), ``train_mixed_precision`` (modes
  "fp32", "fp16", "fp16_scaled"), ``spiral_data``.
* ``integers``: n-bit integer ranges (``integer_range``); ``quantization``: linear (affine/symmetric)
  quantization per tensor, channel or group: ``linear_quant_params``, ``quantize``, ``dequantize``;
  ``quantized_matmul``: integer GEMM with int32 accumulation and requantization; ``kmeans``: codebook
  quantization and centroid fine-tuning; ``metrics``: ``mse``, ``max_abs_error``, ``sqnr_db``.
"""

from .bits import classify, decode, encode, from_bits, to_bits
from .formats import BF16, FORMATS, FP8_E4M3, FP8_E5M2, FP16, FP32, FloatFormat, get_format
from .integers import integer_range
from .kmeans import KMeansQuantized, centroid_gradients, finetune_centroids, kmeans_quantize
from .loss_scaling import DynamicLossScaler, StaticLossScaler
from .metrics import max_abs_error, mse, sqnr_db
from .mixed_precision import MODES, TrainingCurve, cast, spiral_data, train_mixed_precision
from .quantization import QuantizedTensor, dequantize, linear_quant_params, quantize
from .quantized_matmul import int32_accumulate, quantized_matmul
from .rounding import round_to

__all__ = [
    "FloatFormat", "FP32", "FP16", "BF16", "FP8_E4M3", "FP8_E5M2", "FORMATS", "get_format",
    "round_to", "encode", "decode", "to_bits", "from_bits", "classify",
    "StaticLossScaler", "DynamicLossScaler", "cast", "train_mixed_precision", "TrainingCurve", "MODES", "spiral_data",
    "integer_range", "linear_quant_params", "quantize", "dequantize", "QuantizedTensor",
    "int32_accumulate", "quantized_matmul",
    "kmeans_quantize", "KMeansQuantized", "centroid_gradients", "finetune_centroids",
    "mse", "max_abs_error", "sqnr_db",
]

"""K-means quantization (Deep Compression): weights -> n-bit cluster indices + a codebook of 2^n centroids.

* **Clustering**: Lloyd's algorithm in one dimension, from a deterministic *linear* initialization
  (2^n centroids evenly spaced over [min w, max w], which Deep Compression found to keep the rare
  large weights best): assign each weight to its nearest centroid, move each centroid to the mean of
  its weights; stop when no assignment changes. A centroid left without weights is moved onto the
  weight farthest from its centroid, so that all 2^n codes stay in use.
* **Storage**: the indices take n bits per weight; the codebook 2^n floats per tensor.
* **Fine-tuning**: the gradient with respect to a shared centroid is the sum of the gradients of the
  weights that use it (group the weight gradients by cluster index and reduce), so the codebook is
  trained by ``centroid -= lr · Σ_{w in cluster} ∂L/∂w`` while the indices stay fixed.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .integers import check_bits
from .rounding import as_float_array


@dataclass(frozen=True)
class KMeansQuantized:
    """``indices`` (the weights' shape, uint8 or uint16) into ``codebook`` (2^bits,) float64 centroids."""

    indices: np.ndarray
    codebook: np.ndarray
    bits: int

    def dequantize(self) -> np.ndarray:
        """The weights each index stands for: codebook[indices] (float64, the weights' shape)."""
        return self.codebook[self.indices]


def _nearest(w: np.ndarray, codebook: np.ndarray) -> np.ndarray:
    """Index of the nearest centroid for each weight (1-D); codebook sorted ascending. Ties go to the
    lower centroid."""
    midpoints = (codebook[1:] + codebook[:-1]) / 2
    return np.searchsorted(midpoints, w, side="left")


def kmeans_quantize(w, bits: int = 2, max_iterations: int = 50) -> KMeansQuantized:
    """Cluster the weights w (any shape, finite reals) into 2^bits centroids by Lloyd's algorithm
    (at most ``max_iterations`` rounds) from the linear initialization."""
    check_bits(bits, "kmeans_quantize")
    w = as_float_array(w, "kmeans_quantize")
    if w.size == 0 or not np.all(np.isfinite(w)):
        raise ValueError("kmeans_quantize: w must be a non-empty tensor of finite values")
    if max_iterations < 1:
        raise ValueError(f"kmeans_quantize: max_iterations must be >= 1, got {max_iterations}")
    flat = w.reshape(-1).astype(np.float64)
    k = 1 << bits
    codebook = np.linspace(flat.min(), flat.max(), k)
    indices = _nearest(flat, codebook)
    for _ in range(max_iterations):
        counts = np.bincount(indices, minlength=k)
        codebook = np.where(counts > 0, np.bincount(indices, weights=flat, minlength=k) / np.maximum(counts, 1),
                            codebook)
        empty = np.flatnonzero(counts == 0)
        if empty.size:  # re-seed unused centroids at the weights served worst
            worst = np.argsort(-np.abs(flat - codebook[indices]), kind="stable")[:empty.size]
            codebook[empty] = flat[worst]
        codebook.sort()
        new_indices = _nearest(flat, codebook)
        if np.array_equal(new_indices, indices):
            break
        indices = new_indices
    return KMeansQuantized(indices.astype(np.uint8 if bits <= 8 else np.uint16).reshape(w.shape), codebook, bits)


def centroid_gradients(quantized: KMeansQuantized, weight_grad) -> np.ndarray:
    """∂L/∂codebook (2^bits,): the weight gradients (the weights' shape) summed per cluster index."""
    weight_grad = as_float_array(weight_grad, "centroid_gradients")
    if weight_grad.shape != quantized.indices.shape:
        raise ValueError(f"centroid_gradients: weight_grad must have the weights' shape {quantized.indices.shape}, "
                         f"got {weight_grad.shape}")
    return np.bincount(quantized.indices.reshape(-1), weights=weight_grad.reshape(-1),
                       minlength=quantized.codebook.size)


def finetune_centroids(quantized: KMeansQuantized, weight_grad, lr: float) -> KMeansQuantized:
    """One SGD step on the codebook: centroid -= lr · (sum of its weights' gradients); indices unchanged."""
    if not lr > 0:
        raise ValueError(f"finetune_centroids: lr must be > 0, got {lr}")
    codebook = quantized.codebook - lr * centroid_gradients(quantized, weight_grad)
    return KMeansQuantized(quantized.indices, codebook, quantized.bits)

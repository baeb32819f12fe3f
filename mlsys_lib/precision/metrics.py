"""Quantization error metrics between a tensor r and its approximation r̂ (same shape)."""

from __future__ import annotations

import numpy as np

from .rounding import as_float_array


def _pair(r, r_hat, who: str) -> tuple[np.ndarray, np.ndarray]:
    r, r_hat = as_float_array(r, who).astype(np.float64), as_float_array(r_hat, who).astype(np.float64)
    if r.shape != r_hat.shape:
        raise ValueError(f"{who}: r and r_hat must have the same shape, got {r.shape} and {r_hat.shape}")
    if r.size == 0:
        raise ValueError(f"{who}: r and r_hat are empty")
    return r, r_hat


def mse(r, r_hat) -> float:
    """Mean squared error: mean((r - r̂)²), in the units of r squared."""
    r, r_hat = _pair(r, r_hat, "mse")
    return float(np.mean((r - r_hat) ** 2))


def max_abs_error(r, r_hat) -> float:
    """Largest absolute error: max |r - r̂|, in the units of r."""
    r, r_hat = _pair(r, r_hat, "max_abs_error")
    return float(np.max(np.abs(r - r_hat)))


def sqnr_db(r, r_hat) -> float:
    """Signal-to-quantization-noise ratio in dB: 10 log10(Σ r² / Σ (r - r̂)²); inf when r̂ = r.
    Each extra bit of a uniform quantizer adds about 6.02 dB."""
    r, r_hat = _pair(r, r_hat, "sqnr_db")
    noise = np.sum((r - r_hat) ** 2)
    return float("inf") if noise == 0 else float(10 * np.log10(np.sum(r ** 2) / noise))

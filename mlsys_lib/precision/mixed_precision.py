"""Mixed-precision training of an MLP, with FP16 emulated on the CPU by rounding (``round_to``).

Three recipes (``mode``), as in Micikevicius et al., "Mixed Precision Training" (2018):

* ``"fp32"``: everything in FP32.
* ``"fp16"``: pure FP16: weights, activations and gradients are FP16 values and the weights are
  stored in FP16, w ← fp16(w - Δ): an update Δ smaller than half the FP16 spacing at w (between
  |w|·2^-12 and |w|·2^-11) is rounded away. No loss scaling: gradients of at most 2^-25 (half the
  smallest FP16 subnormal, ≈ 3e-8) flush to 0.
  (The optimizer's own arithmetic stays FP32, so what fails is the weight update alone.)
* ``"fp16_scaled"``: FP32 **master weights** (updated in FP32, so small updates accumulate), an FP16
  copy for compute, and **loss scaling** (dynamic by default) so that small gradients survive FP16.

FP16 compute is emulated where its results are stored: matrix products take FP16 inputs and accumulate
in FP32 (as Tensor Cores do), their outputs (activations) are rounded to FP16, and so are the
gradients flowing backward (``cast``'s VJP rounds them too). The loss (softmax cross-entropy, a
reduction) is computed in FP32.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mlsys_lib.autodiff import Op, Tensor, apply, cross_entropy, linear, nn, optim
from mlsys_lib.autodiff.tensor import as_tensor

from .formats import FP16, FP32, FloatFormat, get_format
from .loss_scaling import DynamicLossScaler, StaticLossScaler
from .rounding import round_to

MODES = ("fp32", "fp16", "fp16_scaled")


class RoundTo(Op):
    """Store in a lower-precision format: forward rounds x into ``fmt``; the gradient is rounded too
    (straight through otherwise: d round(x)/dx is taken as 1)."""

    name = "round_to"

    def __init__(self, fmt: FloatFormat):
        self.fmt = fmt

    def forward(self, x):
        return round_to(x, self.fmt)

    def shape(self, shape):
        return shape

    def vjp(self, g, out, x):
        return (cast(g, self.fmt),)

    def jvp(self, tangents, out, x):
        return cast(tangents[0], self.fmt)


def cast(x, fmt: str | FloatFormat) -> Tensor:
    """x (a Tensor or array, any shape) rounded to the values of fmt, as a differentiable op."""
    return apply(RoundTo(get_format(fmt)), as_tensor(x))


def forward_in_format(model: nn.Sequential, x, fmt: str | FloatFormat) -> Tensor:
    """Run model's layers with weights, biases and each Linear output rounded to fmt (FP32 accumulation
    inside the products): x (N, in) -> (N, out)."""
    h = cast(x, fmt)
    for layer in model.layers:
        if isinstance(layer, nn.Linear):
            bias = None if layer.bias is None else cast(layer.bias, fmt)
            h = cast(linear(h, cast(layer.weight, fmt), bias), fmt)
        else:
            h = layer(h)
    return h


def spiral_data(n_per_class: int = 30, n_classes: int = 3, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """The classic interleaved spirals: x (n_per_class · n_classes, 2) float32 in [-1, 1], labels (N,) int64."""
    rng = np.random.default_rng(seed)
    radius = np.tile(np.linspace(0.0, 1.0, n_per_class), n_classes)
    labels = np.repeat(np.arange(n_classes), n_per_class)
    angle = labels * (2 * np.pi / n_classes) + radius * 4 + rng.normal(0, 0.2, radius.size)
    x = np.stack([radius * np.sin(angle), radius * np.cos(angle)], axis=1)
    return x.astype(np.float32), labels


@dataclass(frozen=True)
class TrainingCurve:
    """losses (steps,): FP32 loss before each step; scales (steps,): loss scale used (1 without
    scaling); skipped_steps: steps skipped because the scaled gradients overflowed."""

    mode: str
    losses: np.ndarray
    scales: np.ndarray
    skipped_steps: int


def train_mixed_precision(mode: str, x: np.ndarray | None = None, labels: np.ndarray | None = None, *,
                          sizes: tuple[int, ...] = (2, 128, 128, 3), steps: int = 200, lr: float = 1.5e-5,
                          scaler: StaticLossScaler | None = None, seed: int = 0) -> TrainingCurve:
    """Train ``nn.MLP(sizes, rng=seed)`` on (x (N, in), labels (N,)) with full-batch Adam for ``steps``
    steps in ``mode`` ("fp32", "fp16" or "fp16_scaled"; see the module docstring); return its loss curve.

    Defaults: :func:`spiral_data` (seeded) and for "fp16_scaled" a ``DynamicLossScaler`` (S = 2^16,
    growth every 100 good steps). Deterministic for a given seed; the defaults take well under a second a mode.

    The defaults show pure FP16 failing: Adam moves each weight by about lr per step, and FP16 rounds
    that away wherever |w| > lr·2^12 ≈ 0.06, which is most of the hidden weights (median |w| ≈ 0.08).
    FP32 goes from 1.21 to 0.96, pure FP16 only to 1.14, FP16 with master weights and scaling as FP32.
    Here the master weights do the rescuing (these gradients stay above FP16's subnormals and the
    scale never overflows); loss scaling is what saves gradients below 2^-24 (see ``cast``).
    """
    if mode not in MODES:
        raise ValueError(f"train_mixed_precision: mode must be one of {MODES}, got {mode!r}")
    if scaler is not None and mode != "fp16_scaled":
        raise ValueError(f"train_mixed_precision: a loss scaler is used only in mode 'fp16_scaled', not {mode!r}")
    if steps < 1:
        raise ValueError(f"train_mixed_precision: steps must be >= 1, got {steps}")
    if (x is None) != (labels is None):
        raise ValueError("train_mixed_precision: give both x and labels, or neither (spiral data)")
    if x is None:
        x, labels = spiral_data(seed=seed)
    if mode == "fp16_scaled" and scaler is None:
        scaler = DynamicLossScaler(init_scale=2.0 ** 16, growth_interval=100)
    fmt = FP32 if mode == "fp32" else FP16
    model = nn.MLP(sizes, rng=seed)
    params = model.parameters()
    opt = optim.Adam(params, lr)
    losses, scales = np.empty(steps), np.ones(steps)
    for step in range(steps):
        if mode == "fp16":  # no master copy: the weights themselves are stored in FP16, w ← fp16(w - Δ)
            for p in params:
                p.data[...] = round_to(p.data, FP16)
        opt.zero_grad()
        loss = cross_entropy(forward_in_format(model, x, fmt), labels)
        losses[step] = loss.item()
        if scaler is None:
            loss.backward()
            apply_step = True
        else:
            scales[step] = scaler.scale
            with np.errstate(over="ignore", invalid="ignore"):  # overflow is expected: the scaler detects it
                scaler.scale_loss(loss).backward()
            apply_step = scaler.update(scaler.unscale([p.grad.numpy() for p in params]))
        if apply_step:
            opt.step()
    return TrainingCurve(mode, losses, scales, 0 if scaler is None else scaler.skipped_steps)

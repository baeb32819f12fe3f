"""Loss scaling: multiply the loss by S before backward so that small FP16 gradients do not underflow,
then divide the gradients by S (in FP32) before the update.

Per step: ``loss_scaled = scaler.scale_loss(loss)``; backward; ``ok = scaler.unscale(grads)``
(divides in place, reports whether every gradient is finite); ``scaler.update(ok)``; step only if ok.
A step with inf/NaN gradients (an overflow of the scaled values) is skipped by both scalers:
applying it would corrupt the FP32 master weights.

* :class:`StaticLossScaler`: a fixed S.
* :class:`DynamicLossScaler`: overflow -> skip the step and S *= backoff_factor (0.5);
  ``growth_interval`` overflow-free steps in a row -> S *= growth_factor (2): S settles just below the
  largest value that does not overflow.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from mlsys_lib.autodiff import Tensor


class StaticLossScaler:
    """Loss scaling with a constant scale S (> 0). skipped_steps: steps skipped for overflow so far."""

    def __init__(self, scale: float = 2.0 ** 10):
        if not scale > 0:
            raise ValueError(f"{type(self).__name__}: scale must be > 0, got {scale}")
        self.scale = float(scale)
        self.skipped_steps = 0

    def scale_loss(self, loss: Tensor) -> Tensor:
        """loss · S (a Tensor, differentiable)."""
        return loss * self.scale

    def unscale(self, grads: Sequence[np.ndarray]) -> bool:
        """Divide each gradient array by S in place; True if all of them are finite (no overflow)."""
        finite = True
        for g in grads:
            finite &= bool(np.all(np.isfinite(g)))
            g /= self.scale
        return finite

    def update(self, finite: bool) -> bool:
        """Record whether this step's gradients were finite; returns whether to apply the step."""
        self.skipped_steps += not finite
        return finite


class DynamicLossScaler(StaticLossScaler):
    """Loss scaling that backs off on overflow and grows after ``growth_interval`` good steps.

    Attributes: scale (S), good_steps (overflow-free steps since the last change of S), skipped_steps.
    """

    def __init__(self, init_scale: float = 2.0 ** 16, growth_factor: float = 2.0, backoff_factor: float = 0.5,
                 growth_interval: int = 2000):
        super().__init__(init_scale)
        if not growth_factor > 1:
            raise ValueError(f"DynamicLossScaler: growth_factor must be > 1, got {growth_factor}")
        if not 0 < backoff_factor < 1:
            raise ValueError(f"DynamicLossScaler: backoff_factor must be in (0, 1), got {backoff_factor}")
        if growth_interval < 1:
            raise ValueError(f"DynamicLossScaler: growth_interval must be >= 1, got {growth_interval}")
        self.growth_factor, self.backoff_factor, self.growth_interval = growth_factor, backoff_factor, growth_interval
        self.good_steps = 0

    def update(self, finite: bool) -> bool:
        """Overflow: S *= backoff_factor, skip. Otherwise count a good step; after growth_interval of
        them in a row, S *= growth_factor. Returns whether to apply the step."""
        if not super().update(finite):
            self.scale *= self.backoff_factor
            self.good_steps = 0
            return False
        self.good_steps += 1
        if self.good_steps == self.growth_interval:
            self.scale *= self.growth_factor
            self.good_steps = 0
        return True

"""Optimizers that update parameters in place from their ``.grad``, and learning-rate decay schedules.

Usage: ``opt.zero_grad(); loss.backward(); opt.step()``. For parameter θ, gradient g = ∇L(θ), step t:

    SGD       θ ← θ - η g
    Momentum  v ← μ v + g;                 θ ← θ - η v
    RMSProp   s ← α s + (1 - α) g²;        θ ← θ - η g / (√s + ε)
    Adam      m ← β₁ m + (1 - β₁) g;  v ← β₂ v + (1 - β₂) g²;
              m̂ = m / (1 - β₁ᵗ);  v̂ = v / (1 - β₂ᵗ)   (bias correction: m, v start at 0);
              θ ← θ - η m̂ / (√v̂ + ε)
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from .tensor import Tensor


class Optimizer:
    """Holds the parameters (leaf Tensors with requires_grad) and the learning rate ``lr``."""

    def __init__(self, params: Iterable[Tensor], lr: float):
        self.params = list(params)
        for i, p in enumerate(self.params):
            if not isinstance(p, Tensor) or p.data is None or not p.requires_grad:
                raise TypeError(f"{type(self).__name__}: parameter {i} must be an eager Tensor with requires_grad=True, got {p!r}")
        if not lr > 0:
            raise ValueError(f"{type(self).__name__}: lr must be > 0, got {lr}")
        self.lr = lr
        self.steps = 0

    def zero_grad(self) -> None:
        """Forget the accumulated gradients (backward() adds to .grad)."""
        for p in self.params:
            p.grad = None

    def step(self) -> None:
        """One update of every parameter that has a gradient."""
        self.steps += 1
        for i, p in enumerate(self.params):
            if p.grad is not None:
                self.update(i, p.data, p.grad.numpy())

    def update(self, i: int, theta: np.ndarray, g: np.ndarray) -> None:
        """Update parameter ``i`` (its array ``theta``, in place) from its gradient ``g``."""
        raise NotImplementedError

    def _zeros(self) -> list[np.ndarray]:
        """One zero-initialized state array per parameter."""
        return [np.zeros_like(p.data) for p in self.params]


class SGD(Optimizer):
    def update(self, i, theta, g):
        theta -= self.lr * g


class Momentum(Optimizer):
    def __init__(self, params: Iterable[Tensor], lr: float, momentum: float = 0.9):
        super().__init__(params, lr)
        self.momentum = momentum
        self.velocity = self._zeros()

    def update(self, i, theta, g):
        v = self.velocity[i]
        v *= self.momentum
        v += g
        theta -= self.lr * v


class RMSProp(Optimizer):
    def __init__(self, params: Iterable[Tensor], lr: float = 0.01, alpha: float = 0.99, eps: float = 1e-8):
        super().__init__(params, lr)
        self.alpha, self.eps = alpha, eps
        self.square_avg = self._zeros()

    def update(self, i, theta, g):
        s = self.square_avg[i]
        s *= self.alpha
        s += (1 - self.alpha) * g * g
        theta -= self.lr * g / (np.sqrt(s) + self.eps)


class Adam(Optimizer):
    def __init__(self, params: Iterable[Tensor], lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8):
        super().__init__(params, lr)
        self.beta1, self.beta2 = betas
        self.eps = eps
        self.m, self.v = self._zeros(), self._zeros()

    def update(self, i, theta, g):
        m, v, t = self.m[i], self.v[i], self.steps
        m *= self.beta1
        m += (1 - self.beta1) * g
        v *= self.beta2
        v += (1 - self.beta2) * g * g
        m_hat = m / (1 - self.beta1 ** t)
        v_hat = v / (1 - self.beta2 ** t)
        theta -= self.lr * m_hat / (np.sqrt(v_hat) + self.eps)


class LRSchedule:
    """Decays a wrapped optimizer's learning rate: call ``step()`` once per epoch; lr = lr_at(epoch)."""

    def __init__(self, optimizer: Optimizer):
        self.optimizer, self.base_lr, self.epoch = optimizer, optimizer.lr, 0

    def step(self) -> None:
        self.epoch += 1
        self.optimizer.lr = self.lr_at(self.epoch)

    def lr_at(self, epoch: int) -> float:
        raise NotImplementedError


class StepDecay(LRSchedule):
    """lr = base_lr · gamma ** (epoch // step_size): multiply by gamma every step_size epochs."""

    def __init__(self, optimizer: Optimizer, step_size: int, gamma: float = 0.1):
        super().__init__(optimizer)
        if step_size < 1:
            raise ValueError(f"StepDecay: step_size must be >= 1, got {step_size}")
        self.step_size, self.gamma = step_size, gamma

    def lr_at(self, epoch):
        return self.base_lr * self.gamma ** (epoch // self.step_size)


class ExponentialDecay(LRSchedule):
    """lr = base_lr · gamma ** epoch."""

    def __init__(self, optimizer: Optimizer, gamma: float):
        super().__init__(optimizer)
        self.gamma = gamma

    def lr_at(self, epoch):
        return self.base_lr * self.gamma ** epoch

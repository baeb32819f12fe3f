"""Optimizers against their update equations written in numpy; decay schedules; nn modules; training an MLP."""

from __future__ import annotations

import numpy as np
import pytest

import mlsys_lib.autodiff as ad
from mlsys_lib.autodiff import Tensor, nn, optim

CURVATURE = np.array([[1.0, 4.0, 0.5], [2.0, 0.1, 3.0]])  # loss Σ c θ² / 2, so the gradient is c θ
THETA0 = np.array([[1.0, -2.0, 0.5], [-0.3, 1.5, 2.0]])


def sgd(theta, lr, steps):
    for _ in range(steps):
        theta = theta - lr * CURVATURE * theta
    return theta


def momentum(theta, lr, steps, mu=0.9):
    v = np.zeros_like(theta)
    for _ in range(steps):
        v = mu * v + CURVATURE * theta
        theta = theta - lr * v
    return theta


def rmsprop(theta, lr, steps, alpha=0.99, eps=1e-8):
    s = np.zeros_like(theta)
    for _ in range(steps):
        g = CURVATURE * theta
        s = alpha * s + (1 - alpha) * g ** 2
        theta = theta - lr * g / (np.sqrt(s) + eps)
    return theta


def adam(theta, lr, steps, b1=0.9, b2=0.999, eps=1e-8):
    m, v = np.zeros_like(theta), np.zeros_like(theta)
    for t in range(1, steps + 1):
        g = CURVATURE * theta
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g ** 2
        theta = theta - lr * (m / (1 - b1 ** t)) / (np.sqrt(v / (1 - b2 ** t)) + eps)
    return theta


@pytest.mark.parametrize("optimizer, reference", [
    (optim.SGD, sgd), (optim.Momentum, momentum), (optim.RMSProp, rmsprop), (optim.Adam, adam)])
def test_optimizer_matches_update_equations(optimizer, reference):
    theta = Tensor(THETA0.copy(), requires_grad=True)
    frozen = Tensor(np.ones(2), requires_grad=True)  # no gradient: left alone
    opt = optimizer([theta, frozen], lr=0.05)
    for _ in range(5):
        opt.zero_grad()
        ad.sum(CURVATURE * theta * theta * 0.5).backward()
        opt.step()
    np.testing.assert_allclose(theta.data, reference(THETA0, 0.05, 5), rtol=1e-12)
    np.testing.assert_array_equal(frozen.data, np.ones(2))


def test_zero_grad_clears_gradients():
    p = Tensor(np.ones(3), requires_grad=True)
    opt = optim.SGD([p], lr=0.1)
    ad.sum(p * p).backward()
    opt.zero_grad()
    assert p.grad is None


def test_learning_rate_schedules():
    opt = optim.SGD([Tensor(np.ones(1), requires_grad=True)], lr=1.0)
    schedule = optim.StepDecay(opt, step_size=2, gamma=0.5)
    lrs = []
    for _ in range(5):
        schedule.step()
        lrs.append(opt.lr)
    assert lrs == [1.0, 0.5, 0.5, 0.25, 0.25]
    opt = optim.Adam([Tensor(np.ones(1), requires_grad=True)], lr=0.1)
    schedule = optim.ExponentialDecay(opt, gamma=0.9)
    for _ in range(3):
        schedule.step()
    assert np.isclose(opt.lr, 0.1 * 0.9 ** 3)


def test_optimizer_rejects_bad_arguments():
    with pytest.raises(ValueError, match=r"SGD: lr must be > 0"):
        optim.SGD([Tensor(np.ones(1), requires_grad=True)], lr=0.0)
    with pytest.raises(TypeError, match=r"Adam: parameter 0 must be an eager Tensor with requires_grad=True"):
        optim.Adam([Tensor(np.ones(1))], lr=0.1)
    with pytest.raises(ValueError, match=r"StepDecay: step_size must be >= 1"):
        optim.StepDecay(optim.SGD([Tensor(np.ones(1), requires_grad=True)], lr=1.0), step_size=0)


def test_linear_uses_he_init_from_a_seedable_rng():
    layer = nn.Linear(512, 256, rng=0)
    assert layer.weight.shape == (512, 256) and layer.weight.dtype == np.float32
    assert abs(layer.weight.data.std() / np.sqrt(2 / 512) - 1) < 0.02
    np.testing.assert_array_equal(layer.bias.data, np.zeros(256))
    np.testing.assert_array_equal(nn.Linear(512, 256, rng=0).weight.data, layer.weight.data)
    assert not np.array_equal(nn.Linear(512, 256, rng=1).weight.data, layer.weight.data)
    with pytest.raises(ValueError, match=r"Linear: expected input of shape \(\.\.\., 512\), got \(2, 3\)"):
        layer(np.ones((2, 3), np.float32))


def test_module_parameters_and_zero_grad():
    mlp = nn.MLP([3, 8, 8, 2], rng=0)
    params = mlp.parameters()
    assert [p.shape for p in params] == [(3, 8), (8,), (8, 8), (8,), (8, 2), (2,)]
    assert [type(layer).__name__ for layer in mlp.layers] == ["Linear", "ReLU", "Linear", "ReLU", "Linear"]
    ad.sum(mlp(np.ones((4, 3), np.float32))).backward()
    assert all(p.grad is not None for p in params)
    mlp.zero_grad()
    assert all(p.grad is None for p in params)
    with pytest.raises(ValueError, match=r"MLP: sizes needs at least \[in, out\]"):
        nn.MLP([3])


def test_mlp_training_reduces_the_loss():
    """Classify points of the plane by the sign of x₀·x₁ (XOR-like, not linearly separable)."""
    rng = np.random.default_rng(0)
    x = rng.uniform(-1, 1, (256, 2)).astype(np.float32)
    labels = (x[:, 0] * x[:, 1] > 0).astype(np.int64)
    mlp = nn.MLP([2, 32, 32, 2], rng=0)
    opt = optim.Adam(mlp.parameters(), lr=0.02)
    schedule = optim.ExponentialDecay(opt, gamma=0.99)
    losses = []
    for _ in range(150):
        opt.zero_grad()
        loss = ad.cross_entropy(mlp(x), labels)
        loss.backward()
        opt.step()
        schedule.step()
        losses.append(loss.item())
    accuracy = np.mean(np.argmax(mlp(x).numpy(), axis=1) == labels)
    assert losses[-1] < 0.3 * losses[0] and accuracy > 0.9

"""Benchmark mlsys_lib.autodiff against hand-written numpy, measured in the same process.

1. One training step (forward, backward, SGD update) of a 3-layer MLP 512 -> 512 -> 512 -> 10 with
   ReLU and cross-entropy, batch 256, float32: through autodiff vs the same step written in numpy
   (best of several repeats; target ratio <= 1.5).
2. Backward time per node on a 10,000-node chain (pure per-node overhead of the engine).

Run: python benchmarks/autodiff.py
"""

from __future__ import annotations

import time

import numpy as np

from mlsys_lib import autodiff as ad

BATCH, SIZES, LR, REPEATS = 256, (512, 512, 512, 10), 1e-3, 50
CHAIN = 10_000


def best_times(steps, repeats: int) -> list[float]:
    """The fastest of ``repeats`` runs of each step, in seconds. The steps take turns, run by run,
    so that both see the same machine load (this may be a shared machine)."""
    for step in steps:  # warm-up
        step()
    best = [float("inf")] * len(steps)
    for _ in range(repeats):
        for i, step in enumerate(steps):
            start = time.perf_counter()
            step()
            best[i] = min(best[i], time.perf_counter() - start)
    return best


def numpy_step(params: list[np.ndarray], x: np.ndarray, labels: np.ndarray, lr: float) -> float:
    """The same training step by hand: forward, backward (chain rule written out), SGD; returns the loss."""
    n_layers = len(params) // 2
    activations, pre = [x], []
    for i in range(n_layers):
        z = activations[-1] @ params[2 * i] + params[2 * i + 1]
        pre.append(z)
        if i < n_layers - 1:
            activations.append(np.maximum(z, 0))
    shifted = pre[-1] - pre[-1].max(axis=1, keepdims=True)
    log_probs = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    rows = np.arange(len(labels))
    loss = -log_probs[rows, labels].mean()
    dz = np.exp(log_probs)
    dz[rows, labels] -= 1
    dz /= len(labels)
    grads = [None] * len(params)
    for i in reversed(range(n_layers)):
        grads[2 * i] = activations[i].T @ dz
        grads[2 * i + 1] = dz.sum(axis=0)
        if i > 0:
            dz = (dz @ params[2 * i].T) * (pre[i - 1] > 0)
    for p, g in zip(params, grads):
        p -= lr * g
    return float(loss)


def mlp_benchmark() -> None:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((BATCH, SIZES[0])).astype(np.float32)
    labels = rng.integers(0, SIZES[-1], BATCH)
    model = ad.nn.MLP(SIZES, rng=1)
    params = model.parameters()
    reference = [p.data.copy() for p in params]
    optimizer = ad.optim.SGD(params, lr=LR)
    inputs = ad.Tensor(x)

    def autodiff_step() -> float:
        optimizer.zero_grad()
        loss = ad.cross_entropy(model(inputs), labels)
        loss.backward()
        optimizer.step()
        return loss.item()

    # Same start, one step each: the two implementations must agree before their times mean anything.
    loss_ad, loss_np = autodiff_step(), numpy_step(reference, x, labels, LR)
    assert abs(loss_ad - loss_np) < 1e-4 * abs(loss_np), (loss_ad, loss_np)
    assert all(np.allclose(p.data, r, atol=1e-5) for p, r in zip(params, reference))

    t_numpy, t_autodiff = best_times([lambda: numpy_step(reference, x, labels, LR), autodiff_step], REPEATS)
    print(f"MLP {' -> '.join(map(str, SIZES))}, batch {BATCH}, float32: one step (forward + backward + SGD)")
    print(f"  numpy by hand : {t_numpy * 1e3:8.3f} ms")
    print(f"  autodiff      : {t_autodiff * 1e3:8.3f} ms")
    print(f"  ratio         : {t_autodiff / t_numpy:8.3f} x  (target <= 1.5)")


def chain_benchmark() -> None:
    def build() -> ad.Tensor:
        x = ad.Tensor(np.float64(1.0), requires_grad=True)
        y = x
        for _ in range(CHAIN):
            y = y * 1.0001
        return y

    best = float("inf")
    for _ in range(3):
        y = build()
        start = time.perf_counter()
        y.backward()
        best = min(best, time.perf_counter() - start)
    print(f"chain of {CHAIN} nodes: backward {best * 1e3:.1f} ms = {best / CHAIN * 1e6:.2f} us per node")


if __name__ == "__main__":
    mlp_benchmark()
    chain_benchmark()

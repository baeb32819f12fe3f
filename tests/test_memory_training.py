"""mlsys_lib.memory: checkpointing, gradient accumulation and swap-in timelines against independent computations."""

import math

import numpy as np
import pytest

from mlsys_lib.autodiff import Tensor, cross_entropy, grad, mul, nn, tanh
from mlsys_lib.autodiff import sum as tensor_sum
from mlsys_lib.memory import accumulated_gradients, checkpointed_gradients, layer_parameters, swap_in_timeline


class TanhLayer(nn.Module):
    def __init__(self, width, rng):
        self.linear = nn.Linear(width, width, rng=rng, dtype=np.float64)

    def forward(self, x):
        return tanh(self.linear(x))


def _model(n, width=6, seed=0):
    rng = np.random.default_rng(seed)
    return [TanhLayer(width, rng) for _ in range(n)]


def _loss(out):
    return tensor_sum(mul(out, out))


def _plain(layers, x):
    """Ordinary backpropagation through the whole recorded graph."""
    for p in layer_parameters(layers):
        p.grad = None
    h = Tensor(x)
    for layer in layers:
        h = layer(h)
    loss = _loss(h)
    loss.backward()
    return float(loss.numpy()), [p.grad.numpy() for p in layer_parameters(layers)]


def _peak_units(n, k):
    """Peak layer inputs held, derived by hand: S = ceil(n/k) segments, the last of length L. While segment s
    is differentiated, the s earlier checkpoints and its own inputs are held: s + k for s < S-1, S-1+L for the last."""
    segments = -(-n // k)
    last = n - (segments - 1) * k
    if segments == 1:
        return n
    return max(segments - 2 + k, segments - 1 + last)


@pytest.mark.parametrize("n", [1, 7, 16])
def test_checkpointed_gradients_equal_plain_backprop_for_every_interval(n):
    layers = _model(n)
    x = np.random.default_rng(1).standard_normal((5, 6))
    want_loss, want = _plain(layers, x)
    for k in range(1, n + 1):
        run = checkpointed_gradients(layers, x, _loss, k)
        assert run.loss == want_loss
        assert len(run.grads) == len(want) == 2 * n
        for g, w in zip(run.grads, want):
            assert np.array_equal(g, w), f"n={n}, k={k}: gradients differ by {np.abs(g - w).max()}"


def test_peak_memory_and_recomputation_follow_the_closed_form():
    n = 25
    layers = _model(n, width=4)
    x = np.random.default_rng(2).standard_normal((3, 4))
    unit = x.nbytes
    peaks = {}
    for k in range(1, n + 1):
        run = checkpointed_gradients(layers, x, _loss, k)
        segments = -(-n // k)
        assert run.peak_activation_bytes == _peak_units(n, k) * unit, k
        assert run.layer_evaluations == 2 * n - (n - (segments - 1) * k), k  # all but the last segment twice
        peaks[k] = run.peak_activation_bytes // unit
    assert peaks[n] == n and peaks[1] == n, "k = N stores every input, and so does k = 1"
    best = min(peaks.values())
    assert peaks[5] == best == 2 * 5 - 1, "k = sqrt(N) = 5 reaches the minimum, 2 sqrt(N) - 1"
    assert all(abs(k - math.sqrt(n)) <= 2 for k, p in peaks.items() if p == best)


def test_checkpoint_interval_is_checked():
    layers = _model(3)
    for bad in (0, 4, 1.5, True):
        with pytest.raises(ValueError, match="checkpoint interval"):
            checkpointed_gradients(layers, np.ones((1, 6)), _loss, bad)
    with pytest.raises(ValueError, match="at least one layer"):
        checkpointed_gradients([], np.ones((1, 6)), _loss, 1)


def _softmax_regression(seed=3, rows=23, features=5, classes=4):
    rng = np.random.default_rng(seed)
    W = Tensor(rng.standard_normal((features, classes)), requires_grad=True)
    b = Tensor(rng.standard_normal(classes), requires_grad=True)
    X, y = rng.standard_normal((rows, features)), rng.integers(0, classes, size=rows)

    def loss_fn(X_j, y_j):
        return cross_entropy(Tensor(X_j) @ W + b, y_j)

    return W, b, X, y, loss_fn


def test_micro_batches_give_the_full_batch_gradient():
    W, b, X, y, loss_fn = _softmax_regression()
    # the full-batch gradient by hand: softmax(XW + b) - onehot(y), averaged over the rows
    Z = X @ W.numpy() + b.numpy()
    P = np.exp(Z - Z.max(axis=1, keepdims=True))
    P /= P.sum(axis=1, keepdims=True)
    P[np.arange(len(y)), y] -= 1
    want_W, want_b = X.T @ P / len(y), P.mean(axis=0)
    for m in (1, 2, 4, 7, 23):  # 23 rows: unequal micro-batches except for m = 1 and 23
        gW, gb = accumulated_gradients(loss_fn, [W, b], X, y, m)
        np.testing.assert_allclose(gW, want_W, rtol=1e-12, atol=1e-14)
        np.testing.assert_allclose(gb, want_b, rtol=1e-12, atol=1e-14)


def test_accumulation_rejects_bad_micro_batch_counts():
    W, b, X, y, loss_fn = _softmax_regression(rows=4)
    for bad in (0, 5, 2.0):
        with pytest.raises(ValueError, match="micro_batches"):
            accumulated_gradients(loss_fn, [W, b], X, y, bad)
    with pytest.raises(ValueError, match="rows"):
        accumulated_gradients(loss_fn, [W, b], X, y[:3], 2)


def test_mean_of_micro_batch_means_would_be_wrong_here():
    """The test above can fail: equal weights 1/m give another answer for unequal micro-batches."""
    W, b, X, y, loss_fn = _softmax_regression()
    equal = sum(grad(loss_fn(Xj, yj), [W])[0].numpy() for Xj, yj in zip(np.array_split(X, 7), np.array_split(y, 7))) / 7
    right = accumulated_gradients(loss_fn, [W, b], X, y, 7)[0]
    assert np.abs(equal - right).max() > 1e-6


def test_swap_in_hides_behind_compute_when_the_link_is_fast_enough():
    layers, compute = [4e9] * 6, [0.2] * 6
    fast = swap_in_timeline(layers, compute, bandwidth=25e9)  # 0.16 s per transfer < 0.2 s per layer
    assert fast.total == pytest.approx(0.16 + 6 * 0.2) and fast.stall == pytest.approx(0.16)
    slow = swap_in_timeline(layers, compute, bandwidth=10e9)  # 0.4 s per transfer: the link is the bottleneck
    assert slow.total == pytest.approx(6 * 0.4 + 0.2) and slow.stall == pytest.approx(6 * 0.4 + 0.2 - 1.2)
    serial = swap_in_timeline(layers, compute, bandwidth=25e9, prefetch=False)
    assert serial.total == pytest.approx(6 * (0.16 + 0.2))
    for timeline in (fast, slow, serial):  # never more than two layers' weights on the device
        for i in range(2, 6):
            assert timeline.transfers[i][0] >= timeline.computes[i - 2][1] - 1e-12
    with pytest.raises(ValueError, match="bandwidth"):
        swap_in_timeline(layers, compute, bandwidth=0)
    with pytest.raises(ValueError, match="compute times"):
        swap_in_timeline(layers, compute[:3], bandwidth=1e9)

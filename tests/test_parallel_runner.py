"""The pipeline runner trains like one process, with every schedule; checked against a numpy MLP."""

from __future__ import annotations

import numpy as np
import pytest

from mlsys_lib.comm import launch
from mlsys_lib.parallel.pipeline import init_mlp, make_schedule, pipeline_train, split_layers, train

C = np.sqrt(2 / np.pi)


def gelu(z):
    return 0.5 * z * (1 + np.tanh(C * (z + 0.044715 * z ** 3)))


def gelu_grad(z):
    t = np.tanh(C * (z + 0.044715 * z ** 3))
    return 0.5 * (1 + t) + 0.5 * z * (1 - t ** 2) * C * (1 + 3 * 0.044715 * z ** 2)


def numpy_sgd(layers, X, Y, steps, lr):
    """Full-batch SGD on sum((y - Y)^2) / B by hand: the oracle."""
    layers = [(W.copy(), b.copy()) for W, b in layers]
    losses = []
    for _ in range(steps):
        xs, zs, x = [X], [], X
        for j, (W, b) in enumerate(layers):
            z = x @ W + b
            zs.append(z)
            x = gelu(z) if j < len(layers) - 1 else z
            xs.append(x)
        losses.append(float(np.sum((x - Y) ** 2) / len(X)))
        dx = 2 * (x - Y) / len(X)
        for j in reversed(range(len(layers))):
            dz = dx * gelu_grad(zs[j]) if j < len(layers) - 1 else dx
            W, b = layers[j]
            dx = dz @ W.T
            layers[j] = (W - lr * xs[j].T @ dz, b - lr * dz.sum(axis=0))
    return layers, losses


CASES = [("naive", 3, 1), ("gpipe", 4, 1), ("1f1b", 5, 1), ("zb_h1", 6, 1), ("interleaved_1f1b", 4, 2)]
SIZES = [5, 7, 6, 8, 4, 9, 6, 5, 3]  # 8 layers: enough for 4 stages x 2 chunks


def run_cases(g, layers, X, Y, steps, lr):
    results = []
    for name, m, v in CASES:
        if name == "interleaved_1f1b":
            m = 2 * g.world_size
        results.append(pipeline_train(g, make_schedule(name, g.world_size, m, v), layers, X, Y, steps, lr))
    return results


@pytest.mark.parametrize("p", [2, 4])
def test_every_schedule_trains_like_one_process(p):
    rng = np.random.default_rng(8)
    layers = init_mlp(SIZES, seed=3)
    X, Y = rng.standard_normal((11, SIZES[0])), rng.standard_normal((11, SIZES[-1]))  # 11 rows: uneven microbatches
    want, want_losses = numpy_sgd(layers, X, Y, steps=3, lr=0.05)
    per_rank = launch(run_cases, p, args=(layers, X, Y, 3, 0.05))
    for c, (name, _, _) in enumerate(CASES):
        got, losses = {}, []
        for rank in per_rank:
            trained, rank_losses = rank[c]
            assert not set(trained) & set(got), f"{name}: a layer is held by two ranks"
            got.update(trained)
            losses += rank_losses
        assert sorted(got) == list(range(len(layers)))
        for j, (W, b) in enumerate(want):
            np.testing.assert_allclose(got[j][0], W, rtol=1e-10, atol=1e-12, err_msg=f"{name}, p = {p}, layer {j}")
            np.testing.assert_allclose(got[j][1], b, rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(losses, want_losses, rtol=1e-10)
        assert losses[-1] < losses[0], "the loss goes down"


def test_single_process_train_matches_numpy():
    rng = np.random.default_rng(9)
    layers = init_mlp([3, 4, 2], seed=1)
    X, Y = rng.standard_normal((6, 3)), rng.standard_normal((6, 2))
    got, losses = train(layers, X, Y, 4, 0.1)
    want, want_losses = numpy_sgd(layers, X, Y, 4, 0.1)
    for (W, b), (W_ref, b_ref) in zip(got, want):
        np.testing.assert_allclose(W, W_ref, rtol=1e-12)
        np.testing.assert_allclose(b, b_ref, rtol=1e-12)
    np.testing.assert_allclose(losses, want_losses, rtol=1e-12)


def test_layers_split_into_stages_and_bad_inputs():
    assert split_layers(5, 2) == [range(0, 3), range(3, 5)]
    assert split_layers(4, 4) == [range(i, i + 1) for i in range(4)]
    with pytest.raises(ValueError, match="cannot cut 3 layers into 4 stages"):
        split_layers(3, 4)
    with pytest.raises(ValueError, match="sizes"):
        init_mlp([4])
    with pytest.raises(ValueError, match="X must be"):
        train(init_mlp([2, 3]), np.zeros((4, 2)), np.zeros((5, 3)), 1, 0.1)

"""Define-then-run (placeholders, symbolic gradients, Executor) and forward mode, against eager reverse mode."""

from __future__ import annotations

import numpy as np
import pytest

import mlsys_lib.autodiff as ad
from mlsys_lib.autodiff import Tensor


def model(x, w1, b1, w2, gamma, beta, labels):
    """A small network touching most ops: linear, gelu, layer_norm, matmul, softmax-based loss, mean."""
    h = ad.gelu(ad.linear(x, w1, b1))
    h = ad.layer_norm(h, gamma, beta)
    logits = ad.matmul(h, w2)
    return ad.cross_entropy(logits, labels) + 0.1 * ad.mean(ad.sigmoid(logits) ** 2) + 0.01 * ad.max(ad.tanh(h))


def random_inputs(seed=0):
    rng = np.random.default_rng(seed)
    values = {"x": rng.standard_normal((4, 3)), "w1": rng.standard_normal((3, 5)), "b1": rng.standard_normal(5),
              "w2": rng.standard_normal((5, 3)), "gamma": rng.standard_normal(5), "beta": rng.standard_normal(5)}
    return values, rng.integers(0, 3, 4)


def test_eager_symbolic_and_forward_mode_agree():
    values, labels = random_inputs()
    names = list(values)

    # eager, reverse mode
    leaves = {k: Tensor(v, requires_grad=True) for k, v in values.items()}
    loss = model(*leaves.values(), labels)
    eager_grads = ad.grad(loss, list(leaves.values()))

    # define-then-run: the same function on placeholders; labels are an integer placeholder
    holders = {k: ad.placeholder(v.shape, k) for k, v in values.items()}
    y = ad.placeholder((4,), "labels", dtype=np.int64)
    sym_loss = model(*holders.values(), y)
    sym_grads = ad.gradients(sym_loss, list(holders.values()))
    assert all(g.is_symbolic for g in sym_grads)
    feed = {holders[k]: values[k] for k in names} | {y: labels}
    results = ad.Executor([sym_loss, *sym_grads]).run(feed)
    np.testing.assert_allclose(results[0], loss.numpy(), rtol=1e-12)
    for got, expected in zip(results[1:], eager_grads):
        np.testing.assert_allclose(got, expected.numpy(), rtol=1e-10, atol=1e-12)

    # forward mode: the directional derivative along v equals <grad, v>
    rng = np.random.default_rng(1)
    tangents = [rng.standard_normal(v.shape) for v in values.values()]
    out, tangent = ad.jvp(lambda *t: model(*t, labels), list(values.values()), tangents)
    np.testing.assert_allclose(out.numpy(), loss.numpy(), rtol=1e-12)
    expected = sum(np.sum(g.numpy() * t) for g, t in zip(eager_grads, tangents))
    np.testing.assert_allclose(tangent.numpy(), expected, rtol=1e-10)


def test_lecture_worked_example_in_all_three_modes():
    """ŷ = w·x + b, L = (ŷ - y)² at x = 2, y = 5, w = 1, b = 0: L = 9, ∂L/∂w = -12, ∂L/∂b = -6."""
    x, y, w, b = (ad.placeholder((), name) for name in "xywb")
    loss = (w * x + b - y) ** 2
    dw, db = ad.gradients(loss, [w, b])
    values = ad.Executor([loss, dw, db]).run({x: 2.0, y: 5.0, w: 1.0, b: 0.0})
    assert [float(v) for v in values] == [9.0, -12.0, -6.0]

    def f(w_, b_):
        return (w_ * 2.0 + b_ - 5.0) ** 2

    assert ad.jvp(f, [1.0, 0.0], [1.0, 0.0])[1].item() == -12.0
    assert ad.jvp(f, [1.0, 0.0], [0.0, 1.0])[1].item() == -6.0


def test_gradient_nodes_can_be_differentiated_again():
    rng = np.random.default_rng(2)
    a = rng.standard_normal((3, 3))
    x = ad.placeholder((3,), "x")
    y = ad.sum(ad.tanh(ad.matmul(ad.reshape(x, (1, 3)), a)) ** 2)
    (g,) = ad.gradients(y, [x])
    v = ad.placeholder((3,), "v")
    (hvp,) = ad.gradients(ad.sum(g * v), [x])
    x0, v0 = rng.standard_normal(3), rng.standard_normal(3)
    value_hvp, = ad.Executor([hvp]).run({x: x0, v: v0})

    xe = Tensor(x0, requires_grad=True)
    (ge,) = ad.grad(ad.sum(ad.tanh(ad.matmul(ad.reshape(xe, (1, 3)), a)) ** 2), xe, create_graph=True)
    (expected,) = ad.grad(ge, xe, grad_outputs=v0)
    np.testing.assert_allclose(value_hvp, expected.numpy(), rtol=1e-10)


def test_define_then_run_training_loop():
    """The lecture's TF v1 loop: build once (loss, W_grad), then run it many times, feeding the new W."""
    rng = np.random.default_rng(3)
    x_data = rng.standard_normal((32, 4))
    y_data = x_data @ np.array([1.0, -2.0, 0.5, 3.0])
    x, y, w = ad.placeholder((32, 4), "x"), ad.placeholder((32,), "y"), ad.placeholder((4,), "W")
    loss = ad.mean((ad.reshape(ad.matmul(x, ad.reshape(w, (4, 1))), (32,)) - y) ** 2)
    (w_grad,) = ad.gradients(loss, [w])
    step = ad.Executor([loss, w_grad])
    w_value, first = np.zeros(4), None
    for _ in range(100):
        value, g = step.run({x: x_data, y: y_data, w: w_value})
        first = value if first is None else first
        w_value = w_value - 0.1 * g  # the tf.assign(W, W - lr * W_grad) of the lecture
    assert value < 1e-3 * first
    np.testing.assert_allclose(w_value, [1.0, -2.0, 0.5, 3.0], atol=1e-2)


def test_eager_tensors_are_constants_of_a_symbolic_graph():
    x = ad.placeholder((2,), "x")
    scale = Tensor(np.array([2.0, 3.0]), requires_grad=True)
    y = ad.sum(x * scale * scale)
    dx, dscale = ad.gradients(y, [x, scale])
    values = ad.Executor([y, dx, dscale]).run({x: np.array([1.0, 1.0])})
    np.testing.assert_allclose(values[0], 13.0)
    np.testing.assert_allclose(values[1], [4.0, 9.0])
    np.testing.assert_allclose(values[2], [4.0, 6.0])


def test_symbolic_shapes_and_dtypes_are_inferred():
    x = ad.placeholder((2, 3), "x", dtype=np.float32)
    h = ad.softmax(ad.matmul(x, np.ones((3, 4), np.float32)) * 2.0)
    s = ad.sum(h, axis=0, keepdims=True)
    assert (h.shape, h.dtype, s.shape) == ((2, 4), np.float32, (1, 4))
    assert ad.Executor([s]).run({x: np.ones((2, 3))})[0].dtype == np.float32


def test_executor_runs_a_ten_thousand_node_chain():
    x = ad.placeholder((), "x")
    y = x
    for _ in range(10_000):
        y = y + 1.0
    (g,) = ad.gradients(y, [x])
    value, grad = ad.Executor([y, g]).run({x: 0.0})
    assert value == 10_000.0 and grad == 1.0


def test_feed_errors_name_the_placeholder_and_shapes():
    x = ad.placeholder((3, 4), "images")
    y = ad.sum(x * 2.0)
    run = ad.Executor([y]).run
    with pytest.raises(ValueError, match=r"placeholder 'images' expects shape \(3, 4\), was fed shape \(3, 5\)"):
        run({x: np.ones((3, 5))})
    with pytest.raises(ValueError, match=r"placeholder 'images' \(shape \(3, 4\)\) was not fed"):
        run({})
    labels = ad.placeholder((3,), "labels", dtype=np.int64)
    with pytest.raises(TypeError, match=r"placeholder 'labels' expects int64, was fed float64"):
        ad.Executor([labels * 1]).run({labels: np.ones(3)})


def test_symbolic_graph_build_errors_name_op_and_shapes():
    a, b = ad.placeholder((3, 4), "a"), ad.placeholder((5, 6), "b")
    with pytest.raises(ValueError, match=r"matmul: inner dimensions differ: \(3, 4\) @ \(5, 6\)"):
        ad.matmul(a, b)
    with pytest.raises(TypeError, match="symbolic"):
        ad.sum(a).backward()


def test_jvp_checks_tangents_and_returns_structure():
    def f(x, y):
        return x * y, ad.exp(x)

    (p, e), (tp, te) = ad.jvp(f, [np.array([1.0, 2.0]), np.array([3.0, 4.0])], [np.array([1.0, 0.0]), None])
    np.testing.assert_allclose(tp, [3.0, 0.0])
    np.testing.assert_allclose(te, [np.e, 0.0])
    with pytest.raises(ValueError, match=r"jvp: tangent 0 has shape \(3,\), its primal has shape \(2,\)"):
        ad.jvp(f, [np.ones(2), np.ones(2)], [np.ones(3), None])
    with pytest.raises(ValueError, match="2 primals but 1 tangents"):
        ad.jvp(f, [np.ones(2), np.ones(2)], [np.ones(2)])

"""Reverse mode in eager mode: the lecture's worked example, accumulation, deep graphs, higher order, errors."""

from __future__ import annotations

import numpy as np
import pytest

import mlsys_lib.autodiff as ad
from mlsys_lib.autodiff import Tensor


def test_lecture_worked_example():
    """ŷ = w·x + b, L = (ŷ - y)², x = 2, y = 5, w = 1, b = 0: L = 9, ∂L/∂w = -12, ∂L/∂b = -6."""
    x, y = 2.0, 5.0
    w, b = Tensor(1.0, requires_grad=True), Tensor(0.0, requires_grad=True)
    loss = (w * x + b - y) ** 2
    loss.backward()
    assert loss.item() == 9.0
    assert w.grad.item() == -12.0 and b.grad.item() == -6.0


def test_reused_value_accumulates_both_paths():
    a = Tensor(np.array([1.5, -2.0, 0.5]), requires_grad=True)
    b = a + a
    c = b * b  # c = 4a², dc/da = 8a
    c.backward(np.ones(3))
    np.testing.assert_allclose(a.grad, 8 * a.data)


def test_diamond_graph_and_repeated_backward_accumulate():
    x = Tensor(np.array([0.3, -1.2]), requires_grad=True)
    h = ad.tanh(x)
    y = ad.sum(h * ad.exp(h) + h)  # h feeds three consumers
    y.backward()
    t = np.tanh(x.data)
    expected = (np.exp(t) * (1 + t) + 1) * (1 - t ** 2)
    np.testing.assert_allclose(x.grad, expected, rtol=1e-12)
    y.backward()  # .grad accumulates across calls, as in PyTorch; zero it between steps
    np.testing.assert_allclose(x.grad, 2 * expected, rtol=1e-12)


def test_broadcast_gradient_sums_back_to_input_shape():
    x = Tensor(np.ones((4, 3)), requires_grad=True)
    b = Tensor(np.array([1.0, 2.0, 3.0]), requires_grad=True)
    s = Tensor(np.array(2.0), requires_grad=True)
    ad.sum((x + b) * s).backward()
    assert b.grad.shape == (3,) and s.grad.shape == ()
    np.testing.assert_allclose(b.grad, [8.0, 8.0, 8.0])
    np.testing.assert_allclose(s.grad, np.sum(x.data + b.data))


def test_ten_thousand_node_chain_backward_has_no_recursion():
    x = Tensor(np.float64(0.5), requires_grad=True)
    y = x
    for _ in range(10_000):
        y = y * 1.0001
    assert len(ad.topological_order([y])) > 10_000
    y.backward()
    np.testing.assert_allclose(x.grad.item(), 1.0001 ** 10_000, rtol=1e-10)


def test_topological_order_puts_inputs_first():
    a = Tensor(1.0, requires_grad=True)
    b = a * 2.0
    c = b + a
    d = c * b
    order = ad.topological_order([d])
    position = {id(n): i for i, n in enumerate(order)}
    assert len(position) == len(order)
    for node in order:
        assert all(position[id(x)] < position[id(node)] for x in node.inputs)


def test_no_backward_graph_without_create_graph():
    x = Tensor(np.array([0.2, 0.7]), requires_grad=True)
    ad.sum(ad.tanh(x) ** 2).backward()
    assert x.grad.op is None and not x.grad.requires_grad
    x.grad = None
    ad.sum(ad.tanh(x) ** 2).backward(create_graph=True)
    assert x.grad.op is not None and x.grad.requires_grad


def test_no_grad_records_nothing():
    x = Tensor(np.ones(3), requires_grad=True)
    with ad.no_grad():
        y = x * 2.0
    assert y.op is None and not y.requires_grad
    assert (x * 2.0).op is not None


def test_hessian_vector_product_matches_differences_of_gradients():
    rng = np.random.default_rng(3)
    a_mat = rng.standard_normal((4, 4))

    def f(x):
        return ad.sum(ad.tanh(ad.matmul(ad.reshape(x, (1, 4)), a_mat)) ** 2) + ad.sum(ad.exp(x) * x)

    def gradient(x_value):
        x = Tensor(x_value, requires_grad=True)
        return ad.grad(f(x), x)[0].numpy()

    x0, v = rng.standard_normal(4), rng.standard_normal(4)
    x = Tensor(x0, requires_grad=True)
    (g,) = ad.grad(f(x), x, create_graph=True)
    (hvp,) = ad.grad(g, x, grad_outputs=v)  # reverse over reverse
    _, hvp_forward = ad.jvp(lambda t: ad.grad(f(t), t, create_graph=False)[0], [x], [v])  # forward over reverse
    eps = 1e-6
    numeric = (gradient(x0 + eps * v) - gradient(x0 - eps * v)) / (2 * eps)
    np.testing.assert_allclose(hvp.numpy(), numeric, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(hvp_forward.numpy(), numeric, rtol=1e-6, atol=1e-8)


def test_third_derivative_of_a_scalar_function():
    x = Tensor(0.7, requires_grad=True)
    y = x ** 4
    (d1,) = ad.grad(y, x, create_graph=True)
    (d2,) = ad.grad(d1, x, create_graph=True)
    (d3,) = ad.grad(d2, x)
    assert np.isclose(d1.item(), 4 * 0.7 ** 3) and np.isclose(d2.item(), 12 * 0.7 ** 2)
    assert np.isclose(d3.item(), 24 * 0.7)


def test_grad_of_intermediate_and_unused_inputs():
    x = Tensor(np.array([1.0, 2.0]), requires_grad=True)
    unused = Tensor(np.array([3.0]), requires_grad=True)
    h = x * 3.0
    y = ad.sum(h * h)
    dh, dx, du = ad.grad(y, [h, x, unused])
    np.testing.assert_allclose(dh, 2 * h.data)
    np.testing.assert_allclose(dx, 18 * x.data)
    np.testing.assert_allclose(du, [0.0])
    assert x.grad is None  # grad() returns gradients, it does not accumulate them


def test_max_splits_gradient_evenly_among_ties():
    x = Tensor(np.array([[1.0, 3.0, 3.0], [2.0, 0.0, -1.0]]), requires_grad=True)
    ad.sum(ad.max(x, axis=1)).backward()
    np.testing.assert_allclose(x.grad, [[0.0, 0.5, 0.5], [1.0, 0.0, 0.0]])


def test_dtype_is_preserved_and_python_scalars_do_not_upcast():
    x = Tensor(np.ones((2, 3), np.float32), requires_grad=True)
    y = ad.mean(ad.gelu(x * 2.0 + 1) / 3.0)
    y.backward()
    assert y.dtype == np.float32 and x.grad.dtype == np.float32


def test_operator_overloads_and_reflected_forms_with_numpy_arrays():
    x = Tensor(np.array([1.0, 2.0]), requires_grad=True)
    arr = np.array([3.0, 5.0])
    for expr, expected in [(arr + x, arr + x.data), (arr - x, arr - x.data), (arr * x, arr * x.data),
                           (arr / x, arr / x.data), (2.0 ** x, 2.0 ** x.data), (-x, -x.data), (1 - x, 1 - x.data)]:
        assert isinstance(expr, Tensor)
        np.testing.assert_allclose(expr, expected)
    m = Tensor(np.eye(2), requires_grad=True)
    assert isinstance(np.ones((1, 2)) @ m, Tensor) and (m @ np.ones((2, 1))).shape == (2, 1)


def test_inputs_with_array_interface_are_accepted():
    class ArrayLike:
        def __array__(self, dtype=None, copy=None):
            return np.array([1.0, 4.0])

    np.testing.assert_allclose(ad.log(ArrayLike()), np.log([1.0, 4.0]))


def test_numerically_stable_sigmoid_and_log_softmax():
    x = Tensor(np.array([-1000.0, 0.0, 1000.0]), requires_grad=True)
    with np.errstate(over="raise", divide="raise", invalid="raise"):  # underflow to 0 is fine
        np.testing.assert_allclose(ad.sigmoid(x), [0.0, 0.5, 1.0])
        logp = ad.log_softmax(x)
        ad.sum(logp * np.array([0.0, 0.0, 1.0])).backward()
    np.testing.assert_allclose(logp, [-2000.0, -1000.0, 0.0])
    np.testing.assert_allclose(x.grad, [0.0, 0.0, 0.0], atol=1e-12)


def test_cross_entropy_matches_numpy():
    rng = np.random.default_rng(0)
    logits, labels = rng.standard_normal((5, 4)), rng.integers(0, 4, 5)
    z = Tensor(logits, requires_grad=True)
    loss = ad.cross_entropy(z, labels)
    loss.backward()
    p = np.exp(logits) / np.exp(logits).sum(1, keepdims=True)
    np.testing.assert_allclose(loss.item(), -np.log(p[np.arange(5), labels]).mean())
    np.testing.assert_allclose(z.grad, (p - np.eye(4)[labels]) / 5, atol=1e-12)


def test_layer_norm_matches_numpy():
    rng = np.random.default_rng(1)
    x, w, b = rng.standard_normal((3, 5)), rng.standard_normal(5), rng.standard_normal(5)
    mu, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
    np.testing.assert_allclose(ad.layer_norm(x, w, b, eps=1e-5), (x - mu) / np.sqrt(var + 1e-5) * w + b)


# -- errors --------------------------------------------------------------------------------------

def test_backward_of_non_scalar_needs_a_seed():
    y = Tensor(np.ones((2, 3)), requires_grad=True) * 2.0
    with pytest.raises(ValueError, match=r"seed gradient.*\(2, 3\)"):
        y.backward()
    with pytest.raises(ValueError, match=r"seed gradient has shape \(3,\).*\(2, 3\)"):
        y.backward(np.ones(3))


@pytest.mark.parametrize("call, message", [
    (lambda: ad.matmul(np.ones((3, 4)), np.ones((5, 6))), r"matmul: inner dimensions differ: \(3, 4\) @ \(5, 6\)"),
    (lambda: ad.matmul(np.ones(4), np.ones((4, 2))), r"matmul: operands must be at least 2-D"),
    (lambda: ad.add(np.ones((2, 3)), np.ones(4)), r"add: shapes \(2, 3\) and \(4,\) do not broadcast"),
    (lambda: ad.reshape(np.ones((2, 3)), (4, 2)), r"reshape: cannot reshape \(2, 3\) \(6 elements\) into \(4, 2\)"),
    (lambda: ad.sum(np.ones((2, 3)), axis=2), r"sum: axis 2 is out of range for a 2-D input"),
    (lambda: ad.transpose(np.ones((2, 3)), (0, 0)), r"transpose: axes \(0, 0\) are not a permutation"),
    (lambda: ad.broadcast_to(np.ones(3), (3, 2)), r"broadcast_to: .*\(3,\) .*\(3, 2\)"),
    (lambda: ad.linear(np.ones((2, 3)), np.ones((3, 4)), np.ones(3)), r"linear: bias must have shape \(4,\)"),
    (lambda: ad.cross_entropy(np.ones((4, 3)), np.zeros(5, int)), r"cross_entropy: expected logits \(N, C\)"),
    (lambda: ad.cross_entropy(np.ones((2, 3)), np.array([0, 3])), r"one_hot: labels must lie in \[0, 3\)"),
    (lambda: ad.layer_norm(np.ones((2, 3)), np.ones(2), np.ones(3)), r"layer_norm: expected x \(\.\.\., D\)"),
    (lambda: ad.sum(Tensor(np.ones(2))).backward(), r"backward: the output does not depend on .*requires_grad"),
])
def test_bad_inputs_raise_value_errors_naming_op_and_shapes(call, message):
    with pytest.raises(ValueError, match=message):
        call()


@pytest.mark.parametrize("call, message", [
    (lambda: Tensor(np.array([1, 2]), requires_grad=True), r"requires_grad=True needs a floating-point dtype"),
    (lambda: ad.cross_entropy(np.ones((2, 3)), np.array([0.0, 1.0])), r"labels must be integers"),
    (lambda: ad.placeholder((2,), "x").numpy(), r"symbolic"),
])
def test_bad_types_raise_type_errors(call, message):
    with pytest.raises(TypeError, match=message):
        call()

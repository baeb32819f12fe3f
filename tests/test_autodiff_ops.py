"""Every op's VJP (reverse mode) and JVP (forward mode) against central differences, in float64, on
random inputs drawn by Hypothesis (shapes, broadcasting, axes) and numpy (values, from a drawn seed).
Then second derivatives: the gradient function of every op, itself checked against differences of gradients.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import mlsys_lib.autodiff as ad

CHECK = settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
seeds = st.integers(0, 2**32 - 1)
shapes = hnp.array_shapes(min_dims=0, max_dims=3, max_side=3)
nonscalar_shapes = hnp.array_shapes(min_dims=1, max_dims=3, max_side=3)
broadcastable_pairs = hnp.mutually_broadcastable_shapes(num_shapes=2, max_dims=3, max_side=3)


def normal(rng, shape):
    return rng.standard_normal(shape)


def positive(rng, shape):
    return rng.uniform(0.5, 2.0, shape)


def away_from_zero(rng, shape):
    """Values with |x| >= 0.3: clear of relu's kink and of division by ~0."""
    return rng.choice([-1.0, 1.0], shape) * rng.uniform(0.3, 2.0, shape)


BINARY = {
    "add": (ad.add, normal, normal),
    "sub": (ad.sub, normal, normal),
    "mul": (ad.mul, normal, normal),
    "div": (ad.div, normal, away_from_zero),
    "pow_tensor": (ad.power, positive, normal),
}

UNARY = {
    "neg": (ad.neg, normal),
    "exp": (ad.exp, normal),
    "log": (ad.log, positive),
    "tanh": (ad.tanh, normal),
    "sigmoid": (ad.sigmoid, normal),
    "relu": (ad.relu, away_from_zero),
    "gelu": (ad.gelu, normal),
    "pow_int": (lambda x: x ** 3, normal),
    "pow_fraction": (lambda x: x ** 0.5, positive),
    "pow_negative": (lambda x: x ** -2, away_from_zero),
}


@pytest.mark.parametrize("name", BINARY)
@CHECK
@given(pair=broadcastable_pairs, seed=seeds)
def test_binary_elementwise_with_broadcasting(name, pair, seed):
    f, make_x, make_y = BINARY[name]
    rng = np.random.default_rng(seed)
    x_shape, y_shape = pair.input_shapes
    assert ad.gradcheck(f, [make_x(rng, x_shape), make_y(rng, y_shape)])


@pytest.mark.parametrize("name", UNARY)
@CHECK
@given(shape=shapes, seed=seeds)
def test_unary_elementwise(name, shape, seed):
    f, make = UNARY[name]
    assert ad.gradcheck(f, [make(np.random.default_rng(seed), shape)])


@pytest.mark.parametrize("reduce", [ad.sum, ad.mean, ad.max])
@CHECK
@given(data=st.data(), shape=nonscalar_shapes, keepdims=st.booleans(), seed=seeds)
def test_reductions_over_random_axes(reduce, data, shape, keepdims, seed):
    axis = data.draw(st.none() | st.lists(st.integers(-len(shape), len(shape) - 1), min_size=1, max_size=len(shape),
                                          unique_by=lambda a: a % len(shape)))
    x = np.random.default_rng(seed).standard_normal(shape)  # distinct values: no ties for max
    assert ad.gradcheck(lambda t: reduce(t, axis=axis, keepdims=keepdims), [x])


@CHECK
@given(data=st.data(), shape=nonscalar_shapes, seed=seeds)
def test_transpose(data, shape, seed):
    axes = data.draw(st.permutations(range(len(shape))))
    assert ad.gradcheck(lambda t: ad.transpose(t, axes), [np.random.default_rng(seed).standard_normal(shape)])


@CHECK
@given(data=st.data(), shape=nonscalar_shapes, seed=seeds)
def test_reshape(data, shape, seed):
    target = data.draw(st.sampled_from([(-1,), (1, -1), shape[::-1], (int(np.prod(shape)), 1)]))
    assert ad.gradcheck(lambda t: ad.reshape(t, target), [np.random.default_rng(seed).standard_normal(shape)])


@CHECK
@given(pair=broadcastable_pairs, seed=seeds)
def test_broadcast_to_and_sum_to_are_adjoint(pair, seed):
    small, big = pair.input_shapes[0], pair.result_shape
    rng = np.random.default_rng(seed)
    assert ad.gradcheck(lambda t: ad.broadcast_to(t, big), [rng.standard_normal(small)])
    assert ad.gradcheck(lambda t: ad.sum_to(t, small), [rng.standard_normal(big)])


@CHECK
@given(batches=hnp.mutually_broadcastable_shapes(num_shapes=2, max_dims=2, max_side=2),
       m=st.integers(1, 3), k=st.integers(1, 3), n=st.integers(1, 3), seed=seeds)
def test_matmul_2d_and_batched(batches, m, k, n, seed):
    rng = np.random.default_rng(seed)
    a = rng.standard_normal(batches.input_shapes[0] + (m, k))
    b = rng.standard_normal(batches.input_shapes[1] + (k, n))
    assert ad.gradcheck(ad.matmul, [a, b])


@CHECK
@given(batch=hnp.array_shapes(min_dims=1, max_dims=2, max_side=3), n_in=st.integers(1, 3),
       n_out=st.integers(1, 3), seed=seeds)
def test_linear(batch, n_in, n_out, seed):
    rng = np.random.default_rng(seed)
    x, w, b = rng.standard_normal(batch + (n_in,)), rng.standard_normal((n_in, n_out)), rng.standard_normal(n_out)
    assert ad.gradcheck(ad.linear, [x, w, b])


@pytest.mark.parametrize("op", [ad.softmax, ad.log_softmax])
@CHECK
@given(data=st.data(), shape=nonscalar_shapes, seed=seeds)
def test_softmax_and_log_softmax(op, data, shape, seed):
    axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    x = 3 * np.random.default_rng(seed).standard_normal(shape)
    assert ad.gradcheck(lambda t: op(t, axis=axis), [x])


@CHECK
@given(n=st.integers(1, 4), c=st.integers(1, 4), seed=seeds)
def test_cross_entropy(n, c, seed):
    rng = np.random.default_rng(seed)
    assert ad.gradcheck(ad.cross_entropy, [2 * rng.standard_normal((n, c)), rng.integers(0, c, n)])


@CHECK
@given(lead=hnp.array_shapes(min_dims=0, max_dims=2, max_side=3), d=st.integers(2, 4), seed=seeds)
def test_layer_norm(lead, d, seed):
    rng = np.random.default_rng(seed)
    x, w, b = rng.standard_normal(lead + (d,)), rng.standard_normal(d), rng.standard_normal(d)
    assert ad.gradcheck(lambda *t: ad.layer_norm(*t, eps=1e-3), [x, w, b])


# -- second derivatives --------------------------------------------------------------------------

_rng = np.random.default_rng(7)
SECOND_ORDER = {
    "add": (lambda x, y: x + y, [_rng.standard_normal((2, 3)), _rng.standard_normal(3)]),
    "sub": (lambda x, y: x - y, [_rng.standard_normal((2, 3)), _rng.standard_normal(3)]),
    "mul": (lambda x, y: x * y, [_rng.standard_normal((2, 3)), _rng.standard_normal((2, 1))]),
    "div": (lambda x, y: x / y, [_rng.standard_normal((2, 3)), _rng.uniform(0.5, 2, 3)]),
    "pow_tensor": (ad.power, [_rng.uniform(0.5, 2, (2, 3)), _rng.standard_normal(3)]),
    "pow_scalar": (lambda x: x ** 3, [_rng.standard_normal((2, 3))]),
    "exp": (ad.exp, [_rng.standard_normal(4)]),
    "log": (ad.log, [_rng.uniform(0.5, 2, 4)]),
    "tanh": (ad.tanh, [_rng.standard_normal(4)]),
    "sigmoid": (ad.sigmoid, [_rng.standard_normal(4)]),
    "relu": (lambda x: ad.relu(x) * x, [np.array([-1.5, -0.4, 0.6, 1.2])]),
    "gelu": (ad.gelu, [_rng.standard_normal(4)]),
    "matmul": (lambda a, b: ad.matmul(a, b) ** 2, [_rng.standard_normal((2, 2, 3)), _rng.standard_normal((3, 2))]),
    "linear": (lambda x, w, b: ad.tanh(ad.linear(x, w, b)), [_rng.standard_normal((2, 3)),
                                                            _rng.standard_normal((3, 2)), _rng.standard_normal(2)]),
    "transpose": (lambda x: ad.transpose(x) ** 2, [_rng.standard_normal((2, 3))]),
    "reshape": (lambda x: ad.reshape(x, (3, 2)) ** 2, [_rng.standard_normal((2, 3))]),
    "broadcast_to": (lambda x: ad.broadcast_to(x, (2, 3)) ** 2, [_rng.standard_normal(3)]),
    "sum": (lambda x: ad.sum(x * x, axis=0), [_rng.standard_normal((2, 3))]),
    "mean": (lambda x: ad.mean(x, axis=1) ** 2, [_rng.standard_normal((2, 3))]),
    "max": (lambda x: ad.max(x * x, axis=1), [_rng.standard_normal((2, 3))]),
    "softmax": (ad.softmax, [_rng.standard_normal((2, 3))]),
    "log_softmax": (ad.log_softmax, [_rng.standard_normal((2, 3))]),
    "cross_entropy": (ad.cross_entropy, [_rng.standard_normal((3, 4)), np.array([0, 3, 1])]),
    "layer_norm": (ad.layer_norm, [_rng.standard_normal((2, 3)), _rng.standard_normal(3), _rng.standard_normal(3)]),
}


@pytest.mark.parametrize("name", SECOND_ORDER)
def test_gradient_of_every_op_is_differentiable(name):
    """x ↦ ∂(u·f(x, ...))/∂x, built with create_graph=True, checked like any function: its VJP (reverse over
    reverse) and JVP (forward over reverse) are second derivatives, compared with differences of gradients."""
    f, inputs = SECOND_ORDER[name]
    u = np.random.default_rng(1).standard_normal(np.shape(f(*[ad.Tensor(a) for a in inputs])))

    def gradient(*xs):
        return ad.grad(f(*xs), xs[0], grad_outputs=u, create_graph=True)[0]

    assert ad.gradcheck(gradient, inputs, atol=1e-5, rtol=1e-4)

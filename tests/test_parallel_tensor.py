"""Tensor parallelism: Megatron layers equal the single-device model; 2 + 2 all-reduces per block."""

from __future__ import annotations

import numpy as np
import pytest

from mlsys_lib.autodiff import Tensor, grad, linear, matmul, softmax
from mlsys_lib.comm import launch
from mlsys_lib.parallel import (ColumnParallelLinear, MegatronMLP, ParallelBlock, ParallelSelfAttention,
                                RowParallelLinear, TensorParallel)
from test_parallel_runner import gelu, gelu_grad

H, HEADS = 8, 4


def weights(seed):
    rng = np.random.default_rng(seed)
    w = {name: 0.3 * rng.standard_normal(shape) for name, shape in
         [("q", (H, H)), ("k", (H, H)), ("v", (H, H)), ("o", (H, H)), ("A", (H, 4 * H)), ("a", (4 * H,)),
          ("B", (4 * H, H)), ("b", (H,))]}
    x, dy = rng.standard_normal((2, 3, H)), rng.standard_normal((2, 3, H))
    return w, x, dy


def rank_job(g, w, x, dy):
    """Per rank: MLP, column, row and block outputs, gradients and all-reduce counts; and the errors."""
    tp = TensorParallel(g)
    out = {}

    def run(name, module, inp, seed):
        tp.reset_count()
        xt = Tensor(inp, requires_grad=True)
        y = module(xt)
        grads = grad(y, [xt] + module.parameters(), grad_outputs=seed)
        out[name] = (y.data, [t.data for t in grads], dict(tp.all_reduces))

    run("mlp", MegatronMLP(w["A"], w["a"], w["B"], w["b"], tp), x, dy)
    run("column", ColumnParallelLinear(w["A"], w["a"], tp), x, dy[..., :1].repeat(4 * H // g.world_size, -1))
    run("row", RowParallelLinear(w["B"], w["b"], tp), np.array_split(np.tile(x, 4), g.world_size, -1)[g.rank], dy)
    attention = ParallelSelfAttention(w["q"], w["k"], w["v"], w["o"], HEADS, tp)
    run("block", ParallelBlock(attention, MegatronMLP(w["A"], w["a"], w["B"], w["b"], tp)), x, dy)
    errors = []
    for bad in (lambda: ColumnParallelLinear(np.zeros((4, 6)), None, tp),
                lambda: ParallelSelfAttention(*[np.zeros((6, 6))] * 4, 6, tp)):
        try:
            bad()
        except ValueError as error:
            errors.append(str(error))
    return out, errors


def attention_block_reference(w, x, dy):
    """The single-device block on autodiff: output and gradients of x, Wq, Wk, Wv, Wo, A, a, B, b."""
    xt = Tensor(x, requires_grad=True)
    P = {k: Tensor(v, requires_grad=True) for k, v in w.items()}
    b, s, d = x.shape[0], x.shape[1], H // HEADS

    def heads(W):
        return matmul(xt, W).reshape(b, s, HEADS, d).transpose((0, 2, 1, 3))
    q, k, v = heads(P["q"]), heads(P["k"]), heads(P["v"])
    scores = softmax(matmul(q, k.transpose((0, 1, 3, 2))) / np.sqrt(d), axis=-1)
    h = xt + matmul(matmul(scores, v).transpose((0, 2, 1, 3)).reshape(b, s, H), P["o"])
    z = linear(h, P["A"], P["a"])
    y = h + linear(0.5 * z * (1.0 + (np.sqrt(2 / np.pi) * (z + 0.044715 * z ** 3)).tanh()), P["B"], P["b"])
    return y.data, dict(zip(["x", *P], [t.data for t in grad(y, [xt, *P.values()], grad_outputs=dy)]))


@pytest.mark.parametrize("t", [2, 4])
def test_megatron_layers_equal_the_single_device_model(t):
    w, x, dy = weights(seed=t)
    per_rank = launch(rank_job, t, args=(w, x, dy))
    outs = [out for out, _ in per_rank]
    close = dict(rtol=1e-10, atol=1e-12)

    # MLP, by hand in numpy: y = gelu(x A + a) B + b.
    z = x @ w["A"] + w["a"]
    y = gelu(z) @ w["B"] + w["b"]
    dz = (dy @ w["B"].T) * gelu_grad(z)
    want = {"x": dz @ w["A"].T, "A": np.einsum("bsi,bsj->ij", x, dz), "a": dz.sum((0, 1)),
            "B": np.einsum("bsi,bsj->ij", gelu(z), dy), "b": dy.sum((0, 1))}
    for o in outs:
        got_y, (gx, gA, ga, gB, gb), count = o["mlp"]
        np.testing.assert_allclose(got_y, y, **close)
        np.testing.assert_allclose(gx, want["x"], **close)  # f's all-reduce: the full input gradient everywhere
        np.testing.assert_allclose(gb, want["b"], **close)
        assert count == {"forward": 1, "backward": 1}
    np.testing.assert_allclose(np.concatenate([o["mlp"][1][1] for o in outs], axis=1), want["A"], **close)
    np.testing.assert_allclose(np.concatenate([o["mlp"][1][2] for o in outs]), want["a"], **close)
    np.testing.assert_allclose(np.concatenate([o["mlp"][1][3] for o in outs], axis=0), want["B"], **close)

    # Column alone: each rank its columns of x A + a; no all-reduce forward, one backward.
    columns = np.concatenate([o["column"][0] for o in outs], axis=-1)
    np.testing.assert_allclose(columns, x @ w["A"] + w["a"], **close)
    assert all(o["column"][2] == {"forward": 0, "backward": 1} for o in outs)
    # Row alone: input split by columns, the whole output everywhere; one all-reduce forward, none backward.
    for o in outs:
        np.testing.assert_allclose(o["row"][0], np.tile(x, 4) @ w["B"] + w["b"], **close)
        assert o["row"][2] == {"forward": 1, "backward": 0}

    # Attention + MLP block: Megatron's 2 all-reduces forward and 2 backward.
    y, want = attention_block_reference(w, x, dy)
    for o in outs:
        got_y, grads, count = o["block"]
        np.testing.assert_allclose(got_y, y, **close)
        np.testing.assert_allclose(grads[0], want["x"], **close)
        assert count == {"forward": 2, "backward": 2}
    for i, (name, axis) in enumerate([("q", 1), ("k", 1), ("v", 1), ("o", 0)], start=1):
        np.testing.assert_allclose(np.concatenate([o["block"][1][i] for o in outs], axis=axis), want[name], **close)

    errors = per_rank[0][1]
    assert any("out_features = 6 must be divisible by the tensor-parallel size" in e for e in errors) == (6 % t != 0)
    assert any("num_heads = 6 must be divisible" in e for e in errors) == (6 % t != 0)


def by_hand_job(g, x, A, a, B, b, dY):
    """The numpy layers on this rank's slices; each result with the number of all-reduces it made."""
    from mlsys_lib.parallel import tensor

    t, r = g.world_size, g.rank
    calls = []

    class Counted:
        def all_reduce(self, array):
            calls.append(array.shape)
            return g.all_reduce(array)

    def run(fn, *args):
        before = len(calls)
        return fn(Counted(), *args), len(calls) - before
    A_r, a_r, B_r = np.split(A, t, axis=1)[r], np.split(a, t)[r], np.split(B, t, axis=0)[r]
    X_r, dY_r = np.split(x @ A, t, axis=1)[r], np.split(dY, t, axis=1)[r]
    return (run(tensor.column_parallel_forward, x, A_r, a_r), run(tensor.column_parallel_backward, x, A_r, dY_r),
            run(tensor.row_parallel_forward, X_r, B_r, b), run(tensor.row_parallel_backward, X_r, B_r, dY[:, :H]))


@pytest.mark.parametrize("t", [2, 4])
def test_layers_by_hand_on_numpy_arrays(t):
    rng = np.random.default_rng(80 + t)
    x, A, a = rng.standard_normal((5, H)), rng.standard_normal((H, 4 * H)), rng.standard_normal(4 * H)
    B, b, dY = rng.standard_normal((4 * H, H)), rng.standard_normal(H), rng.standard_normal((5, 4 * H))
    out = launch(by_hand_job, t, args=(x, A, a, B, b, dY))
    close = dict(rtol=1e-10, atol=1e-12)
    X, dY_row = x @ A, dY[:, :H]
    np.testing.assert_allclose(np.concatenate([o[0][0] for o in out], axis=1), x @ A + a, **close)
    for o in out:
        (fwd, n_fwd), ((dx, _, _), n_bwd), (y, n_row), (_, n_row_bwd) = o
        np.testing.assert_allclose(dx, dY @ A.T, **close)  # whole, on every rank
        np.testing.assert_allclose(y, X @ B + b, **close)
        assert (n_fwd, n_bwd, n_row, n_row_bwd) == (0, 1, 1, 0)
    np.testing.assert_allclose(np.concatenate([o[1][0][1] for o in out], axis=1), x.T @ dY, **close)
    np.testing.assert_allclose(np.concatenate([o[1][0][2] for o in out]), dY.sum(axis=0), **close)
    np.testing.assert_allclose(np.concatenate([o[3][0][0] for o in out], axis=1), dY_row @ B.T, **close)
    np.testing.assert_allclose(np.concatenate([o[3][0][1] for o in out], axis=0), X.T @ dY_row, **close)
    for o in out:
        np.testing.assert_allclose(o[3][0][2], dY_row.sum(axis=0), **close)

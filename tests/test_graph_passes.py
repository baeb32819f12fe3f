"""Graph passes: each preserves outputs on random graphs (Hypothesis), and does its own job correctly."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mlsys_lib.graph import (INFERENCE_PASSES, Graph, GraphBuilder, PassManager, Rule, constant_fold, cse, dce,
                             evaluate, fold_conv_batch_norm, format_graph, fuse_elementwise, random_graph, rewrite,
                             simplify, traffic)
from mlsys_lib.graph.ops import batch_norm_scale_shift


def random_feeds(graph: Graph, seed: int) -> dict[str, np.ndarray]:
    """Inputs ±10**u, u uniform in [-3, 3] (the verifier's domain): near 0, around ±1 and large, both signs."""
    rng = np.random.default_rng(seed)
    return {name: rng.choice([-1.0, 1.0], graph[name].shape) * 10.0 ** rng.uniform(-3.0, 3.0, graph[name].shape)
            for name in graph.inputs}


def assert_same_outputs(before: Graph, after: Graph, seed: int = 0) -> None:
    """Equal outputs up to rounding: rewrites such as (x + 3) + 4 -> x + 7 round differently, by an ulp or so.

    Inputs up to 1000 overflow exp (in float32 beyond 88.7): the same inf or nan on both sides is equal.
    """
    feeds = random_feeds(before, seed)
    assert len(before.outputs) == len(after.outputs)
    with np.errstate(over="ignore", invalid="ignore"):
        outputs = zip(evaluate(before, feeds), evaluate(after, feeds))
    for want, got in outputs:
        assert got.shape == want.shape and got.dtype == want.dtype
        tolerance = 1e-9 if want.dtype == np.float64 else 1e-5
        np.testing.assert_allclose(got, want, rtol=tolerance, atol=tolerance)


def revalidated(graph: Graph) -> Graph:
    """The graph rebuilt with every shape rule re-run (passes build their results without that check)."""
    return Graph(list(graph), graph.outputs)


@pytest.mark.parametrize("one_pass", INFERENCE_PASSES, ids=lambda p: p.__name__)
@settings(max_examples=30, deadline=None)
@given(n_nodes=st.integers(5, 90), seed=st.integers(0, 2**32 - 1))
def test_every_pass_preserves_outputs_on_random_graphs(one_pass, n_nodes, seed):
    graph = random_graph(n_nodes, seed)
    listing = format_graph(graph)
    result = one_pass(graph)
    assert format_graph(graph) == listing  # the input graph is untouched
    assert_same_outputs(graph, revalidated(result), seed)


@settings(max_examples=25, deadline=None)
@given(n_nodes=st.integers(5, 150), seed=st.integers(0, 2**32 - 1))
def test_pipeline_reaches_a_fixed_point_and_preserves_outputs(n_nodes, seed):
    graph = random_graph(n_nodes, seed)
    manager = PassManager()
    result = manager.run(graph)
    assert_same_outputs(graph, revalidated(result), seed)
    assert all(p(result) is result for p in INFERENCE_PASSES)  # a fixed point: no pass changes it
    assert {node.op for node in result}.isdisjoint({"batch_norm"})
    assert len(result) <= len(graph)


def test_constant_folding_reassociates_the_lectures_example():
    b = GraphBuilder()
    x = b.input("x", (2, 3))
    y = b.add(b.add(x, b.const(3.0)), b.const(4.0), name="y")
    folded = dce(constant_fold(b.build([y])))
    assert [(n.op, n.inputs) for n in folded if n.op != "const"] == [("input", ()), ("add", ("x", "c"))]
    assert folded["c"].attrs["value"] == 7.0
    assert_same_outputs(b.build([y]), folded)


def test_constant_folding_evaluates_constant_subgraphs():
    b = GraphBuilder()
    x = b.input("x", (2, 2))
    m = b.matmul(b.const([[1.0, 2.0], [3.0, 4.0]]), b.transpose(b.const([[1.0, 0.0], [1.0, 1.0]])), name="m")
    y = b.mul(x, b.exp(b.neg(m)), name="y")
    folded = dce(constant_fold(b.build([y])))
    assert [n.op for n in folded] == ["input", "const", "mul"]
    assert_same_outputs(b.build([y]), folded)


def test_simplify_removes_identities_and_keeps_broadcasting_ones():
    b = GraphBuilder()
    x = b.input("x", (3,))
    y = b.neg(b.neg(b.mul(b.add(x, b.const(0.0)), b.const(1.0))), name="y")
    widened = b.add(x, b.const(np.zeros((2, 3))), name="widened")  # x + 0 here broadcasts x to (2, 3)
    result = dce(simplify(b.build([y, widened])))
    assert result.outputs[0] == "x"
    assert result["widened"].op == "add"
    assert_same_outputs(b.build([y, widened]), result)


def test_cse_merges_equal_ops_but_not_different_attributes():
    b = GraphBuilder()
    x, z = b.input("x", (3, 3)), b.input("z", (3, 3))
    same = [b.add(x, z), b.add(z, x)]  # commutative: equal
    ordered = [b.sub(x, z), b.sub(z, x)]  # not commutative: different
    perms = [b.transpose(x, perm=(1, 0)), b.transpose(x, perm=(0, 1))]  # different attributes
    shapes = [b.reshape(x, shape=(9,)), b.reshape(x, shape=(9, 1))]
    consts = [b.const(2.0), b.const(2.0), b.const(3.0)]
    outputs = same + ordered + perms + shapes + [b.mul(x, c) for c in consts]
    graph = b.build(outputs)
    result = cse(graph)
    out = result.outputs
    assert out[0] == out[1]
    assert len({out[2], out[3]}) == 2 and len({out[4], out[5]}) == 2 and len({out[6], out[7]}) == 2
    assert out[8] == out[9] != out[10]
    assert_same_outputs(graph, result)


def test_dce_keeps_outputs_and_inputs():
    b = GraphBuilder()
    x = b.input("x", (2,))
    b.input("unused", (2,))
    c = b.const(1.0, name="c")
    b.exp(b.neg(x))  # dead
    y = b.add(x, c, name="y")
    graph = b.build([y, x, c])
    result = dce(graph)
    assert [n.name for n in result] == ["x", "unused", "c", "y"]
    assert result.outputs == ("y", "x", "c")
    assert dce(result) is result
    assert_same_outputs(graph, result)


def conv_bn_graph(bias: bool, seed: int = 0, extra_consumer: bool = False) -> Graph:
    rng = np.random.default_rng(seed)
    b = GraphBuilder()
    x = b.input("x", (2, 3, 8, 8))
    conv_inputs = [x, b.const(rng.standard_normal((4, 3, 3, 3)), name="W")]
    if bias:
        conv_inputs.append(b.const(rng.standard_normal(4), name="B"))
    y = b.conv2d(*conv_inputs, stride=2, padding=1, name="conv")
    stats = [rng.uniform(0.5, 2.0, 4), rng.standard_normal(4), rng.standard_normal(4), rng.uniform(0.2, 3.0, 4)]
    z = b.batch_norm(y, *[b.const(s, name=n) for s, n in zip(stats, ["gamma", "beta", "mean", "var"])], name="bn")
    return b.build([b.relu(z, name="out")] + ([b.exp(y)] if extra_consumer else []))


@pytest.mark.parametrize("bias", [True, False])
def test_conv_batch_norm_folding_matches_unfolded_in_float32(bias):
    graph = conv_bn_graph(bias)
    folded = dce(fold_conv_batch_norm(graph))
    assert [n.op for n in folded if n.op not in ("input", "const")] == ["conv2d", "relu"]
    conv = folded["bn"]
    assert conv.attrs["stride"] == 2 and conv.attrs["padding"] == 1 and conv.dtype == np.float32
    # the lecture's formulas: W2 = W * R (per output channel), B2 = B * R + P
    values = {n: graph[n].attrs["value"].astype(np.float64) for n in ("W", "gamma", "beta", "mean", "var")}
    scale, shift = batch_norm_scale_shift(values["gamma"], values["beta"], values["mean"], values["var"], 1e-5)
    bias_value = graph["B"].attrs["value"] if bias else np.zeros(4)
    w2, b2 = (folded[name].attrs["value"] for name in conv.inputs[1:])
    np.testing.assert_allclose(w2, values["W"] * scale[:, None, None, None], rtol=1e-6)
    np.testing.assert_allclose(b2, bias_value * scale + shift, rtol=1e-5, atol=1e-6)
    feeds = {"x": np.random.default_rng(1).standard_normal((2, 3, 8, 8)).astype(np.float32)}
    (want,), (got,) = evaluate(graph, feeds), evaluate(folded, feeds)
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())


def test_conv_batch_norm_folding_skips_a_conv_used_elsewhere():
    graph = conv_bn_graph(bias=True, extra_consumer=True)
    assert fold_conv_batch_norm(graph) is graph


def test_fusion_counts_bytes_and_raises_intensity():
    n = 1000
    b = GraphBuilder()
    x = b.input("x", (n,))
    y = b.relu(b.exp(b.neg(b.neg(x))), name="y")  # four unary float32 ops
    graph = b.build([y])
    fused = fuse_elementwise(graph)
    assert [node.op for node in fused] == ["input", "fused"]
    assert traffic(graph) == (4 * n, 4 * 8 * n)  # each op reads 4n bytes and writes 4n bytes
    assert traffic(fused) == (4 * n, 8 * n)  # read x once, write y once
    assert traffic(graph)[0] / traffic(graph)[1] == pytest.approx(1 / 8)
    assert traffic(fused)[0] / traffic(fused)[1] == pytest.approx(1 / 2)
    assert_same_outputs(graph, fused)


def test_fusion_stops_at_values_needed_elsewhere():
    b = GraphBuilder()
    x, z = b.input("x", (4, 4)), b.input("z", (4, 4))
    shared = b.exp(x, name="shared")  # two consumers: must be written
    out1 = b.neg(b.relu(b.add(shared, z)), name="out1")
    mid = b.mul(shared, z, name="mid")  # a graph output: must be written
    out2 = b.neg(b.matmul(b.relu(mid, name="r"), z, name="m"), name="out2")  # matmul is no elementwise op
    graph = b.build([out1, mid, out2])
    fused = fuse_elementwise(graph)
    assert {n.name: n.op for n in fused if n.op not in ("input", "const")} == {
        "shared": "exp", "out1": "fused", "mid": "mul", "r": "relu", "m": "matmul", "out2": "neg"}
    assert fused["out1"].inputs == ("shared", "z")
    assert_same_outputs(graph, fused)


def test_pass_manager_reports_and_stops_oscillation():
    graph = random_graph(60, seed=3)
    manager = PassManager()
    manager.run(graph)
    report = manager.report()
    assert "constant_fold" in report and "rounds" in report
    undo_simplify = lambda g: rewrite(g, [Rule.parse("neg(x) -> sub(0, x)")])  # noqa: E731
    b = GraphBuilder()
    y = b.neg(b.input("x", (2,)))
    with pytest.raises(RuntimeError, match="no fixed point after 5 rounds"):
        PassManager([simplify, undo_simplify], max_rounds=5).run(b.build([y]))

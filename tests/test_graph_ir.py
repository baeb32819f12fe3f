"""Graph IR: building, validation errors that name the node, evaluation, printing, drawing, autodiff capture."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import mlsys_lib.autodiff as ad
from mlsys_lib.graph import (Graph, GraphBuilder, conv2d_reference, draw_graph, evaluate, format_graph,
                             from_autodiff, make_node)


def small_graph():
    b = GraphBuilder()
    x = b.input("x", (4, 3))
    w = b.input("w", (3, 2))
    h = b.relu(b.matmul(x, w, name="h0"), name="h")
    y = b.add(h, b.const(0.5, name="half"), name="y")
    return b.build([y, h])


def test_builder_infers_shapes_and_evaluates():
    g = small_graph()
    assert g["y"].shape == (4, 2) and g["y"].dtype == np.float32
    assert g.inputs == ("x", "w") and g.outputs == ("y", "h") and g.num_ops == 3
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal((4, 3)), rng.standard_normal((3, 2))
    y, h = evaluate(g, {"x": x, "w": w})
    expected = np.maximum(x.astype(np.float32) @ w.astype(np.float32), 0)
    np.testing.assert_allclose(h, expected, rtol=1e-6)
    np.testing.assert_allclose(y, expected + 0.5, rtol=1e-6)
    assert y.dtype == np.float32


def test_graph_is_immutable():
    g = small_graph()
    with pytest.raises(TypeError):
        g.nodes["y"] = g["x"]
    with pytest.raises(dataclasses.FrozenInstanceError):
        g["y"].op = "sub"
    with pytest.raises(ValueError):
        g["half"].attrs["value"][...] = 3.0  # constants are read-only arrays
    with pytest.raises(AttributeError):
        g.outputs = ("x",)


def test_nodes_given_in_any_order_are_sorted_topologically():
    g = small_graph()
    shuffled = Graph(reversed(list(g)), g.outputs)
    order = list(shuffled.nodes)
    for node in shuffled:
        assert all(order.index(i) < order.index(node.name) for i in node.inputs)


def test_cycle_is_reported_with_the_nodes_names():
    x = make_node("x", "input", shape=(3,), dtype=np.float32)
    a = make_node("a", "neg", [x])
    b = make_node("b", "exp", [a])
    a_reads_b = dataclasses.replace(a, inputs=("b",))
    with pytest.raises(ValueError, match=r"cycle.*'?(a|b)'? <- '?(a|b)"):
        Graph([x, a_reads_b, b], ["b"])


def test_dangling_input_names_node_and_missing_input():
    x = make_node("x", "input", shape=(3,), dtype=np.float32)
    y = dataclasses.replace(make_node("y", "neg", [x]), inputs=("ghost",))
    with pytest.raises(ValueError, match=r"node 'y'.*'ghost'.*dangling"):
        Graph([x, y], ["y"])


def test_shape_mismatch_names_the_node():
    b = GraphBuilder()
    x, v = b.input("x", (3, 4)), b.input("v", (5,))
    with pytest.raises(ValueError, match=r"node 'bad' \(add\).*\(3, 4\).*\(5,\)"):
        b.add(x, v, name="bad")
    with pytest.raises(ValueError, match=r"node 'mm' \(matmul\): inner dimensions"):
        b.matmul(x, x, name="mm")
    with pytest.raises(ValueError, match=r"node 'conv' \(conv2d\)"):
        b.conv2d(b.input("img", (1, 3, 8, 8)), b.const(np.ones((2, 4, 3, 3))), name="conv")


def test_declared_shape_that_disagrees_with_inputs_names_the_node():
    x = make_node("x", "input", shape=(3,), dtype=np.float32)
    y = dataclasses.replace(make_node("y", "neg", [x]), shape=(4,))
    with pytest.raises(ValueError, match=r"node 'y' \(neg\): says float32\[4\] but its inputs give float32\[3\]"):
        Graph([x, y], ["y"])


def test_other_construction_errors_name_the_node():
    x = make_node("x", "input", shape=(3,), dtype=np.float32)
    with pytest.raises(ValueError, match=r"node 'z': unknown op 'frobnicate'"):
        make_node("z", "frobnicate", [x])
    with pytest.raises(ValueError, match=r"node 'z' \(add\): expects 2 inputs, got 1"):
        make_node("z", "add", [x])
    with pytest.raises(ValueError, match=r"node 'z' \(transpose\): unknown attributes \['perms'\]"):
        make_node("z", "transpose", [x], perms=(0,))
    with pytest.raises(ValueError, match=r"node 'z' \(reshape\): missing attributes \['shape'\]"):
        make_node("z", "reshape", [x])
    with pytest.raises(ValueError, match=r"node 'x': two nodes"):
        Graph([x, x], ["x"])
    with pytest.raises(ValueError, match=r"output 'nope'"):
        Graph([x], ["nope"])


def test_evaluate_checks_feeds_by_input_name():
    g = small_graph()
    with pytest.raises(ValueError, match=r"input 'w' .* was not fed"):
        evaluate(g, {"x": np.zeros((4, 3))})
    with pytest.raises(ValueError, match=r"input 'x' expects shape \(4, 3\), was fed shape \(3, 4\)"):
        evaluate(g, {"x": np.zeros((3, 4)), "w": np.zeros((3, 2))})
    with pytest.raises(ValueError, match=r"feed 'h' is not an input"):
        evaluate(g, {"x": np.zeros((4, 3)), "w": np.zeros((3, 2)), "h": np.zeros((4, 2))})


def test_conv2d_reference_matches_direct_loops():
    rng = np.random.default_rng(1)
    x, w, bias = rng.standard_normal((2, 3, 7, 6)), rng.standard_normal((4, 3, 3, 2)), rng.standard_normal(4)
    stride, padding = 2, 1
    xp = np.pad(x, ((0, 0), (0, 0), (padding, padding), (padding, padding)))
    out = conv2d_reference(x, w, bias, stride, padding)
    assert out.shape == (2, 4, (7 + 2 - 3) // 2 + 1, (6 + 2 - 2) // 2 + 1)
    for n, k, i, j in np.ndindex(*out.shape):
        window = xp[n, :, i * stride:i * stride + 3, j * stride:j * stride + 2]
        assert out[n, k, i, j] == pytest.approx(np.sum(window * w[k]) + bias[k])


def test_format_graph_lists_every_node():
    text = format_graph(small_graph())
    assert text.splitlines()[0] == "graph(x: float32[4, 3], w: float32[3, 2]) -> (y, h)"
    assert "  h0: float32[4, 2] = matmul(x, w)" in text
    assert "  half: float32[] = const 0.5" in text
    assert str(small_graph()) == text


def test_draw_graph_makes_a_box_per_node():
    figure = draw_graph(small_graph())
    labels = [t.get_text() for t in figure.axes[0].texts if t.get_text()]  # arrows are empty annotations
    assert len(labels) == 6 and any(label.startswith("h0\nmatmul") for label in labels)


def test_capture_from_autodiff_evaluates_equal_to_executor():
    rng = np.random.default_rng(2)
    x, w1, w2 = ad.placeholder((5, 3), "x"), ad.placeholder((3, 4), "w1"), ad.placeholder((4, 2), "w2")
    bias = rng.standard_normal(4)
    h = ad.relu(ad.linear(x, w1, bias))
    y = ad.exp(-(h @ w2) * 0.5).T.reshape((10,)) / 3.0 - (h @ w2).reshape(-1) + 1.0
    graph = from_autodiff([y, h])
    feeds = {"x": rng.standard_normal((5, 3)), "w1": rng.standard_normal((3, 4)), "w2": rng.standard_normal((4, 2))}
    expected = ad.Executor([y, h]).run({x: feeds["x"], w1: feeds["w1"], w2: feeds["w2"]})
    for got, want in zip(evaluate(graph, feeds), expected):
        np.testing.assert_allclose(got, want, rtol=1e-12)
    assert {node.op for node in graph} >= {"input", "const", "matmul", "add", "relu", "transpose", "reshape"}


def test_capture_names_the_node_with_an_unsupported_op():
    x = ad.placeholder((3,), "x")
    with pytest.raises(ValueError, match=r"node 'tanh_1' has op 'tanh'"):
        from_autodiff(ad.tanh(x))

"""JIT capture with guards: a guard key per call, one compile per key, graph breaks, padding to buckets.

Every result is compared with the same computation written in numpy (the oracle); compile counts are
checked both by the counters and by counting the traces the function itself saw.
"""

from __future__ import annotations

import inspect
import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from mlsys_lib import autodiff as ad
from mlsys_lib.compiler.guards import guard_key, next_power_of_two, output_shapes, padding_problem
from mlsys_lib.compiler.jit import GraphBreak, jit, tracing
from mlsys_lib.graph import Graph, GraphBuilder, evaluate, make_node, random_graph

rng = np.random.default_rng(0)


def data(*shape: int, dtype=np.float64) -> np.ndarray:
    return rng.standard_normal(shape).astype(dtype)


class Traces:
    """A function's calls on traced (symbolic) tensors: the traces, as the function itself sees them."""

    def __init__(self) -> None:
        self.count = 0

    def saw(self, x: ad.Tensor) -> None:
        self.count += x.is_symbolic


# -- guard keys ---------------------------------------------------------------------------------------
@given(st.integers(1, 2**40))
def test_next_power_of_two_is_the_smallest_power_at_least_n(n):
    p = next_power_of_two(n)
    assert p >= n and p & (p - 1) == 0 and (p == 1 or p // 2 < n)


def test_next_power_of_two_small_values_and_bad_input():
    assert [next_power_of_two(n) for n in (0, 1, 2, 3, 4, 5, 8, 9)] == [0, 1, 2, 4, 4, 8, 8, 16]
    with pytest.raises(ValueError, match="n >= 0"):
        next_power_of_two(-1)
    for bad in (2.0, True):
        with pytest.raises(TypeError, match="expects an int"):
            next_power_of_two(bad)


def test_guard_key_buckets_shapes_and_keeps_dtypes():
    x5, x7, x9 = np.zeros((5, 3)), np.zeros((7, 3)), np.zeros((9, 3))
    assert guard_key([x5]) == guard_key([x7]) != guard_key([x9])
    assert guard_key([x5]) == (("array", "float64", (8, 4)),)
    assert guard_key([x5], bucket={"arg0": 0}) == (("array", "float64", (8, 3)),)
    assert guard_key([x5], bucket=False) != guard_key([x7], bucket=False)
    assert guard_key([x5]) != guard_key([x5.astype(np.float32)])
    assert guard_key([ad.Tensor(x5)]) == guard_key([x5])  # a Tensor is keyed by its data
    assert guard_key([np.zeros(0)]) == (("array", "float64", (0,)),)


def test_guard_key_tells_python_values_apart_by_type_and_value():
    keys = [guard_key([v]) for v in (True, 1, 1.0, 0.0, -0.0, "1", None, (1,), [1])]
    assert len(set(keys)) == len(keys)  # True == 1 == 1.0 and 0.0 == -0.0 in Python, yet all differ here
    assert guard_key([float("nan")]) == guard_key([float("nan")])  # although nan != nan
    assert guard_key([], {"b": 1, "a": 2.0}) == guard_key([], {"a": 2.0, "b": 1})
    assert guard_key([1]) != guard_key([], {"arg0": 1})


def test_guard_key_keys_every_numpy_scalar_as_a_0d_array():
    # np.float64 is a Python float too (isinstance(np.float64(2.5), float)), yet it is keyed like np.float32:
    # by dtype and shape, not by value, and refused inside a tuple like any array
    for kind in (np.float64, np.float32, np.int64, np.bool_):
        assert guard_key([kind(2)]) == guard_key([kind(3)]) == guard_key([np.zeros((), kind)])
        assert guard_key([kind(2)]) == (("array", np.dtype(kind).name, ()),)
    assert guard_key([np.float64(2.5)]) != guard_key([2.5])
    for kind in (np.float64, np.float32):
        with pytest.raises(TypeError, match="array inside a tuple"):
            guard_key([(1, kind(2.5))])


@pytest.mark.parametrize("args, message", [
    ([object()], "argument 'arg0' is a object"),
    ([1, (2, np.zeros(3))], r"argument 'arg1'\[1\] is an array inside a tuple"),
    ([[np.float64(1.0)]], r"argument 'arg0'\[0\] is an array inside a tuple"),
    ([np.str_("a")], "dtype <U1"),
    ([np.array(["a"])], "dtype <U1"),
])
def test_guard_key_rejects_what_it_cannot_guard(args, message):
    with pytest.raises(TypeError, match=message):
        guard_key(args)
    with pytest.raises(TypeError, match="mapping from argument names"):
        guard_key([np.zeros(2)], bucket={"arg0": "0"})


# -- compiling per guard ------------------------------------------------------------------------------
def test_one_compile_per_bucket_and_a_new_bucket_recompiles():
    traces = Traces()

    @jit
    def f(x, w):
        traces.saw(x)
        return ad.relu(x @ w) * 2.0 + 1.0

    w = data(3, 4)
    counts = []
    for n in (5, 7, 8):  # one bucket: 8
        x = data(n, 3)
        np.testing.assert_allclose(f(x, w), np.maximum(x @ w, 0) * 2 + 1)
        counts.append(traces.count)
    assert (f.compiles, f.hits) == (1, 2) and counts[0] == counts[-1] > 0  # the hits traced nothing
    seen = traces.count
    x = data(9, 3)  # bucket 16
    np.testing.assert_allclose(f(x, w), np.maximum(x @ w, 0) * 2 + 1)
    assert (f.compiles, f.hits) == (2, 2) and traces.count > seen
    assert all(entry.kind == "graph" for entry in f.cache.values())


def test_exact_shapes_compile_per_length():
    f = jit(lambda x: x * 2.0, bucket=False)
    for n in (5, 7, 7):
        x = data(n)
        np.testing.assert_allclose(f(x), 2 * x)
    assert (f.compiles, f.hits) == (2, 1)


def test_a_dtype_change_recompiles_and_the_dtype_is_kept():
    f = jit(lambda x: x * 3.0 - 1.0)
    x = data(6)
    for dtype in (np.float64, np.float32, np.float32):
        out = f(x.astype(dtype))
        assert out.dtype == dtype
        np.testing.assert_allclose(out, x.astype(dtype) * 3 - 1, rtol=1e-6)
    assert (f.compiles, f.hits) == (2, 1)


def test_a_python_flag_branch_is_baked_in_and_guarded():
    traces = Traces()

    @jit
    def f(x, flag):
        traces.saw(x)
        return ad.exp(x) if flag else -x

    x = data(5)
    counts = []
    for _ in range(2):
        np.testing.assert_allclose(f(x, True), np.exp(x))
        np.testing.assert_allclose(f(x, False), -x)
        counts.append(traces.count)
    assert (f.compiles, f.hits) == (2, 2) and counts[0] == counts[1]
    assert len({tuple(n.op for n in entry.graph) for entry in f.cache.values()}) == 2


def test_true_one_and_one_point_zero_compile_separately_and_nan_hits():
    f = jit(lambda x, c: x * c)
    x = data(4)
    for c in (True, 1, 1.0):
        np.testing.assert_allclose(f(x, c), x * c)
    assert f.compiles == 3
    for _ in range(2):
        assert np.isnan(f(x, float("nan"))).all()
    assert (f.compiles, f.hits) == (4, 1)


def test_keyword_arguments_and_several_outputs():
    @jit
    def f(x, *, shift, as_list=False):
        outputs = (x + shift, x * 2.0)
        return list(outputs) if as_list else outputs

    x = data(3, 2)
    for as_list in (False, True):
        outputs = f(x, shift=1.5, as_list=as_list)
        assert type(outputs) is (list if as_list else tuple) and len(outputs) == 2
        np.testing.assert_allclose(outputs[0], x + 1.5)
        np.testing.assert_allclose(outputs[1], 2 * x)
    f(x, as_list=True, shift=1.5)
    assert (f.compiles, f.hits) == (2, 1)
    assert all(entry.graph.inputs == ("x",) for entry in f.cache.values())  # placeholders named as parameters


def test_the_compiled_graph_went_through_the_passes():
    f = jit(lambda x: ad.exp(x) * 1.0 + 0.0 + ad.exp(x))  # identities and a repeated subexpression
    x = data(6)
    np.testing.assert_allclose(f(x), 2 * np.exp(x))
    entry = next(iter(f.cache.values()))

    def ops(graph: Graph) -> list[str]:  # fused kernels counted by their steps
        return [step for n in graph for step in ([s[0] for s in n.attrs["program"]] if n.op == "fused" else [n.op])]

    assert ops(entry.traced).count("exp") == 2 and "mul" in ops(entry.traced)
    assert sorted(ops(entry.graph)) == ["add", "exp", "input"]


def test_results_never_alias_the_arguments():
    for bucket in (True, False):
        f = jit(lambda x: (x * 1.0, x.T), bucket=bucket)  # the first is x itself once simplified
        x = data(4, 3)
        for out, want in zip(f(x), (x, x.T)):
            np.testing.assert_array_equal(out, want)
            assert not np.shares_memory(out, x)


def test_a_compiled_function_called_inside_a_trace_is_inlined():
    inner = jit(lambda x: x * 2.0)
    outer = jit(lambda x: inner(x) + 1.0)
    x = data(5)
    np.testing.assert_allclose(outer(x), 2 * x + 1)
    assert (inner.compiles, outer.compiles) == (0, 1)


# -- padding to the bucket ----------------------------------------------------------------------------
def test_shapes_that_padding_would_hide_still_raise():
    f = jit(lambda x, y: x + y)
    f(data(8), data(8))
    with pytest.raises(ValueError, match="do not broadcast"):
        f(data(5), data(7))  # one bucket (8), but eager numpy refuses


def test_a_function_reading_a_length_is_compiled_per_shape():
    f = jit(lambda x: x * (1.0 / x.shape[0]))
    for n in (5, 8, 6, 6):
        x = data(n)
        np.testing.assert_allclose(f(x), x / n)
    kinds = sorted(entry.kind for entry in f.cache.values())
    assert kinds == ["graph", "graph", "graph", "per-shape"] and (f.compiles, f.hits) == (3, 1)
    assert "depends on the exact lengths" in next(e.reason for e in f.cache.values() if e.kind == "per-shape")


@pytest.mark.parametrize("fn, oracle, paddable", [
    (lambda x, w: ad.relu(x) @ w, lambda x, w: np.maximum(x, 0) @ w, True),  # padding zero in both operands
    (lambda x, w: ad.exp(x) @ w, lambda x, w: np.exp(x) @ w, False),  # exp(0) = 1 would be summed in
    (lambda x, w: (x @ w).reshape(-1), lambda x, w: (x @ w).reshape(-1), False),
])
def test_contractions_and_reshapes_over_padded_axes(fn, oracle, paddable):
    f = jit(fn)
    w = data(3, 5)
    for n in (5, 6):
        x = data(n, 3)
        np.testing.assert_allclose(f(x, w), oracle(x, w))
    assert (f.compiles == 1) == paddable
    assert ("per-shape" in {e.kind for e in f.cache.values()}) != paddable


def test_bucketing_only_the_batch_axis_fits_closed_over_weights():
    w = data(3, 5)  # closed over: a constant of exact shape, which a padded (8, 4) x would not fit
    every_axis, batch_axis = jit(lambda x: x @ w), jit(lambda x: x @ w, bucket={"x": 0})
    for n in (5, 7):
        x = data(n, 3)
        for f in (every_axis, batch_axis):
            np.testing.assert_allclose(f(x), x @ w)
    assert (every_axis.compiles, batch_axis.compiles) == (2, 1)
    assert "tracing at the bucket's shapes failed" in next(iter(every_axis.cache.values())).reason


def rebuilt(graph: Graph, shapes: dict[str, tuple[int, ...]]) -> Graph:
    """The same graph, without dead nodes, with other input shapes (every other node's shape inferred again)."""
    nodes: dict[str, object] = {}
    live = graph.ancestors(graph.outputs)
    for n in (n for n in graph if n.name in live):
        attrs = dict(n.attrs, shape=shapes[n.name]) if n.op == "input" and n.name in shapes else dict(n.attrs)
        nodes[n.name] = make_node(n.name, n.op, [nodes[i] for i in n.inputs], **attrs)
    return Graph(nodes.values(), graph.outputs)


def test_padding_problem_none_means_padding_gives_the_exact_outputs():
    """On random graphs (elementwise ops, matmuls, transposes, reshapes, convolutions), whenever the check
    accepts padding 3 x 3 inputs to 4 x 4, the padded outputs sliced back equal the exact outputs."""
    accepted = 0
    for seed in range(200):
        graph = random_graph(24, seed=seed, size=4)
        padded = {name: (name != "image",) * len(graph[name].shape) for name in graph.inputs}
        if padding_problem(graph, padded) is not None:
            continue
        accepted += 1
        exact_shapes = {name: (3, 3) for name in graph.inputs if name != "image"}
        exact = rebuilt(graph, exact_shapes)
        feeds = {name: np.random.default_rng(seed).uniform(-1, 1, exact[name].shape) for name in exact.inputs}
        padded_feeds = {name: np.pad(v, [(0, m - n) for n, m in zip(v.shape, graph[name].shape)])
                        for name, v in feeds.items()}
        shapes = output_shapes(graph, {name: v.shape for name, v in feeds.items()})
        for want, got, shape in zip(evaluate(exact, feeds), evaluate(graph, padded_feeds), shapes):
            np.testing.assert_allclose(got[tuple(slice(0, n) for n in shape)], want, rtol=1e-12, atol=1e-12)
    assert accepted >= 100, accepted


def test_padding_problem_names_the_node():
    b = GraphBuilder()
    x = b.input("x", (8, 4))
    y = b.add(x, b.const(np.arange(4.0)), name="y")  # broadcast along the unpadded axis: fine
    z = b.mul(y, b.const(np.arange(8.0).reshape(8, 1)), name="z")  # fixed values along the padded axis
    assert padding_problem(b.build([y]), {"x": (True, False)}) is None
    assert "node 'z' (mul): an operand of shape (8, 1) has fixed values along padded axis 0" == \
        padding_problem(b.build([z]), {"x": (True, False)})


# -- graph breaks -------------------------------------------------------------------------------------
def data_dependent(x):
    if (x * 2.0).max().item() > 0:  # the value of a traced tensor: a graph break
        return x + 1.0
    return x - 1.0


def truthy(x):
    if x:  # bool() of a traced tensor: a graph break
        return x * 3.0
    return x


def line_of(fn, text: str) -> int:
    lines, first = inspect.getsourcelines(fn)
    return first + next(k for k, line in enumerate(lines) if text in line)


@pytest.mark.parametrize("fn, text, asked", [
    (data_dependent, ".item()", "the value of a traced tensor"),
    (truthy, "if x:", "bool() of a traced tensor"),
])
def test_a_graph_break_is_reported_once_with_its_line_and_runs_eagerly(fn, text, asked):
    traces = Traces()

    def traced(x):
        traces.saw(x)
        return fn(x)

    f = jit(traced)
    x = np.array([0.5, -2.0, 1.0])
    want = fn(ad.Tensor(x)).numpy()
    for _ in range(3):
        np.testing.assert_allclose(f(x), want)
    assert (f.compiles, f.hits, traces.count) == (1, 2, 1)
    (reason,) = f.graph_breaks
    assert f"test_compiler_jit.py:{line_of(fn, text)}" in reason and asked in reason and "traced" in reason
    assert next(iter(f.cache.values())).kind == "eager"
    np.testing.assert_allclose(f(-x), fn(ad.Tensor(-x)).numpy())  # eager: the other branch, for the same key
    assert len(f.graph_breaks) == 1


def test_an_op_the_graph_cannot_capture_is_a_graph_break():
    f = jit(lambda x: ad.tanh(x) * 2.0)
    x = data(5)
    np.testing.assert_allclose(f(x), np.tanh(x) * 2)
    assert "op 'tanh' has no graph-IR equivalent" in f.graph_breaks[0]


def test_the_trace_context_is_undone_and_leaves_eager_tensors_alone():
    symbolic, eager = ad.placeholder((2,), "p"), ad.Tensor(np.array([1.0, 2.0]))
    with tracing():
        assert bool(eager) and eager.numpy().sum() == 3.0
        with pytest.raises(GraphBreak):
            bool(symbolic)
        with pytest.raises(GraphBreak):
            np.asarray(symbolic)
    assert "__bool__" not in vars(ad.Tensor) and bool(symbolic)
    with pytest.raises(TypeError, match="symbolic"):
        symbolic.numpy()


# -- bad input ----------------------------------------------------------------------------------------
def test_bad_input_gets_an_error_naming_it():
    with pytest.raises(TypeError, match="expects a function"):
        jit(3)
    with pytest.raises(TypeError, match="bucket must be"):
        jit(lambda x: x, bucket="x")
    with pytest.raises(ValueError, match=r"bucket names \['y'\]"):
        jit(lambda x: x, bucket={"y": 0})
    with pytest.raises(TypeError, match="every pass"):
        jit(lambda x: x, passes=[None])
    f = jit(lambda x, n: x * n)
    with pytest.raises(TypeError, match="argument 'n' is a dict"):
        f(data(2), {})
    with pytest.raises(TypeError, match="must return a Tensor"):
        jit(lambda x: "no")(data(2))
    assert math.isclose(f(np.ones(1), 2)[0], 2.0)


def test_empty_and_zero_dimensional_arrays():
    f = jit(lambda x, s: x * s + 1.0)
    for x, s in [(np.zeros(0), np.float64(2.0)), (np.zeros((0, 3)), np.array(2.0)), (data(5), np.float64(3.0))]:
        out = f(x, s)
        assert out.shape == x.shape
        np.testing.assert_allclose(out, x * s + 1)
    assert f.compiles == 3

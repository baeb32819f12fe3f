"""mlsys_lib.memory: training graphs, liveness against a step-by-step simulation, static planners."""

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mlsys_lib.memory import (Interval, MemoryPlan, OpNode, TrainingGraph, TrainingGraphBuilder, live_bytes,
                              liveness, lower_bound, mlp_graph, plan_best_fit, plan_first_fit, plan_inplace,
                              plan_no_reuse, plot_lifetimes, resnet_graph, transformer_graph, validate_plan)

PLANNERS = [plan_no_reuse, plan_first_fit, plan_best_fit]


def _graphs():
    return {"mlp": mlp_graph([12, 20, 7, 20, 5], batch=3),
            "transformer": transformer_graph(2, batch=2, seq_len=5, hidden=8, heads=2, vocab=11),
            "resnet": resnet_graph(5, batch=2, channels=4, image=8, stages=2)}


def _random_topological_order(graph, rng):
    """Kahn's algorithm, picking a random ready op each time."""
    writer = {t: op.name for op in graph.ops for t in op.outputs}
    deps = {op.name: {writer[t] for t in op.inputs if t in writer} for op in graph.ops}
    order = []
    while deps:
        ready = sorted(name for name, d in deps.items() if not d)
        chosen = ready[rng.integers(len(ready))]
        order.append(chosen)
        del deps[chosen]
        for d in deps.values():
            d.discard(chosen)
    return order


def _simulated_intervals(graph, order):
    """Walk the steps; at each, list the tensors that must be in memory; an interval is min..max of those."""
    ops = {op.name: op for op in graph.ops}
    steps = [ops[name] for name in order]
    defined_at = {t: 0 for t, k in graph.kinds.items() if k in ("input", "parameter")}
    for i, op in enumerate(steps):
        defined_at.update((t, i) for t in op.outputs)
    live_at = {t: [] for t in graph.sizes}
    for i, op in enumerate(steps):
        for t, d in defined_at.items():
            read_later = any(t in later.inputs for later in steps[i:])
            if d == i or (d <= i and (read_later or t in graph.persistent)):
                live_at[t].append(i)
    return {t: (min(s), max(s), graph.sizes[t]) for t, s in live_at.items()}


@pytest.mark.parametrize("name", ["mlp", "transformer", "resnet"])
def test_liveness_matches_a_step_by_step_simulation(name):
    graph = _graphs()[name]
    rng = np.random.default_rng(4)
    for order in [None] + [_random_topological_order(graph, rng) for _ in range(3)]:
        got = {iv.name: (iv.start, iv.end, iv.size) for iv in liveness(graph, order)}
        assert got == _simulated_intervals(graph, order or [op.name for op in graph.ops])


def test_backward_reads_what_forward_saved_and_sums_gradients_of_reused_tensors():
    graph = mlp_graph([4, 6, 3], batch=2)
    assert graph.op("grad_z2").inputs == ("dz2", "a1", "W2")  # dX = dY W^T, dW = X^T dY
    assert graph.op("grad_a1").inputs == ("da1", "a1") and graph.op("grad_a1").inplace == "da1"
    assert graph.sizes["dW2"] == graph.sizes["W2"] == 6 * 3 * 4
    assert {"W1", "dW1", "b2", "db2", "loss"} <= graph.persistent and "a1" not in graph.persistent
    block = transformer_graph(1, batch=1, seq_len=3, hidden=4, heads=1, vocab=5)
    assert not any(t.startswith("dx") for t in block.sizes), "x is a data input: no gradient"
    # the output of the first residual feeds ln2 and the second residual: two partials, then their sum
    acc = block.op("accumulate_dL0.residual1")
    assert set(acc.inputs) == {"dL0.residual1@L0.ln2", "dL0.residual1@L0.residual2"}


def test_a_two_layer_graph_by_hand():
    b = TrainingGraphBuilder(bytes_per_element=4)
    x, W = b.input("x", (2, 3)), b.parameter("W", (3, 3))
    h = b.op("h", [x, W], (2, 3), saves=[x, W])
    b.op("loss", [h, h], (), saves=[h])
    graph = b.build("loss")
    assert [op.name for op in graph.ops] == ["h", "loss", "grad_loss", "grad_h"]
    got = {iv.name: (iv.start, iv.end, iv.size) for iv in liveness(graph)}
    assert got == {"x": (0, 3, 24), "W": (0, 3, 36), "h": (0, 2, 24), "loss": (1, 3, 4),
                   "dh": (2, 3, 24), "dW": (3, 3, 36)}
    assert lower_bound(liveness(graph)) == 24 + 36 + 4 + 24 + 36  # step 3: x, W, loss, dh, dW


@st.composite
def interval_sets(draw):
    n = draw(st.integers(0, 40))
    horizon = draw(st.integers(1, 30))
    out = []
    for i in range(n):
        start = draw(st.integers(0, horizon))
        end = draw(st.integers(start, horizon))
        out.append(Interval(f"t{i}", start, end, draw(st.integers(0, 1000))))
    return out


def _conflicts(plan, intervals):
    """Pairs live at the same step whose byte ranges intersect, by brute force."""
    bad = []
    for a, b in itertools.combinations(intervals, 2):
        same_time = a.start <= b.end and b.start <= a.end
        oa, ob = plan.offsets[a.name], plan.offsets[b.name]
        if same_time and a.size and b.size and oa < ob + b.size and ob < oa + a.size:
            bad.append((a.name, b.name))
    return bad


def _peak(intervals):
    return max((sum(iv.size for iv in intervals if iv.start <= t <= iv.end)
                for t in range(max((iv.end for iv in intervals), default=0) + 1)), default=0)


@settings(max_examples=150, deadline=None)
@given(interval_sets())
def test_planners_are_valid_and_between_the_bound_and_no_reuse(intervals):
    bound = _peak(intervals)
    assert lower_bound(intervals) == bound
    arenas = {}
    for planner in PLANNERS:
        plan = planner(intervals)
        assert _conflicts(plan, intervals) == []
        assert all(0 <= plan.offsets[iv.name] and plan.offsets[iv.name] + iv.size <= plan.arena for iv in intervals)
        validate_plan(plan, intervals)
        assert plan.arena >= bound
        arenas[planner.__name__] = plan.arena
    assert arenas["plan_no_reuse"] == sum(iv.size for iv in intervals)
    assert arenas["plan_best_fit"] <= arenas["plan_no_reuse"] and arenas["plan_first_fit"] <= arenas["plan_no_reuse"]


def test_first_fit_fragments_where_best_fit_does_not():
    # X dies at step 0, Y lives on; first-fit stacks Y above X, so Z (steps 1-2) finds only X's 10-byte
    # hole below Y. Best-fit places Z first, then X beside nothing, then Y above both.
    intervals = [Interval("X", 0, 0, 10), Interval("Y", 0, 2, 10), Interval("Z", 1, 2, 30)]
    first, best = plan_first_fit(intervals), plan_best_fit(intervals)
    assert first.offsets == {"X": 0, "Y": 10, "Z": 20} and first.arena == 50
    assert best.offsets == {"X": 0, "Y": 30, "Z": 0} and best.arena == 40 == lower_bound(intervals)


def test_best_fit_takes_the_smallest_gap_that_fits():
    # while D (steps 3-3) is placed, B [0, 200) and C [300, 400) are live: the hole [200, 300) fits it
    intervals = [Interval("A", 0, 1, 300), Interval("B", 2, 3, 200), Interval("C", 0, 3, 100), Interval("D", 3, 3, 60)]
    best = plan_best_fit(intervals)
    assert best.offsets == {"A": 0, "B": 0, "C": 300, "D": 200} and best.arena == 400 == lower_bound(intervals)


def test_best_fit_is_close_to_the_lower_bound_on_training_graphs():
    for name, graph in _graphs().items():
        intervals = liveness(graph)
        for planner in PLANNERS[1:]:
            plan = planner(intervals)
            validate_plan(plan, intervals)
        assert plan_best_fit(intervals).arena <= 1.10 * lower_bound(intervals), name
        assert plan_best_fit(intervals).arena < plan_no_reuse(intervals).arena, name


def test_inplace_reuses_the_input_buffer_where_it_dies():
    graph = mlp_graph([6, 6, 6, 6], batch=5)
    intervals = liveness(graph)
    plan = plan_inplace(graph)
    validate_plan(plan, intervals)
    assert plan.inplace["a1"] == "z1" and plan.offsets["a1"] == plan.offsets["z1"]
    assert plan.inplace["dz1"] == "da1", "ReLU's backward overwrites the incoming gradient"
    # a ReLU whose input is still needed afterwards (here: by a second op) cannot run in place
    b = TrainingGraphBuilder()
    x, W = b.input("x", (4,)), b.parameter("W", (4,))
    z = b.op("z", [x, W], (4,), saves=[x, W])
    a = b.op("a", [z], (4,), saves=["a"], inplace=z, elementwise=True)
    b.op("loss", [a, z], (), saves=[a, z])
    shared = b.build("loss")
    assert "a" not in plan_inplace(shared).inplace


def test_validate_plan_rejects_overlaps_and_tensors_outside_the_arena():
    intervals = [Interval("a", 0, 2, 8), Interval("b", 2, 4, 8), Interval("c", 3, 5, 8)]
    validate_plan(MemoryPlan({"a": 0, "b": 8, "c": 0}, 16), intervals)  # a and c never meet
    with pytest.raises(ValueError, match="'a'.*'b'.*overlap"):
        validate_plan(MemoryPlan({"a": 0, "b": 4, "c": 16}, 24), intervals)
    with pytest.raises(ValueError, match="outside the arena"):
        validate_plan(MemoryPlan({"a": 0, "b": 8, "c": 12}, 16), intervals)
    with pytest.raises(ValueError, match="no offset"):
        validate_plan(MemoryPlan({"a": 0, "b": 8}, 16), intervals)


def test_bad_graphs_and_orders_are_rejected_with_clear_errors():
    graph = mlp_graph([3, 4, 2], batch=2)
    order = [op.name for op in graph.ops]
    with pytest.raises(ValueError, match="not topological: op 'loss' at step 1 uses 'z2'"):
        liveness(graph, [order[0], order[3], *order[1:3], *order[4:]])
    with pytest.raises(ValueError, match="exactly once"):
        liveness(graph, order[:-1])
    with pytest.raises(ValueError, match="not in the graph"):
        liveness(graph, order[:-1] + ["nope"])
    with pytest.raises(ValueError, match="before any definition"):
        TrainingGraph((OpNode("f", ("h",), ("y",)),), {"h": 4, "y": 4}, {"h": "activation", "y": "activation"})
    with pytest.raises(ValueError, match="size must be >= 0"):
        TrainingGraph((), {"x": -4}, {"x": "input"})
    with pytest.raises(TypeError, match="int number of bytes"):
        TrainingGraph((), {"x": 4.0}, {"x": "input"})
    with pytest.raises(ValueError, match="written by two ops"):
        TrainingGraph((OpNode("f", ("x",), ("y",)), OpNode("g", ("x",), ("y",))), {"x": 4, "y": 4},
                      {"x": "input", "y": "activation"})
    b = TrainingGraphBuilder()
    with pytest.raises(ValueError, match="negative dimension"):
        b.input("x", (2, -3))
    with pytest.raises(ValueError, match="uses 'x' before its definition"):
        b.op("h", ["x"], (2,))
    with pytest.raises(ValueError, match="start <= end"):
        plan_best_fit([Interval("a", 3, 1, 8)])
    with pytest.raises(ValueError, match="negative size"):
        plan_first_fit([Interval("a", 0, 1, -8)])


def test_lifetime_chart_draws_a_rectangle_per_tensor():
    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle

    graph = mlp_graph([4, 6, 3], batch=2)
    intervals = liveness(graph)
    fig, ax = plt.subplots()
    plot_lifetimes(plan_best_fit(intervals), intervals, graph.kinds, ax=ax, unit="B")
    assert sum(isinstance(p, Rectangle) for p in ax.patches) == len(intervals)
    assert ax.get_ylim()[1] >= plan_best_fit(intervals).arena
    plt.close(fig)


def test_lifetime_chart_draws_the_live_bytes_it_is_given():
    # A notebook that counted the live bytes itself (the student kit's demo) passes them: the staircase and the
    # lower bound's line are those bytes, not live_bytes' (here: the true profile plus 8 at step 1).
    import matplotlib.pyplot as plt
    from matplotlib.patches import StepPatch

    graph = mlp_graph([4, 6, 3], batch=2)
    intervals = liveness(graph)
    live = live_bytes(intervals).astype(float)
    live[1] += 8
    fig, ax = plt.subplots()
    plot_lifetimes(plan_best_fit(intervals), intervals, graph.kinds, ax=ax, unit="B", live=live)
    (stairs,) = [p for p in ax.patches if isinstance(p, StepPatch)]
    assert np.array_equal(stairs.get_data().values, live)
    assert live.max() in {line.get_ydata()[0] for line in ax.get_lines()}
    plt.close(fig)

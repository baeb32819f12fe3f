"""Schedule search (Lab 9): footprints, features, template spaces, measurement, tuning log, tuners."""

from __future__ import annotations

import itertools
import json
import math
import time
from collections import defaultdict

import numpy as np
import pytest
from scipy.stats import spearmanr

from mlsys_lib.compiler import build, create_schedule, evaluate, te
from mlsys_lib.compiler import ops
from mlsys_lib.compiler.expr import Axis, BinOp, Const
from mlsys_lib.compiler.features import MAX_DEPTH, feature_names, features, footprints
from mlsys_lib.compiler.measure import Measurement, TuningLog, config_key, make_arrays, measure, time_config
from mlsys_lib.compiler.schedule import ScheduleError, Split
from mlsys_lib.compiler.space import conv2d_space, matmul_space, tile_sizes
from mlsys_lib.compiler.traffic import count_traffic
from mlsys_lib.compiler.tuner import (candidate_pool, cost_model, evolutionary_search, model_guided_search,
                                      random_search, tune)


# --- footprints against brute force -----------------------------------------------------------------

def _index_value(e, env) -> int:
    """The value of an index expression (Const, Axis, + - *) with the axes' values in ``env``."""
    if isinstance(e, Const):
        return int(e.value)
    if isinstance(e, Axis):
        return env[e]
    assert isinstance(e, BinOp) and e.op in "+-*"
    a, b = _index_value(e.a, env), _index_value(e.b, env)
    return a + b if e.op == "+" else a - b if e.op == "-" else a * b


def _loop_values(stage, leaf_values: dict) -> dict | None:
    """Every loop's value from the leaves' (splits and fuses undone, newest first), or None when a
    split's value runs past its extent (the iteration its tail guard skips)."""
    value = dict(leaf_values)
    for rel in reversed(stage.relations):
        if isinstance(rel, Split):
            value[rel.parent] = value[rel.outer] * rel.factor + value[rel.inner]
            if value[rel.parent] >= rel.parent.extent:
                return None
        else:
            value[rel.outer], value[rel.inner] = divmod(value[rel.fused], rel.inner.extent)
    return value


def touched_elements(stage) -> list[dict[str, set]]:
    """Per depth d, the distinct elements of each tensor that the iterations with the loops at depth < d
    at 0 touch, found by running them."""
    out = []
    for d in range(len(stage.leaves) + 1):
        touched = defaultdict(set)
        ranges = [range(1) if p < d else range(loop.extent) for p, loop in enumerate(stage.leaves)]
        for values in itertools.product(*ranges):
            value = _loop_values(stage, dict(zip(stage.leaves, values)))
            if value is None:
                continue
            env = {axis: value[loop] for axis, loop in stage.root.items()}
            for indices, name in stage.accesses():
                touched[name].add(tuple(_index_value(i, env) for i in indices))
        out.append(dict(touched))
    return out


def _itemsizes(stage) -> dict[str, int]:
    return {t.name: np.dtype(t.dtype).itemsize for t in stage.schedule.tensors}


def brute_footprints(stage) -> list[dict[str, int]]:
    """Bytes of the distinct elements touched, per depth and tensor."""
    size = _itemsizes(stage)
    return [{name: len(e) * size[name] for name, e in level.items()} for level in touched_elements(stage)]


def brute_boxes(stage) -> list[dict[str, int]]:
    """Bytes of the bounding box of the elements touched, per depth and tensor."""
    size = _itemsizes(stage)
    return [{name: size[name] * math.prod(max(c) - min(c) + 1 for c in zip(*e)) for name, e in level.items()}
            for level in touched_elements(stage)]


def _matmul(n, m, k, dtype="float32"):
    A, B = te.placeholder((n, k), "A", dtype), te.placeholder((k, m), "B", dtype)
    return ops.matmul(A, B)


def _conv(n=2, c=3, h=6, w=7, f=4, kh=3, kw=2):
    return ops.conv2d(te.placeholder((n, c, h, w), "data"), te.placeholder((f, c, kh, kw), "weight"))


def _random_schedule(out, rng, keep_significance: bool):
    """Random splits (tails and nested splits included), a random order, maybe a cache_write. With
    ``keep_significance`` each axis's loops stay in order of their coefficients (outer part outside
    inner part, as tiling nests them), so the loops inside any depth move each index contiguously."""
    s = create_schedule(out)
    S = s[out]
    for _ in range(rng.integers(0, 4)):
        loop = S.leaves[rng.integers(len(S.leaves))]
        S.split(loop, int(rng.integers(1, loop.extent + 2)))
    if keep_significance:
        chains = [sorted(S.depends(root), key=lambda leaf: -S.coefficients(root)[leaf]) for root in S.root.values()]
        order = []
        while any(chains):
            chain = [c for c in chains if c][rng.integers(sum(1 for c in chains if c))]
            order.append(chain.pop(0))
    else:
        order = [S.leaves[p] for p in rng.permutation(len(S.leaves))]
    S.reorder(*order)
    if S.op.reduce is not None and rng.random() < 0.5:
        try:
            S.cache_write(S.leaves[rng.integers(len(S.leaves))])
        except ScheduleError:
            pass
    return s, S


def _row_stencil():
    """Three reads of one image shifted along a row: the union of their intervals is the halo."""
    img = te.placeholder((7, 11), "img")
    return te.compute((7, 9), lambda y, x: img[y, x] + img[y, x + 1] * img[y, x + 2], "blur")


def _stencil_2d():
    """Reads shifted along both dimensions: their union is not a box (the corners are not read)."""
    img = te.placeholder((9, 11), "img")
    return te.compute((7, 9), lambda y, x: img[y, x] + img[y + 2, x + 1] * img[y + 1, x + 2], "blur")


OPERATORS = {"matmul": lambda: _matmul(5, 7, 6), "conv2d": lambda: _conv(), "row_stencil": _row_stencil,
             "matmul_f64": lambda: _matmul(3, 4, 9, "float64")}


@pytest.mark.parametrize("name", OPERATORS)
def test_footprints_equal_brute_force_when_loops_nest_by_significance(name):
    rng = np.random.default_rng(0)
    for _ in range(12):
        s, S = _random_schedule(OPERATORS[name](), rng, keep_significance=True)
        assert footprints(S) == brute_footprints(S), str(s)


@pytest.mark.parametrize("name", OPERATORS)
def test_footprints_bound_brute_force_in_any_order(name):
    """An outer part inside an inner part strides the index: the interval then over-counts (exact at
    the whole nest and at one iteration)."""
    rng = np.random.default_rng(1)
    for _ in range(12):
        s, S = _random_schedule(OPERATORS[name](), rng, keep_significance=False)
        got, brute = footprints(S), brute_footprints(S)
        assert got[0] == brute[0] and got[-1] == brute[-1], str(s)
        assert all(got[d][t] >= brute[d][t] for d in range(len(got)) for t in got[d]), str(s)


def test_footprints_of_reads_shifted_in_two_dimensions_are_their_bounding_box():
    rng = np.random.default_rng(2)
    for _ in range(8):
        s, S = _random_schedule(_stencil_2d(), rng, keep_significance=True)
        got = footprints(S)
        assert got == brute_boxes(S), str(s)
        assert got[0]["img"] > brute_footprints(S)[0]["img"]


def test_footprints_of_an_inlined_producer_count_what_it_reads():
    X, bias = te.placeholder((6, 10), "X"), te.placeholder((10,), "bias")
    Y = ops.bias_relu(X, bias)
    s = create_schedule(Y)
    s["Y_add"].compute_inline()
    S = s[Y]
    i, j = S.axis
    S.split(j, 4)
    assert footprints(S) == brute_footprints(S)
    assert set(footprints(S)[0]) == {"X", "bias", "Y"}


def test_footprints_through_a_fuse_count_the_fused_axes_in_full():
    C = _matmul(4, 6, 5)
    s = create_schedule(C)
    S = s[C]
    i, j = S.axis
    (k,) = S.reduce_axis
    S.reorder(k, i, j)
    S.fuse(i, j)
    assert footprints(S) == brute_footprints(S)
    assert footprints(S)[1] == {"A": 4 * 4, "B": 6 * 4, "C": 24 * 4}


def test_footprints_of_the_lecture_tiling():
    """C tiled 4 × 64 with k inside: one (io, jo) iteration reads a 4-row strip of A (16 KiB), a
    64-column panel of B (256 KiB) and writes a 4 × 64 tile of C (1 KiB)."""
    C = _matmul(1024, 1024, 1024)
    s = create_schedule(C)
    S = s[C]
    i, j = S.axis
    (k,) = S.reduce_axis
    io, jo, ii, ji = S.tile(i, j, 4, 64)
    S.reorder(io, jo, k, ii, ji)
    S.cache_write(jo)
    levels = footprints(S)
    assert levels[0] == {"A": 4 * 2**20, "B": 4 * 2**20, "C": 4 * 2**20}
    assert levels[2] == {"A": 4 * 4 * 1024, "B": 4 * 1024 * 64, "C": 4 * 4 * 64}
    assert levels[3] == {"A": 4 * 4, "B": 4 * 64, "C": 4 * 4 * 64}
    assert levels[-1] == {"A": 4, "B": 4, "C": 4}


# --- features -----------------------------------------------------------------------------------------

def test_features_have_one_length_per_template_and_are_finite():
    for space in (matmul_space(64, 48, 40), conv2d_space(2, 8, 8, 12, 12)):
        rng = np.random.default_rng(0)
        vectors = [features(space.apply(space.sample(rng))[0]) for _ in range(40)]
        names = feature_names(space.apply(space.sample(rng))[0])
        assert {v.shape for v in vectors} == {(len(names),)}
        assert len(set(names)) == len(names)
        assert all(np.isfinite(v).all() for v in vectors)
        assert len({v.tobytes() for v in vectors}) > 30  # configs differ, so do their features


def test_features_read_the_schedule():
    space = matmul_space(64, 64, 64)
    config = {"tile_i": 4, "tile_j": 16, "tile_k": 32, "order": "io jo ko ki ii ji", "cache_write": True,
              "vectorize": True, "parallel": True, "unroll": True}
    schedule, _ = space.apply(config)
    named = dict(zip(feature_names(schedule), features(schedule)))
    assert named["vector_width"] == 16 and named["parallel_extent"] == 16 and named["unroll_extent"] == 4
    assert named["cache_write"] == 1 and named["cache_write_depth"] == 2  # at jo, the second loop
    assert named["cache_write.log2_bytes"] == math.log2(4 * 16 * 4)  # a 4 x 16 float32 tile of C
    assert [named[f"loop{p}.log2_extent"] for p in range(7)] == [4, 2, 1, 5, 2, 4, 0]
    assert named["loop0.parallel"] == named["loop5.vectorize"] == named["loop4.unroll"] == 1
    assert named["loop2.reduce"] == named["loop3.reduce"] == 1 and named["loop1.reduce"] == 0
    assert (named["innermost_stride.A"], named["innermost_stride.B"], named["innermost_stride.C"]) == (0, 1, 1)
    # one ki iteration: a 4-element column of A, a 16-element row of B, the 4 x 16 tile of C
    assert named["depth4.log2_bytes.A"] == math.log2(16) and named["depth4.log2_bytes.B"] == math.log2(64)
    assert named["depth4.log2_bytes.C"] == math.log2(4 * 16 * 4) and named["depth9.log2_bytes.A"] == 2
    # A does not move along ji: it is reused in the next ji iteration, after one iteration's 3 elements;
    # B does not move along ii: it is reused after one ii iteration, a whole ji loop (4 + 64 + 64 bytes)
    assert named["reuse_distance.log2_bytes.A"] == pytest.approx(math.log2(3 * 4))
    assert named["reuse_distance.log2_bytes.B"] == pytest.approx(math.log2(4 + 64 + 64))


def test_features_refuse_a_nest_deeper_than_encoded():
    C = _matmul(64, 64, 64)
    s = create_schedule(C)
    S = s[C]
    for _ in range(MAX_DEPTH - 2):
        S.split(S.leaves[0], 2)
    with pytest.raises(ValueError, match="at most"):
        features(s)


# --- spaces -------------------------------------------------------------------------------------------

def test_tile_sizes_are_powers_of_two_and_divisors_in_range():
    assert tile_sizes(56, 4, 64) == [4, 7, 8, 14, 16, 28, 32, 56]
    assert tile_sizes(1024, 8, 1024) == [8, 16, 32, 64, 128, 256, 512, 1024]
    assert tile_sizes(3, 4, 64) == [3]


def test_space_sample_and_mutate_stay_in_the_space():
    rng = np.random.default_rng(0)
    for space in (matmul_space(37, 29, 41), conv2d_space(2, 3, 5, 9, 10)):
        assert len(space) == math.prod(len(v) for v in space.knobs.values())
        for _ in range(50):
            config = space.check(space.sample(rng))
            child = space.check(space.mutate(config, rng))
            assert sum(child[k] != config[k] for k in config) == 1
            assert json.loads(json.dumps(config)) == config


def test_space_configs_list_every_config_once():
    space = matmul_space(4, 4, 8)
    configs = space.configs()
    assert len(configs) == len(space) == len({config_key(c) for c in configs})
    for config in configs[::37]:
        space.apply(config)


def test_space_rejects_configs_off_its_knobs():
    space = matmul_space(16, 16, 16)
    good = space.sample(np.random.default_rng(0))
    with pytest.raises(ValueError, match="differ"):
        space.apply({**good, "tile_z": 4})
    with pytest.raises(ValueError, match="tile_i=3"):
        space.apply({**good, "tile_i": 3})
    with pytest.raises(ValueError, match="vectorize=1"):
        space.apply({**good, "vectorize": 1})  # an int is not the bool the knob lists
    with pytest.raises(ValueError, match="positive int"):
        matmul_space(0, 4, 4)
    with pytest.raises(ValueError, match="larger than the image"):
        conv2d_space(1, 2, 2, 2, 5, kernel=3)


@pytest.mark.parametrize("space, configs", [
    (matmul_space(37, 29, 41), [
        {"tile_i": 8, "tile_j": 16, "tile_k": 16, "order": "io jo ko ki ii ji", "cache_write": True,
         "vectorize": True, "parallel": True, "unroll": True},
        {"tile_i": 2, "tile_j": 4, "tile_k": 41, "order": "io ko jo ki ii ji", "cache_write": True,
         "vectorize": False, "parallel": False, "unroll": False},
        {"tile_i": 8, "tile_j": 8, "tile_k": 8, "order": "jo io ko ki ii ji", "cache_write": False,
         "vectorize": True, "parallel": True, "unroll": False}]),
    (conv2d_space(2, 3, 5, 9, 10), [
        {"tile_o": 2, "tile_y": 2, "tile_x": 4, "outer_order": "b oo yo xo", "reduce_order": "ry rx rc",
         "cache_write": True, "vectorize": True, "parallel": True, "unroll": True},
        {"tile_o": 4, "tile_y": 1, "tile_x": 8, "outer_order": "oo b yo xo", "reduce_order": "rc ry rx",
         "cache_write": False, "vectorize": True, "parallel": False, "unroll": False}]),
], ids=["matmul", "conv2d"])
def test_space_schedules_compute_what_the_operator_means(space, configs):
    """Ragged sizes: every tile leaves a tail somewhere."""
    for config in configs:
        schedule, tensors = space.apply(config)
        arrays = make_arrays(schedule, seed=1)
        expected = evaluate(schedule.outputs[0], {t.name: a for t, a in zip(tensors, arrays)})
        np.testing.assert_allclose(build(schedule)(*arrays[:-1]), expected, rtol=1e-4, atol=1e-5, err_msg=str(config))


# --- measurement and the tuning log -------------------------------------------------------------------

class _Scripted:
    """A fake kernel whose calls take the scripted seconds (sleeping), counting its calls."""

    def __init__(self, seconds):
        self.seconds, self.calls = list(seconds), 0

    def __call__(self, *arrays):
        time.sleep(self.seconds[self.calls])
        self.calls += 1


def test_measure_takes_the_median_after_the_warmup():
    kernel = _Scripted([0.2, 0.01, 0.05, 0.01, 0.01, 0.05])  # the slow first call is the warm-up
    seconds = measure(kernel, [], warmup=1, repeat=5)
    assert kernel.calls == 6 and 0.01 <= seconds < 0.03


def test_measure_stops_at_a_call_slower_than_max_seconds():
    kernel = _Scripted([0.05] * 6)
    assert measure(kernel, [], warmup=1, repeat=5, max_seconds=0.02) >= 0.05
    assert kernel.calls == 1
    with pytest.raises(ValueError, match="repeat"):
        measure(kernel, [], repeat=0)


def test_time_config_measures_a_compiled_config():
    space = matmul_space(16, 16, 16)
    result = time_config(space, space.sample(np.random.default_rng(0)), repeat=2)
    assert isinstance(result, Measurement) and result.seconds > 0 and result.compile_seconds > 0
    assert result.gflops == pytest.approx(2 * 16 ** 3 / result.seconds / 1e9)


def test_tuning_log_round_trips(tmp_path):
    path = tmp_path / "tune.jsonl"
    log = TuningLog(path)
    a, b = {"tile": 4, "order": "ij", "vectorize": True}, {"tile": 8, "order": "ji", "vectorize": False}
    log.record("matmul", a, 0.5, gflops=4.0)
    log.record("matmul", b, 0.25, gflops=8.0)
    log.record("conv", a, 0.1)
    again = TuningLog(path)
    assert len(again) == 3
    assert again.lookup("matmul", dict(reversed(list(a.items()))))["seconds"] == 0.5  # key order is no matter
    assert again.lookup("conv", b) is None
    assert again.best("matmul")["config"] == b and again.best("matmul")["gflops"] == 8.0
    assert again.best("softmax") is None
    lines = path.read_text().splitlines()
    assert [json.loads(line)["task"] for line in lines] == ["matmul", "matmul", "conv"]
    assert all("when" in json.loads(line) for line in lines)


@pytest.mark.parametrize("line, problem", [
    ("{not json", "not valid JSON"),
    ('["a list"]', "expected an object"),
    ('{"task": "t", "config": {}, "seconds": -1}', "positive finite"),
    ('{"task": "t", "config": {}, "seconds": Infinity}', "positive finite"),
])
def test_tuning_log_names_the_malformed_line(tmp_path, line, problem):
    path = tmp_path / "tune.jsonl"
    path.write_text('{"task": "t", "config": {"a": 1}, "seconds": 0.1}\n\n' + line + "\n")
    with pytest.raises(ValueError, match=f"line 3: .*{problem}"):
        TuningLog(path)


# --- searches -----------------------------------------------------------------------------------------

def _synthetic_cost(config: dict) -> float:
    """A deterministic cost with one best config of matmul_space(64, 64, 64) and smooth knobs."""
    tiles = abs(math.log2(config["tile_i"]) - 2) + abs(math.log2(config["tile_j"]) - 5) + abs(math.log2(config["tile_k"]) - 4)
    switches = 3 * (not config["vectorize"]) + 2 * (not config["parallel"]) + (not config["cache_write"])
    return 1e-3 * (1 + tiles + switches + config["unroll"] + 0.5 * MATMUL_ORDER_COST[config["order"]])


MATMUL_ORDER_COST = {order: rank for rank, order in enumerate(matmul_space(8, 8, 8).knobs["order"])}


class _Perfect:
    """A model that knows the cost (it ignores what it is fitted on), counting its fits."""

    def __init__(self, cost):
        self.cost, self.fits = cost, []

    def fit(self, X, y):
        self.fits.append(len(y))

    def predict(self, X):
        return np.log([self.cost(int(x[0])) for x in X])


def test_model_guided_search_with_a_perfect_model_finds_the_best_in_the_second_batch():
    rng = np.random.default_rng(0)
    costs = rng.uniform(1, 2, 100)
    candidates = list(rng.permutation(100))
    model, measured = _Perfect(lambda c: costs[c]), []

    def measure_(c):
        measured.append(c)
        return costs[c]

    history = model_guided_search(candidates, lambda c: np.array([c]), measure_, model, trials=27, batch_size=10)
    assert [c for c, _ in history] == measured and len(measured) == 27 == len(set(measured))
    assert measured[:10] == candidates[:10]
    assert model.fits == [10, 20]  # refit after every batch on everything measured; the last batch is cut short
    best_left = sorted(set(range(100)) - set(candidates[:10]), key=lambda c: costs[c])
    assert measured[10:20] == best_left[:10] and measured[20:] == best_left[10:17]
    assert [s for _, s in history] == [costs[c] for c in measured]


def test_model_guided_search_breaks_ties_in_candidate_order_and_stops_when_candidates_run_out():
    class Constant:
        def fit(self, X, y):
            pass

        def predict(self, X):
            return np.zeros(len(X))

    candidates = ["c", "a", "d", "b", "e"]
    history = model_guided_search(candidates, lambda c: np.array([ord(c)]), lambda c: 1.0, Constant(), 50, 2)
    assert [c for c, _ in history] == candidates
    assert model_guided_search(candidates, lambda c: np.array([0.0]), lambda c: 1.0, Constant(), 0, 2) == []
    with pytest.raises(ValueError, match="batch_size"):
        model_guided_search(candidates, lambda c: np.array([0.0]), lambda c: 1.0, Constant(), 3, 0)


def test_random_and_evolutionary_searches_never_measure_a_config_twice():
    space = matmul_space(64, 64, 64)
    pool = candidate_pool(space, 300, np.random.default_rng(0))
    assert len({config_key(c) for c in pool}) == 300
    history = random_search(pool, _synthetic_cost, 120)
    assert [c for c, _ in history] == pool[:120]
    history = evolutionary_search(space, _synthetic_cost, 400, np.random.default_rng(0))
    assert len(history) == 400 == len({config_key(c) for c, _ in history})
    small = matmul_space(2, 4, 8)  # 2 tile_i x 1 x 1 x 5 orders x 16 = 160 configs
    history = evolutionary_search(small, _synthetic_cost, 1000, np.random.default_rng(1))
    assert len(history) == len(small) == len({config_key(c) for c, _ in history})


def test_evolutionary_search_beats_random_search_on_a_smooth_cost():
    space = matmul_space(64, 64, 64)
    best = min(_synthetic_cost(c) for c in space.configs())
    found = {"random": [], "evolutionary": []}
    for seed in range(5):
        rng = np.random.default_rng(seed)
        found["random"].append(min(s for _, s in random_search(candidate_pool(space, 150, rng), _synthetic_cost, 150)))
        found["evolutionary"].append(min(s for _, s in evolutionary_search(space, _synthetic_cost, 150, rng)))
    assert np.median(found["evolutionary"]) < np.median(found["random"])
    assert min(found["evolutionary"]) == best


def test_cost_model_ranks_held_out_schedules_by_their_counted_traffic():
    """Trained on the cache misses :func:`count_traffic` counts for 80 configs, the trees order 40 others."""
    space = matmul_space(16, 16, 16)
    configs = candidate_pool(space, 120, np.random.default_rng(0))
    X = np.array([features(space.apply(c)[0]) for c in configs])
    y = np.log([count_traffic(space.apply(c)[0], cache_bytes=512, line_bytes=32).bytes for c in configs])
    model = cost_model().fit(X[:80], y[:80])
    rho = spearmanr(model.predict(X[80:]), y[80:]).statistic
    assert rho > 0.6


def test_tune_logs_every_measurement_and_a_second_tune_measures_nothing(tmp_path):
    space = matmul_space(64, 64, 64)
    for strategy in ("random", "evolutionary", "model"):
        path = tmp_path / f"{strategy}.jsonl"
        calls = []

        def fake(config):
            calls.append(config)
            return _synthetic_cost(config)

        first = tune(space, strategy, 20, seed=3, log=TuningLog(path), measure=fake, batch_size=5, pool_size=200)
        assert len(first) == len(calls) == 20 and len(TuningLog(path)) == 20
        records = TuningLog(path).records
        assert [r["config"] for r in records] == [c for c, _ in first]
        assert records[0]["gflops"] == pytest.approx(space.flops / first[0][1] / 1e9)
        calls.clear()
        second = tune(space, strategy, 20, seed=3, log=TuningLog(path), measure=fake, batch_size=5, pool_size=200)
        assert calls == [] and second == first and len(TuningLog(path)) == 20


def test_tune_measures_real_kernels(tmp_path):
    space = matmul_space(12, 10, 9)
    log = TuningLog(tmp_path / "tune.jsonl")
    history = tune(space, "model", 3, seed=0, log=log, batch_size=2, repeat=2)
    assert len(history) == 3 and all(s > 0 for _, s in history)
    assert all(r["compile_seconds"] > 0 and r["gflops"] > 0 for r in log.records)
    with pytest.raises(ValueError, match="strategy"):
        tune(space, "annealing", 3)

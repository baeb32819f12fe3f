"""mlsys_lib.compiler.dependence: distance vectors against every pair of iterations, legality against execution."""

import itertools

import numpy as np
import pytest

from mlsys_lib.compiler.dependence import (LoopNest, dependence_vectors, dependences, legal_by_execution,
                                           parallel_is_legal, permutation_is_legal, random_arrays, run_nest,
                                           tiling_is_legal)


class _Element:
    """What Python's own evaluation of ``A[i-1, j+1]`` or ``A[i][j]`` indexes: an independent parser."""

    def __init__(self, name, index=()):
        self.name, self.index = name, index

    def __getitem__(self, key):
        return _Element(self.name, self.index + (key if isinstance(key, tuple) else (key,)))


def _touched(nest, text, point):
    names = {a.array for a in nest.accesses()}
    element = eval(text, {"__builtins__": {}}, {**{n: _Element(n) for n in names}, **dict(zip(nest.names, point))})
    return element.name, element.index


def _brute_force_vectors(nest):
    """Distance vectors from every pair of iterations touching one element, at least one writing."""
    touches = {}
    for point in itertools.product(*(range(n) for n in nest.extents)):
        for s in nest.statements:
            for access, writes in [(s.write, True), *((r, False) for r in s.reads)]:
                touches.setdefault(_touched(nest, access.text, point), []).append((point, writes))
    found = set()
    for users in touches.values():
        for (p, p_writes), (q, q_writes) in itertools.combinations(users, 2):
            if (p_writes or q_writes) and p != q:
                earlier, later = sorted((p, q))
                found.add(tuple(b - a for a, b in zip(earlier, later)))
    return found


def _random_nest(rng):
    """2-3 loops of extent 4-6, 1-2 statements over arrays A, B, C; each array indexes a fixed choice of
    loops (so every pair is uniform) at random offsets in -2..2; some statements accumulate (+=)."""
    names = "ijk"[: rng.integers(2, 4)]
    patterns = {a: list(rng.permutation(list(names))[: len(names) if rng.random() < 0.7 else rng.integers(1, 3)])
                for a in "ABC"}

    def access(array):
        offsets = rng.integers(-2, 3, size=len(patterns[array]))
        return f"{array}[{', '.join(f'{v}{o:+d}' if o else v for v, o in zip(patterns[array], offsets))}]"

    statements = []
    for _ in range(rng.integers(1, 3)):
        reads = [access(a) for a in rng.choice(list("ABC"), size=rng.integers(1, 4))]
        right = " + ".join(" * ".join(reads[k:k + 2]) for k in range(0, len(reads), 2))
        statements.append(f"{access(rng.choice(['A', 'B']))} {'+=' if rng.random() < 0.2 else '='} {right}")
    return LoopNest({v: int(rng.integers(4, 7)) for v in names}, statements)


def _same(a, b):
    return all(np.array_equal(a[name], b[name]) for name in a)


RANDOM_NESTS = [_random_nest(np.random.default_rng(seed)) for seed in range(45)]


HAND_WRITTEN = [
    ({"i": 6}, "A[2*i] = A[2*i - 1]"),  # even elements written, odd ones read: no dependence
    ({"i": 5, "j": 4}, "A[2*i, j] = A[2*i-2, j-1]"),
    ({"i": 4, "j": 4}, "A[i + j] = A[i + j - 1]"),  # a skewed index: many distances
    ({"i": 3, "j": 4, "k": 3}, "A[i][j] = A[i][j] * B[k] + A[i-1][j-1]"),
    ({"i": 5, "j": 5}, ["A[i, j] = B[i-1, j] + B[i, j+1]", "B[i, j] = A[i, j-2]"]),
]


@pytest.mark.parametrize("nest", RANDOM_NESTS[:30] + [LoopNest(*args) for args in HAND_WRITTEN],
                         ids=[f"seed{seed}" for seed in range(30)] + [f"hand{k}" for k in range(len(HAND_WRITTEN))])
def test_distance_vectors_are_those_of_every_pair_of_iterations(nest):
    assert dependence_vectors(nest) == _brute_force_vectors(nest)


def test_nests_print_as_python_loops():
    assert str(LoopNest({"i": 3, "j": 2}, "A[i, j] = A[i-1, j]")) == (
        "for i in range(3):\n  for j in range(2):\n    A[i, j] = A[i-1, j]")
    assert dependence_vectors(LoopNest(*HAND_WRITTEN[0])) == set()
    assert dependence_vectors(LoopNest(*HAND_WRITTEN[1])) == {(1, 1)}


def _tilings(nest, start):
    """Tile sizes for the band start.. : all 2, and for each loop b, size 1 on b and whole loops elsewhere
    (b moved outermost in the band: the tiling that breaks a vector negative on b)."""
    band = nest.names[start:]
    return [dict.fromkeys(band, 2)] + [{v: 1 if v == b else nest.loops[v] for v in band} for b in band]


def test_legality_tests_agree_with_execution_on_random_nests():
    """Legal by the lexicographic test => the same numbers, always; illegal => different numbers, almost always."""
    counts = {"legal": 0, "illegal": 0, "illegal but same numbers": 0}
    for nest in RANDOM_NESTS:
        vectors, depth = dependence_vectors(nest), len(nest.names)
        checks = [(permutation_is_legal(vectors, order), [{"order": order}])
                  for order in itertools.permutations(range(depth))]
        checks += [(parallel_is_legal(vectors, k), [{"reverse": [nest.names[k]]}]) for k in range(depth)]
        checks += [(tiling_is_legal(vectors, (start, depth)), [{"tile": t} for t in _tilings(nest, start)])
                   for start in range(depth - 1)]
        for legal, schedules in checks:
            same = [legal_by_execution(nest, **schedule) for schedule in schedules]
            assert all(same) or not legal, f"{schedules} judged legal but changes the results of\n{nest}"
            counts["legal" if legal else "illegal"] += 1
            counts["illegal but same numbers"] += all(same) and not legal
    assert counts["legal"] >= 100 and counts["illegal"] >= 100, counts
    assert counts["illegal but same numbers"] <= 0.01 * counts["illegal"], counts


def test_interchange_of_a_dependence_along_i_is_legal_and_j_is_parallel():
    nest = LoopNest({"i": 5, "j": 4}, "A[i, j] = A[i-1, j] + B[i, j]")
    vectors = dependence_vectors(nest)
    assert vectors == {(1, 0)}
    assert dependences(nest)[0][:4] == ("flow", "A", "A[i, j]", "A[i-1, j]")
    assert permutation_is_legal(vectors, (1, 0)) and legal_by_execution(nest, ("j", "i"))
    assert not parallel_is_legal(vectors, 0) and not legal_by_execution(nest, reverse=["i"])
    assert parallel_is_legal(vectors, 1) and legal_by_execution(nest, reverse=["j"])


def test_interchange_of_distance_one_minus_one_is_illegal():
    nest = LoopNest({"i": 5, "j": 5}, "A[i][j] = A[i-1][j+1]")
    vectors = dependence_vectors(nest)
    assert vectors == {(1, -1)}
    assert not permutation_is_legal(vectors, (1, 0)) and not legal_by_execution(nest, ("j", "i"))
    assert not tiling_is_legal(vectors) and not legal_by_execution(nest, tile={"i": 2, "j": 2})
    assert parallel_is_legal(vectors, 1) and legal_by_execution(nest, reverse=["j"])


def test_wavefront_both_loops_carry_yet_the_nest_tiles():
    nest = LoopNest({"i": 5, "j": 6}, "A[i, j] = A[i, j-1] + A[i-1, j]")
    vectors = dependence_vectors(nest)
    assert vectors == {(0, 1), (1, 0)}
    assert not parallel_is_legal(vectors, 0) and not parallel_is_legal(vectors, 1)
    assert permutation_is_legal(vectors, (1, 0)) and legal_by_execution(nest, ("j", "i"))
    assert tiling_is_legal(vectors) and legal_by_execution(nest, tile={"i": 2, "j": 4})
    assert not legal_by_execution(nest, reverse=["i"]) and not legal_by_execution(nest, reverse=["j"])


def test_anti_dependence_is_oriented_from_the_read():
    nest = LoopNest({"i": 4, "j": 4}, "A[i, j] = A[i+1, j-1]")
    assert [tuple(d) for d in dependences(nest)] == [("anti", "A", "A[i+1, j-1]", "A[i, j]", (1, -1))]
    assert not permutation_is_legal({(1, -1)}, (1, 0)) and not legal_by_execution(nest, ("j", "i"))


def test_matmul_reduction_permutes_bit_for_bit_but_k_is_not_parallel():
    nest = LoopNest({"i": 3, "j": 4, "k": 5}, "C[i, j] += A[i, k] * B[k, j]")
    vectors = dependence_vectors(nest)
    assert vectors == {(0, 0, d) for d in range(1, 5)}
    assert {d.kind for d in dependences(nest)} == {"flow", "anti", "output"}
    for order in itertools.permutations(range(3)):
        assert permutation_is_legal(vectors, order)
        assert legal_by_execution(nest, order)
    assert [parallel_is_legal(vectors, k) for k in range(3)] == [True, True, False]
    assert not legal_by_execution(nest, reverse=["k"])  # other partial sums (and possibly other rounding)
    arrays = random_arrays(nest, seed=3)
    expected = arrays["C"] + (arrays["A"] @ arrays["B"]) / 1.5  # the single term's weight is 1/1.5
    np.testing.assert_allclose(run_nest(nest, ("k", "j", "i"), arrays)["C"], expected, rtol=1e-12)


def test_output_dependence_of_a_write_repeated_along_an_inner_loop():
    nest = LoopNest({"i": 4, "j": 3}, "A[i] = B[i, j]")
    assert {d.kind for d in dependences(nest)} == {"output"}
    assert dependence_vectors(nest) == {(0, 1), (0, 2)}
    assert parallel_is_legal(dependence_vectors(nest), 0) and not parallel_is_legal(dependence_vectors(nest), 1)
    assert not legal_by_execution(nest, reverse=["j"])


def test_execution_accepts_a_reversed_dependence_between_identical_rewrites():
    """legal_by_execution compares results, not the order of dependent accesses: the two writes of A[i + j]
    store the same value, so interchanging i and j reverses the output dependence (1, -1) and changes no
    number. Dependence analysis refuses the interchange; execution, as its docstring says, accepts it."""
    nest = LoopNest({"i": 3, "j": 3}, "A[i + j] = B[i + j]")
    assert [(d.kind, d.distance) for d in dependences(nest)] == [("output", (1, -1)), ("output", (2, -2))]
    assert not permutation_is_legal(dependence_vectors(nest), (1, 0))
    assert legal_by_execution(nest, ("j", "i")) and legal_by_execution(nest, reverse=["i"])
    different = LoopNest({"i": 3, "j": 3}, "A[i + j] = B[i, j]")  # the same writes, of different values
    assert dependence_vectors(different) == dependence_vectors(nest)
    assert not legal_by_execution(different, ("j", "i"))


def test_zero_distance_between_statements_is_loop_independent_and_dropped():
    nest = LoopNest({"i": 6}, ["A[i] = B[i-1]", "B[i] = A[i]"])
    assert [(d.kind, d.array, d.distance) for d in dependences(nest)] == [("flow", "B", (1,))]


def test_run_nest_matches_hand_written_loops_and_leaves_inputs_alone():
    nest = LoopNest({"i": 4, "j": 5}, ["A[i, j] = A[i-1, j+1] + B[j, i]", "B[j, i] = A[i, j] * A[i, j]"])
    arrays = random_arrays(nest, seed=7)
    assert nest.bounds() == {"A": ((-1, 3), (0, 5)), "B": ((0, 4), (0, 3))}
    a, b = arrays["A"].copy(), arrays["B"].copy()
    for i, j in itertools.product(range(4), range(5)):
        a[i + 1, j] = a[i, j + 1] / 1.5 + b[j, i] / 2.5  # A's row index i is stored at i + 1 (lowest -1)
        b[j, i] = a[i + 1, j] * a[i + 1, j] / 1.5
    before = {k: v.copy() for k, v in arrays.items()}
    out = run_nest(nest, None, arrays)
    assert np.array_equal(out["A"], a) and np.array_equal(out["B"], b)
    assert _same(arrays, before)


def test_tiled_order_visits_tile_by_tile():
    """A running count N (+1 per iteration: O / 1.5) records when each iteration ran (T = N / 1.5)."""
    order_nest = LoopNest({"i": 4, "j": 4}, ["T[i, j] = N[0, 0]", "N[0, 0] += O[0, 0]"])
    arrays = {"T": np.zeros((4, 4)), "N": np.zeros((1, 1)), "O": np.full((1, 1), 1.5)}
    visits = run_nest(order_nest, None, arrays, tile={"i": 2, "j": 2})["T"] * 1.5
    expected = np.array([[0, 1, 4, 5], [2, 3, 6, 7], [8, 9, 12, 13], [10, 11, 14, 15]])
    np.testing.assert_allclose(visits, expected)


@pytest.mark.parametrize("loops, statement, message", [
    ({"i": 3}, "A[q] = A[i]", "unknown loop variable 'q'"),
    ({"i": 3}, "A[i] = A[i, i]", "array A is used with 1 indices"),
    ({"i": 3}, "A[i] = A[i*2]", "cannot read index 'i\\*2'"),
    ({"i": 3}, "A[i] = 3", "cannot read '3'"),
    ({"i": 3}, "A[i] == B[i]", "expected one '=' or '\\+='"),
    ({"i": 0}, "A[i] = B[i]", "positive integers"),
])
def test_bad_nests_are_refused_by_name(loops, statement, message):
    with pytest.raises(ValueError, match=message):
        LoopNest(loops, statement)


def test_bad_orders_vectors_and_schedules_are_refused():
    nest = LoopNest({"i": 3, "j": 3}, "A[i, j] = A[i-1, j]")
    with pytest.raises(ValueError, match="not a uniform dependence"):
        dependence_vectors(LoopNest({"i": 3, "j": 3}, "A[i, j] = A[j, i]"))
    with pytest.raises(ValueError, match="not a permutation"):
        permutation_is_legal({(1, 0)}, (0, 0))
    with pytest.raises(ValueError, match="unknown loop 'k'"):
        run_nest(nest, ("i", "k"), random_arrays(nest))
    with pytest.raises(ValueError, match="not a permutation of the loops"):
        legal_by_execution(nest, ("i", 0))
    with pytest.raises(ValueError, match="lexicographically positive"):
        permutation_is_legal({(-1, 1)}, (1, 0))
    with pytest.raises(ValueError, match="2 entries"):
        tiling_is_legal([(1, 0), (1, 0, 0)])
    with pytest.raises(ValueError, match=r"outside the nest \(positions 0..1\)"):
        parallel_is_legal({(1, 0)}, 2)
    with pytest.raises(ValueError, match="unknown loop 'k'"):
        run_nest(nest, None, random_arrays(nest), reverse=["k"])
    with pytest.raises(ValueError, match=r"not a range \(start, stop\)"):
        tiling_is_legal({(1, 0)}, (1, 1))
    deep = LoopNest({"i": 2, "j": 2, "k": 2}, "A[i, j] = A[i, k]")
    with pytest.raises(ValueError, match="must be adjacent"):
        run_nest(deep, None, random_arrays(deep), tile={"i": 2, "k": 2})
    with pytest.raises(ValueError, match="tile sizes must be positive"):
        run_nest(deep, None, random_arrays(deep), tile={"i": 0})
    with pytest.raises(ValueError, match="has shape"):
        run_nest(nest, None, {"A": np.zeros((3, 3))})

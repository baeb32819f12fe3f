"""Every collective, algorithm and op of mlsys_lib.comm against numpy, on p = 1..8 ranks (sim backend).

One launch per p runs every case (inputs drawn from seeds, so the test rebuilds them here); sizes
include n < p and n not divisible by p, and gather/all_gather get a different length on each rank.
The MPI test module reuses ``run_every_collective`` and ``check_every_collective``.
"""

from __future__ import annotations

import numpy as np
import pytest

from mlsys_lib.comm import ALGORITHMS, CollectiveMismatchError, ProcessGroup, launch

SHAPES = [(13,), (7, 3), (2,)]
OPS = ["sum", "prod", "max", "min", "mean"]


def data(seed: int, rank: int, shape: tuple[int, ...], dtype: str = "float64", op: str = "sum") -> np.ndarray:
    """Rank ``rank``'s random input of a case (positive around 1 for prod, small ints for int dtypes)."""
    rng = np.random.default_rng([seed, rank, len(shape), *shape, sum(map(ord, dtype + op))])
    if np.dtype(dtype).kind in "iu":
        return rng.integers(-50, 50, size=shape).astype(dtype)
    x = rng.standard_normal(shape)
    return (1 + 0.3 * x if op == "prod" else x).astype(dtype)


def gather_shape(rank: int) -> tuple[int, int]:
    """Rank-dependent lengths along axis 0 (some zero) for gather and all_gather."""
    return (rank % 3, 2)


def roots(p: int) -> list[int]:
    return sorted({0, p - 1})


def run_every_collective(g: ProcessGroup, seed: int) -> dict:
    """Run every case on this rank; returns {case: result or None}."""
    p, r = g.world_size, g.rank
    out: dict = {}
    for shape in SHAPES:
        for op in OPS if shape == (7, 3) else ["sum", "max"]:
            x = data(seed, r, shape, op=op)
            for alg in ALGORITHMS["all_reduce"]:
                out["all_reduce", shape, op, alg] = g.all_reduce(x, op, alg)
                out["reduce_scatter", shape, op, alg] = g.reduce_scatter(x, op, alg)
            for alg in ALGORITHMS["reduce"]:
                for root in roots(p):
                    if op in ("sum", "mean"):
                        out["reduce", shape, op, alg, root] = g.reduce(x, root, op, alg)
        for alg in ALGORITHMS["all_reduce"]:
            out["all_reduce", shape, "int32", alg] = g.all_reduce(data(seed, r, shape, "int32"), "sum", alg)
    for alg in ALGORITHMS["broadcast"]:
        for root in roots(p):
            for dtype, shape in (("int64", (7, 3)), ("float32", (2,)), ("float64", ())):
                x = data(seed, root, shape, dtype) if r == root else None
                out["broadcast", shape, alg, root] = g.broadcast(x, root, alg)
            buffer = np.zeros(5, dtype="float64")
            got = g.broadcast(data(seed, root, (5,)) if r == root else buffer, root, alg)
            out["broadcast into buffer", alg, root] = (got, r == root or got is buffer)
    for alg in ALGORITHMS["scatter"]:
        for root in roots(p):
            whole = data(seed, root, (7, 3))
            chunks = [data(seed, root, (i % 2 + 1, 4), op=str(i)) for i in range(p)]
            out["scatter", alg, root] = g.scatter(whole if r == root else None, root, alg)
            out["scatter list", alg, root] = g.scatter(chunks if r == root else None, root, alg)
    for alg in ALGORITHMS["gather"]:
        for root in roots(p):
            out["gather", alg, root] = g.gather(data(seed, r, gather_shape(r)), root, alg)
    for alg in ALGORITHMS["all_gather"]:
        out["all_gather", alg] = g.all_gather(data(seed, r, gather_shape(r)), alg)
        out["all_gather scalar", alg] = g.all_gather(np.float64(r), alg)
    return out


def _expected_reduction(xs: list[np.ndarray], op: str) -> np.ndarray:
    stacked = np.stack(xs)
    return {"sum": stacked.sum(0, dtype=stacked.dtype), "prod": stacked.prod(0), "max": stacked.max(0),
            "min": stacked.min(0), "mean": stacked.mean(0)}[op]


def _same(got: np.ndarray, want: np.ndarray) -> None:
    assert isinstance(got, np.ndarray)
    assert got.shape == want.shape and got.dtype == want.dtype, (got.shape, got.dtype, want.shape, want.dtype)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def check_every_collective(results: list[dict], seed: int) -> int:
    """Compare every rank's results of :func:`run_every_collective` with numpy; returns the case count."""
    p = len(results)
    for case in results[0]:
        kind = case[0]
        for r, res in enumerate(results):
            got = res[case]
            if kind in ("all_reduce", "reduce", "reduce_scatter"):
                shape, op = case[1], case[2]
                dtype = "int32" if op == "int32" else "float64"
                want = _expected_reduction([data(seed, k, shape, dtype, "sum" if op == "int32" else op)
                                            for k in range(p)], "sum" if op == "int32" else op)
                if kind == "reduce_scatter":
                    _same(got, np.array_split(want, p)[r])
                elif kind == "reduce" and r != case[4]:
                    assert got is None
                else:
                    _same(got, want)
            elif kind == "broadcast":
                shape, root = case[1], case[3]
                dtype = {(7, 3): "int64", (2,): "float32", (): "float64"}[shape]
                _same(got, data(seed, root, shape, dtype))
            elif kind == "broadcast into buffer":
                _same(got[0], data(seed, case[2], (5,)))
                assert got[1], "a non-root's buffer is filled in place and returned"
            elif kind in ("scatter", "scatter list"):
                root = case[2]
                if kind == "scatter":
                    _same(got, np.array_split(data(seed, root, (7, 3)), p)[r])
                else:
                    _same(got, data(seed, root, (r % 2 + 1, 4), op=str(r)))
            elif kind == "gather":
                want = np.concatenate([data(seed, k, gather_shape(k)) for k in range(p)])
                if r == case[2]:
                    _same(got, want)
                else:
                    assert got is None
            elif kind == "all_gather":
                _same(got, np.concatenate([data(seed, k, gather_shape(k)) for k in range(p)]))
            else:
                _same(got, np.arange(p, dtype="float64"))
    return len(results[0])


@pytest.mark.parametrize("p", range(1, 9))
def test_every_collective_matches_numpy(p):
    results = launch(run_every_collective, p, args=(p,), timeout=120)
    assert check_every_collective(results, p) >= 80


def keep_inputs(g: ProcessGroup) -> list[bool]:
    """The collectives do not modify their inputs."""
    x = data(0, g.rank, (6, 2))
    before = x.copy()
    g.all_reduce(x)
    g.reduce_scatter(x, algorithm="tree")
    g.reduce(x, 0, algorithm="naive")
    g.all_gather(x)
    g.broadcast(x if g.rank == 0 else None)
    return [np.array_equal(x, before)]


def test_inputs_are_not_modified():
    assert launch(keep_inputs, 3) == [[True]] * 3


def argument_errors(g: ProcessGroup) -> list[str]:
    """Each bad call's exception type and message (every rank makes the same calls)."""
    x = np.arange(4.0)
    calls = [
        lambda: g.scatter(x, 0, algorithm="ring"),
        lambda: g.all_reduce(x, op="avg"),
        lambda: g.all_reduce(np.arange(4), op="mean"),
        lambda: g.reduce(x, root=g.world_size),
        lambda: g.all_reduce(np.array(["a", "b"])),
        lambda: g.reduce_scatter(np.float64(1.0)),
        lambda: g.broadcast(None, root=g.rank),
        lambda: g.scatter([x] * (g.world_size + 1), root=g.rank),
    ]
    return errors_of(calls)


def errors_of(calls: list) -> list[str]:
    """Each call's exception type and message, or "no error"."""
    seen = []
    for call in calls:
        try:
            call()
        except (ValueError, TypeError, CollectiveMismatchError) as exc:
            seen.append(f"{type(exc).__name__}: {exc}")
        else:
            seen.append("no error")
    return seen


def test_argument_errors_say_what_was_expected():
    seen = launch(argument_errors, 2)[0]
    assert seen[0].startswith("ValueError") and "tree, naive" in seen[0]
    assert seen[1].startswith("ValueError") and "'avg'" in seen[1] and "sum" in seen[1]
    assert seen[2].startswith("TypeError") and "floating" in seen[2]
    assert seen[3].startswith("ValueError") and "root must be a rank in 0..1" in seen[3]
    assert seen[4].startswith("TypeError") and "numeric" in seen[4]
    assert seen[5].startswith("ValueError") and "axis 0" in seen[5]
    assert seen[6].startswith("TypeError") and "must pass an array" in seen[6]
    assert seen[7].startswith("ValueError") and "2 chunks" in seen[7]

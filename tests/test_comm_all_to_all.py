"""``all_to_all`` (pairwise and ring) against a numpy oracle, on the sim backend and on real MPI.

Each rank builds chunk j for rank j from a seed naming (sender, receiver), so the test rebuilds
what every rank must receive. Chunk shapes differ for every pair (some empty, some 2-D, one 0-d),
dtypes are preserved, and both send protocols run: under "rendezvous" a send completes only once
its receive is posted, so an algorithm that could deadlock would. The α-β clock of both algorithms
is checked against ``closed_form`` in ``test_comm_cost`` (it runs every collective).
"""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

from mlsys_lib.comm import CostModel, ProcessGroup, RankFailedError, closed_form, launch
from mlsys_lib.comm.mpi import find_mpiexec
from test_comm_collectives import errors_of

ALGORITHMS = ("pairwise", "ring")
DTYPES = ("float64", "int32", "complex64", "bool")


def chunk(src: int, dst: int, dtype: str) -> np.ndarray:
    """The chunk rank ``src`` sends rank ``dst``: a shape that depends on the pair, random values."""
    rng = np.random.default_rng([src, dst, len(dtype)])
    ragged = [(), (0,), (3,), (2, 4), (5,), (1, 3)][(3 * src + dst) % 6]
    shape = ragged if dtype == "float64" else ((src + 2 * dst) % 4,)
    values = rng.integers(-9, 9, size=shape) if dtype != "float64" else rng.standard_normal(shape)
    return np.asarray(values).astype(dtype)


def exchange_every_case(g: ProcessGroup) -> dict:
    """Run every (algorithm, dtype) case on this rank; also whether the inputs were left unmodified."""
    out = {}
    for algorithm in ALGORITHMS:
        for dtype in DTYPES:
            chunks = [chunk(g.rank, j, dtype) for j in range(g.world_size)]
            before = [c.copy() for c in chunks]
            out[algorithm, dtype] = g.all_to_all(chunks, algorithm)
            assert all(np.array_equal(a, b) for a, b in zip(chunks, before)), "all_to_all modified its input"
    return out


def check_every_case(results: list[dict]) -> int:
    """Assert rank r's item i equals chunk(i, r) (shape, dtype and values) for every case; count them."""
    p = len(results)
    for case in results[0]:
        for r, res in enumerate(results):
            got = res[case]
            assert isinstance(got, list) and len(got) == p
            for i, item in enumerate(got):
                want = chunk(i, r, case[1])
                assert isinstance(item, np.ndarray)
                assert (item.shape, item.dtype) == (want.shape, want.dtype), (case, r, i, item.shape, item.dtype)
                np.testing.assert_array_equal(item, want)
    return len(results[0])


@pytest.mark.parametrize("protocol", ["eager", "rendezvous"])
@pytest.mark.parametrize("p", [1, 2, 3, 4])
def test_all_to_all_matches_numpy(p, protocol):
    results = launch(exchange_every_case, p, protocol=protocol, timeout=120)
    assert check_every_case(results) == len(ALGORITHMS) * len(DTYPES)


def bytes_moved(g: ProcessGroup, elements: int) -> dict:
    """(bytes sent, bytes received, clock) of each algorithm on p equal float64 chunks of ``elements``."""
    out = {}
    for algorithm in ALGORITHMS:
        g.barrier()
        g.reset_trace()
        g.all_to_all([np.full(elements, float(g.rank))] * g.world_size, algorithm)
        out[algorithm] = (g.bytes_sent, g.bytes_received, g.clock)
    return out


def test_ring_moves_chunks_over_several_links_pairwise_once():
    p, elements = 4, 5
    n = 8 * elements * p  # bytes one rank passes in
    cost = CostModel(alpha=1000.0, beta=1.0, gamma=0.0)
    for traced in launch(bytes_moved, p, args=(elements,), cost=cost):
        assert traced["pairwise"][:2] == ((p - 1) * n // p,) * 2
        assert traced["ring"][:2] == ((p - 1) * n // 2,) * 2  # chunk i -> j crosses (j - i) mod p links
        assert traced["pairwise"][2] == (p - 1) * (1000 + n // p) == closed_form(
            "all_to_all", "pairwise", n, p, 1000, 1)
        assert traced["ring"][2] == (p - 1) * 1000 + n // p * p * (p - 1) // 2 == closed_form(
            "all_to_all", "ring", n, p, 1000, 1)


def test_closed_forms_of_all_to_all():
    a, b, n = 3.0, 0.01, 4096.0
    for p in (2, 3, 8):
        assert closed_form("all_to_all", "pairwise", n, p, a, b) == pytest.approx((p - 1) * (a + n / p * b))
        assert closed_form("all_to_all", "ring", n, p, a, b) == pytest.approx((p - 1) * a + (p - 1) / 2 * n * b)
    assert closed_form("all_to_all", "ring", n, 1, a, b) == 0.0
    assert closed_form("all_to_all", "ring", n, 2, a, b) == closed_form("all_to_all", "pairwise", n, 2, a, b)
    with pytest.raises(ValueError, match="all_to_all has no 'tree' algorithm: expected one of pairwise, ring"):
        closed_form("all_to_all", "tree", n, 4, a, b)


def argument_errors(g: ProcessGroup) -> list[str]:
    """Each bad call's exception type and message (every rank makes the same calls)."""
    p = g.world_size
    calls = [
        lambda: g.all_to_all([np.zeros(2)] * (p + 1)),
        lambda: g.all_to_all(np.zeros((p, 2))),
        lambda: g.all_to_all([np.zeros(2), np.zeros(2, np.int32)]),
        lambda: g.all_to_all([np.zeros(2)] * p, algorithm="tree"),
        lambda: g.all_to_all([np.array(["a"])] * p),
        lambda: g.all_to_all([np.zeros(2, "float32" if g.rank else "float64")] * p),
    ]
    return errors_of(calls)


def test_argument_errors_say_what_was_expected():
    seen = launch(argument_errors, 2)[0]
    assert seen[0] == "ValueError: all_to_all: pass 2 chunks (one per rank, chunk j goes to rank j), got 3"
    assert seen[1].startswith("TypeError: all_to_all: chunks must be a list of 2 arrays") and "ndarray" in seen[1]
    assert seen[2].startswith("TypeError: all_to_all: the chunks must share a dtype")
    assert seen[3].startswith("ValueError") and "pairwise, ring" in seen[3]
    assert seen[4].startswith("TypeError") and "numeric" in seen[4]
    assert seen[5] == ("CollectiveMismatchError: all_to_all: the ranks disagree on the dtype "
                       "(rank 0: float64, rank 1: float32)")


needs_mpi = pytest.mark.skipif(importlib.util.find_spec("mpi4py") is None or find_mpiexec() is None,
                               reason='needs mpi4py and mpiexec: pip install "mlsys_lib[mpi]"')


def on_mpi(g: ProcessGroup) -> tuple:
    return exchange_every_case(g), bytes_moved(g, 5), g.backend


@needs_mpi
@pytest.mark.parametrize("p", [1, 2, 3, 4])
def test_all_to_all_on_mpi(p):
    cost = CostModel(alpha=1000.0, beta=1.0, gamma=0.0)
    results = launch(on_mpi, p, backend="mpi", protocol="rendezvous", cost=cost, timeout=120)
    assert {r[2] for r in results} == {"mpi"}
    assert check_every_case([r[0] for r in results]) == len(ALGORITHMS) * len(DTYPES)
    n = 8 * 5 * p
    for r in results:
        assert r[1]["pairwise"][2] == closed_form("all_to_all", "pairwise", n, p, 1000, 1)
        assert r[1]["ring"][2] == closed_form("all_to_all", "ring", n, p, 1000, 1)


def fails_inside(g: ProcessGroup) -> None:
    if g.rank == 1:
        raise RuntimeError("rank 1 fails before the exchange")
    g.all_to_all([np.ones(3)] * g.world_size, "ring")


def test_a_failed_peer_is_named_not_waited_for():
    with pytest.raises(RankFailedError) as info:
        launch(fails_inside, 3, timeout=60)
    assert info.value.rank == 1

"""The α-β-γ model: the lecture's closed forms, and the sim backend's traced clock, byte and message counts.

α, β, γ are binary fractions and n is divisible by p, so the traced times are compared exactly.
The closed forms hold for every p for the ring, naive and pairwise algorithms and the tree
broadcast; the tree scatter, gather and reduce (and what is built on them) assume p is a power of two.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from mlsys_lib.comm import ALGORITHMS, CostModel, ProcessGroup, closed_form, launch

COST = CostModel(alpha=1000.0, beta=1.0, gamma=0.5)
ELEMENTS_PER_RANK = 6  # float64: n = 48·p bytes


def _run(g: ProcessGroup, op: str, algorithm: str, n_elems: int) -> None:
    p, r = g.world_size, g.rank
    root = 1 % p
    x = np.random.default_rng(r).standard_normal(n_elems)
    if op == "broadcast":
        g.broadcast(x if r == root else None, root, algorithm)
    elif op == "reduce":
        g.reduce(x, root, "sum", algorithm)
    elif op == "scatter":
        g.scatter(x if r == root else None, root, algorithm)
    elif op == "gather":
        g.gather(x[: n_elems // p], root, algorithm)
    elif op == "all_gather":
        g.all_gather(x[: n_elems // p], algorithm)
    elif op == "all_to_all":
        g.all_to_all(np.split(x, p), algorithm)
    else:
        getattr(g, op)(x, "sum", algorithm)


def trace_every_collective(g: ProcessGroup) -> dict[tuple[str, str], tuple[float, int, int, int, int]]:
    """(clock, bytes sent, bytes received, messages sent, messages received) of this rank for every collective
    and algorithm."""
    out = {}
    for op, algorithms in ALGORITHMS.items():
        for algorithm in algorithms:
            g.barrier()
            g.reset_trace()
            _run(g, op, algorithm, ELEMENTS_PER_RANK * g.world_size)
            out[op, algorithm] = (g.clock, g.bytes_sent, g.bytes_received, g.messages_sent, g.messages_received)
    return out


def closed_form_holds(op: str, algorithm: str, p: int) -> bool:
    """Whether the closed form is exact for p (see the module docstring)."""
    return algorithm != "tree" or op == "broadcast" or p & (p - 1) == 0


def check_traces(traces: list[dict]) -> int:
    """Assert the traced time (max over ranks) equals the closed form wherever it holds; count them."""
    p = len(traces)
    n = 8 * ELEMENTS_PER_RANK * p
    checked = 0
    for (op, algorithm) in traces[0]:
        traced = max(t[op, algorithm][0] for t in traces)
        formula = closed_form(op, algorithm, n, p, COST.alpha, COST.beta, COST.gamma)
        if closed_form_holds(op, algorithm, p):
            assert traced == formula, (op, algorithm, p, traced, formula)
            checked += 1
        else:
            assert 0 < traced <= formula, (op, algorithm, p, traced, formula)
    return checked


@pytest.mark.parametrize("p", [1, 2, 3, 4, 5, 8])
def test_traced_time_equals_closed_form(p):
    traces = launch(trace_every_collective, p, cost=COST)
    checked = check_traces(traces)
    assert checked >= 12 if p & (p - 1) else checked == sum(map(len, ALGORITHMS.values()))
    n = 8 * ELEMENTS_PER_RANK * p
    for t in traces:  # ring all-reduce moves 2(p-1)/p·n bytes each way on every rank, in 2(p-1) messages
        assert t["all_reduce", "ring"][1:] == (2 * (p - 1) * n // p,) * 2 + (2 * (p - 1),) * 2
        assert t["reduce_scatter", "ring"][1:] == t["all_gather", "ring"][1:] == ((p - 1) * n // p,) * 2 + (p - 1,) * 2
    if p > 1:
        assert traces[0]["all_reduce", "naive"][1] == (p - 1) * n  # the root sends p-1 full vectors
    # the tree broadcast: every rank but the root receives the message once, p - 1 messages in all
    assert [t["broadcast", "tree"][4] for t in traces] == [0 if r == 1 % p else 1 for r in range(p)]
    for key in traces[0]:  # every message sent is received
        assert sum(t[key][3] for t in traces) == sum(t[key][4] for t in traces), key


def test_closed_forms_are_the_lecture_formulas():
    a, b, g, n = 3.0, 0.01, 0.001, 4096.0
    for p in (2, 4, 8, 16):
        log_p = math.log2(p)
        assert closed_form("broadcast", "tree", n, p, a, b) == pytest.approx(log_p * (a + n * b))
        assert closed_form("reduce", "tree", n, p, a, b, g) == pytest.approx(log_p * (a + n * b + n * g))
        for op in ("scatter", "gather"):
            assert closed_form(op, "tree", n, p, a, b) == pytest.approx(log_p * a + (p - 1) / p * n * b)
        assert closed_form("all_reduce", "ring", n, p, a, b, g) == pytest.approx(
            2 * (p - 1) * a + 2 * (p - 1) / p * n * b + (p - 1) / p * n * g)
        assert closed_form("all_gather", "ring", n, p, a, b) == pytest.approx((p - 1) * a + (p - 1) / p * n * b)
        assert closed_form("all_reduce", "naive", n, p, a, b, g) == pytest.approx(
            2 * (p - 1) * (a + n * b) + (p - 1) * n * g)
    # latency-bound small messages favour the tree, bandwidth-bound large ones the ring
    assert closed_form("all_reduce", "tree", 8, 64, a, b, g) < closed_form("all_reduce", "ring", 8, 64, a, b, g)
    assert closed_form("all_reduce", "ring", 1e9, 64, a, b, g) < closed_form("all_reduce", "tree", 1e9, 64, a, b, g)
    assert closed_form("broadcast", "tree", 1e6, 1, a, b) == 0.0
    assert closed_form("broadcast", "tree", n, 5, a, b) == pytest.approx(3 * (a + n * b))  # ⌈log2 5⌉ = 3


def test_closed_form_rejects_bad_arguments():
    with pytest.raises(ValueError, match="scatter has no 'ring' algorithm"):
        closed_form("scatter", "ring", 8, 2, 1, 1)
    with pytest.raises(ValueError, match="unknown collective 'allreduce'"):
        closed_form("allreduce", "ring", 8, 2, 1, 1)
    with pytest.raises(ValueError, match="p must be an int >= 1"):
        closed_form("all_reduce", "ring", 8, 0, 1, 1)
    with pytest.raises(ValueError, match="CostModel.beta"):
        CostModel(beta=-1)


def ping_pong(g: ProcessGroup, nbytes: int) -> float:
    """One message each way: the clock after two messages of nbytes."""
    if g.rank == 0:
        g.send(np.zeros(nbytes, np.uint8), 1)
        g.recv(1)
    else:
        g.send(g.recv(0), 0)
    return g.clock


def test_clock_of_point_to_point_messages():
    assert launch(ping_pong, 2, args=(10,), cost=COST) == [2 * (1000 + 10)] * 2

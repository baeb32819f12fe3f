"""Sends that wait for their receive ("rendezvous"), deadlock detection, and requests never waited on.

The oracles are MPI's rules, checked from outside the library: wall-clock times for when a send
returns, which message a receive gets, and which programs must deadlock (every rank sends first
in a ring) or not (isend first, or receives posted first). A deadlock must be reported as a
DeadlockError naming every rank and what it waits for, quickly, never as a hang or a timeout.
"""

from __future__ import annotations

import time

import numpy as np
import pytest

from mlsys_lib.comm import (PROTOCOLS, DeadlockError, ProcessGroup, RankFailedError, UnfinishedRequestError,
                            launch)
from mlsys_lib.comm.sim import INLINE_BYTES
from mlsys_lib.comm.sim_launcher import find_deadlock

from test_comm_collectives import check_every_collective, run_every_collective

BIG = INLINE_BYTES // 8 + 1  # float64 elements: this payload goes through shared memory


def send_first_ring(g: ProcessGroup, n: int) -> np.ndarray:
    """Every rank does a blocking send to its right neighbour, then receives from its left one."""
    p, r = g.world_size, g.rank
    g.send(np.full(n, float(r)), (r + 1) % p)
    return g.recv((r - 1) % p)


def isend_first_ring(g: ProcessGroup, n: int) -> np.ndarray:
    p, r = g.world_size, g.rank
    sending = g.isend(np.full(n, float(r)), (r + 1) % p)
    got = g.recv((r - 1) % p)
    sending.wait()
    return got


@pytest.mark.parametrize("n", [3, BIG])
def test_send_first_ring_deadlocks_under_rendezvous_and_is_named_at_once(n):
    p = 4
    start = time.monotonic()
    with pytest.raises(DeadlockError) as info:
        launch(send_first_ring, p, args=(n,), protocol="rendezvous", timeout=60)
    assert time.monotonic() - start < 10, "a deadlock is reported at once, not at the timeout"
    err = info.value
    assert sorted(err.waits) == list(range(p))
    for r in range(p):
        assert err.waits[r].startswith(f"rank {r} waits in send to rank {(r + 1) % p} (tag 0, {n * 8} bytes)")
        assert f"rank {(r + 1) % p} has started 0 such receives" in err.waits[r]
    assert str(err).startswith(f"deadlock: ranks {list(range(p))} all wait for one another")
    assert "isend" in str(err)  # the hint


def test_send_first_ring_works_when_sends_are_buffered():
    for r, got in enumerate(launch(send_first_ring, 3, args=(BIG,))):
        np.testing.assert_array_equal(got, np.full(BIG, float((r - 1) % 3)))


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("n", [0, 3, BIG])
def test_isend_first_ring_works_under_both_protocols(protocol, n):
    for r, got in enumerate(launch(isend_first_ring, 4, args=(n,), protocol=protocol)):
        np.testing.assert_array_equal(got, np.full(n, float((r - 1) % 4)))


def timed_send(g: ProcessGroup, n: int, delay: float) -> float:
    """Rank 0 sends; rank 1 posts its receive after ``delay`` s. Each returns a wall-clock time:
    rank 0 when its send returned, rank 1 when it posted the receive."""
    if g.rank == 0:
        g.send(np.ones(n), 1)
        return time.time()
    time.sleep(delay)
    posted = time.time()
    g.recv(0)
    return posted


@pytest.mark.parametrize("n", [3, BIG])
def test_rendezvous_send_returns_only_after_the_receive_is_posted(n):
    sent, posted = launch(timed_send, 2, args=(n, 0.5), protocol="rendezvous")
    assert sent >= posted
    sent, posted = launch(timed_send, 2, args=(n, 0.5), protocol="eager")
    assert sent < posted - 0.2, "an eager send returns at once"


def receives_posted_first(g: ProcessGroup) -> np.ndarray:
    """Both ranks start their receive before a blocking send: a started irecv matches a rendezvous send."""
    other = 1 - g.rank
    receiving = g.irecv(other)
    g.send(np.full(BIG, float(g.rank)), other)
    return receiving.wait()


def test_an_irecv_started_before_the_send_lets_it_complete():
    r0, r1 = launch(receives_posted_first, 2, protocol="rendezvous")
    np.testing.assert_array_equal(r0, np.full(BIG, 1.0))
    np.testing.assert_array_equal(r1, np.full(BIG, 0.0))


def receives_match_in_the_order_started(g: ProcessGroup) -> list:
    if g.rank == 0:
        for i in range(3):
            g.send(np.array([i]), 1)
        return []
    first, second, third = g.irecv(0), g.irecv(0), g.irecv(0)
    return [third.wait().item(), first.wait().item(), second.wait().item()]


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_receives_match_messages_in_the_order_they_were_started(protocol):
    assert launch(receives_match_in_the_order_started, 2, protocol=protocol)[1] == [2, 0, 1]


def both_receive_first(g: ProcessGroup) -> np.ndarray:
    got = g.recv(1 - g.rank, tag=7)
    g.send(np.ones(2), 1 - g.rank, tag=7)
    return got


def test_receive_first_deadlocks_under_either_protocol():
    for protocol in PROTOCOLS:
        with pytest.raises(DeadlockError) as info:
            launch(both_receive_first, 2, protocol=protocol, timeout=60)
        assert info.value.waits == {
            r: f"rank {r} waits in recv from rank {1 - r} (tag 7) for message 1, and rank {1 - r} has sent it 0 "
               f"on that tag" for r in (0, 1)}


def two_of_three_deadlock(g: ProcessGroup) -> None:
    """Rank 0 returns; ranks 1 and 2 wait in recv from each other."""
    if g.rank > 0:
        g.recv(3 - g.rank)


def barrier_against_recv(g: ProcessGroup) -> None:
    if g.rank == 0:
        g.barrier()
    else:
        g.recv(0)


def test_partial_deadlock_and_barrier_deadlock_are_named():
    with pytest.raises(DeadlockError) as info:
        launch(two_of_three_deadlock, 3, timeout=60)
    assert sorted(info.value.waits) == [1, 2]
    assert "(ranks [0] had returned)" in str(info.value)
    with pytest.raises(DeadlockError) as info:
        launch(barrier_against_recv, 2, timeout=60)
    assert info.value.waits[0].startswith("rank 0 waits in a barrier")
    assert info.value.waits[1].startswith("rank 1 waits in recv from rank 0 (tag 0)")


def slow_sender(g: ProcessGroup) -> float:
    """Every rank but 0 waits (blocked) while rank 0 computes for a while: not a deadlock."""
    if g.rank == 0:
        time.sleep(1.0)
        for dst in range(1, g.world_size):
            g.send(np.ones(BIG), dst)
        return 0.0
    return float(g.recv(0).sum())


def test_ranks_waiting_on_a_busy_rank_are_not_a_deadlock():
    assert launch(slow_sender, 3, protocol="rendezvous") == [0.0, BIG, BIG]


@pytest.mark.parametrize("p", [3, 5])
def test_every_library_collective_completes_under_rendezvous(p):
    """The library's own algorithms never rely on buffered sends."""
    results = launch(run_every_collective, p, args=(p,), protocol="rendezvous", timeout=120)
    assert check_every_collective(results, p) >= 80


def forgets_a_request(g: ProcessGroup, which: str) -> float:
    other = 1 - g.rank
    if which == "isend" and g.rank == 0:
        g.isend(np.ones(3), other, tag=5)  # never waited on
        return 0.0
    if which == "irecv" and g.rank == 1:
        g.irecv(other)  # never waited on
        g.recv(other, tag=1)
        return 0.0
    if which == "irecv":
        g.send(np.ones(1), other)
        g.send(np.ones(1), other, tag=1)
        return 0.0
    if which == "waited":
        if g.rank == 0:
            g.isend(np.ones(3), other).wait()
            return 0.0
        return float(g.irecv(other).wait().sum())
    return float(g.recv(other, tag=5).sum())


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_request_never_waited_on_fails_the_launch(protocol):
    with pytest.raises(RankFailedError) as info:
        launch(forgets_a_request, 2, args=("isend",), protocol=protocol, timeout=60)
    assert info.value.rank == 0 and isinstance(info.value.exception, UnfinishedRequestError)
    assert "rank 0 returned with 1 request(s) never waited on: isend to rank 1 (tag 5, 24 bytes)" in str(info.value)
    with pytest.raises(RankFailedError) as info:
        launch(forgets_a_request, 2, args=("irecv",), protocol=protocol, timeout=60)
    assert info.value.rank == 1 and isinstance(info.value.exception, UnfinishedRequestError)
    assert "never waited on: irecv from rank 0 (tag 0)" in str(info.value)
    assert launch(forgets_a_request, 2, args=("waited",), protocol=protocol) == [0.0, 3.0]


def test_launch_checks_the_protocol():
    with pytest.raises(ValueError, match="unknown protocol 'buffered'"):
        launch(isend_first_ring, 2, args=(1,), protocol="buffered")


def _report(waiting_for, sent=(), started=()):
    return (waiting_for, dict(sent), dict(started))


def test_find_deadlock_trusts_only_what_the_peers_reported():
    data = (0, 0)
    # rank 0 waits for message 1 from rank 1, which reported (after sending it) that it waits in turn:
    # rank 0 is about to wake up, so this is no deadlock, though both ranks reported "blocked"
    blocked = {0: _report(("recv", 1, "data", data, 1)),
               1: _report(("recv", 0, "data", data, 1), sent={(0, "data", data): 1})}
    assert find_deadlock(2, {}, blocked) is None
    blocked[1] = _report(("recv", 0, "data", data, 1))
    assert sorted(find_deadlock(2, {}, blocked)) == [0, 1]
    assert find_deadlock(3, {}, blocked) is None, "rank 2 has not reported: it may still send"
    assert find_deadlock(2, {1: ("ok", None)}, {0: blocked[0]}) is None, "rank 0 learns that its peer ended"
    # rendezvous: rank 0's send waits for rank 1's first receive; rank 1 reported having started it
    blocked = {0: _report(("send", 1, data, 1, 8)), 1: _report(("send", 0, data, 1, 8), started={(0, data): 1})}
    assert find_deadlock(2, {}, blocked) is None
    blocked[1] = _report(("send", 0, data, 1, 8), started={(0, (0, 5)): 1})  # another tag does not match
    assert sorted(find_deadlock(2, {}, blocked)) == [0, 1]

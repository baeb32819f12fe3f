"""Point-to-point messages of the sim backend: send/recv, isend/irecv, tags, buffers, barrier, errors."""

from __future__ import annotations

import numpy as np
import pytest

from mlsys_lib.comm import ProcessGroup, launch
from mlsys_lib.comm.sim import INLINE_BYTES


def ring_pass(g: ProcessGroup, n: int) -> np.ndarray:
    """Send this rank's array to the right neighbour, receive the left one's (isend first: no deadlock)."""
    p, r = g.world_size, g.rank
    x = np.full(n, r, dtype=np.int32)
    sending = g.isend(x, (r + 1) % p)
    got = g.recv((r - 1) % p)
    sending.wait()
    return got


@pytest.mark.parametrize("n", [0, 3, INLINE_BYTES // 4 + 1])  # empty, inline, through shared memory
def test_ring_pass(n):
    p = 4
    for r, got in enumerate(launch(ring_pass, p, args=(n,))):
        np.testing.assert_array_equal(got, np.full(n, (r - 1) % p, dtype=np.int32))


def many_messages(g: ProcessGroup) -> list:
    """Order per (source, tag), tags kept apart, receive into a buffer, irecv before the send, dtypes."""
    if g.rank == 0:
        big = np.arange(10_000, dtype=np.float64).reshape(100, 100)
        for i in range(5):
            g.send(big + i, 1, tag=i % 2)
        g.send(np.array(7, np.int16), 1, tag=3)
        g.send(np.array([True, False]), 1)
        g.send(np.array([1 + 2j]), 1)
        request = g.irecv(1)
        g.barrier()
        return [request.wait()]
    request_first = g.irecv(0, tag=1)  # posted before the messages are sent
    odd = [request_first.wait(), g.recv(0, tag=1)]
    out = np.empty(10_000)
    even = [g.recv(0, tag=0) for _ in range(2)] + [g.recv(0, out=out, tag=0)]
    scalar = g.recv(0, tag=3)
    flags, complex_ = g.recv(0), g.recv(0)
    g.send(np.arange(3), 0)
    g.barrier()
    return [odd, even, out, scalar, flags, complex_]


def test_messages_keep_order_tags_and_dtypes():
    r0, r1 = launch(many_messages, 2)
    np.testing.assert_array_equal(r0[0], np.arange(3))
    odd, even, out, scalar, flags, complex_ = r1
    base = np.arange(10_000, dtype=np.float64).reshape(100, 100)
    for got, i in zip(odd, (1, 3)):
        np.testing.assert_array_equal(got, base + i)
    for got, i in zip(even, (0, 2, 4)):
        np.testing.assert_array_equal(got.reshape(100, 100), base + i)
    assert even[2].shape == (10_000,) and np.array_equal(out, even[2])  # received into the flat buffer
    assert scalar.shape == () and scalar.dtype == np.int16 and scalar == 7
    assert flags.dtype == bool and list(flags) == [True, False]
    assert complex_.dtype == np.complex128 and complex_[0] == 1 + 2j


def send_then_modify(g: ProcessGroup) -> np.ndarray | None:
    """Changing an array after send() does not change what was sent."""
    if g.rank == 0:
        x = np.ones(4096)
        g.send(x, 1)
        x[:] = -1
        return None
    return g.recv(0)


def test_send_copies_the_payload():
    assert launch(send_then_modify, 2)[1].tolist() == [1.0] * 4096


def point_to_point_errors(g: ProcessGroup) -> list[str]:
    calls = [lambda: g.send(np.ones(2), g.rank), lambda: g.send(np.ones(2), 5),
             lambda: g.recv(-1), lambda: g.send(np.ones(2), 1 - g.rank, tag=-3),
             lambda: g.recv(1 - g.rank, out=np.ones((4, 4))[:, 0]),
             lambda: g.send(np.array([object()]), 1 - g.rank)]
    seen = []
    for call in calls:
        try:
            call()
        except (ValueError, TypeError) as exc:
            seen.append(f"{type(exc).__name__}: {exc}")
    if g.rank == 0:
        g.send(np.ones(3), 1)
    else:
        try:
            g.recv(0, out=np.empty(4))
        except ValueError as exc:
            seen.append(f"ValueError: {exc}")
    return seen


def test_point_to_point_errors():
    r0, r1 = launch(point_to_point_errors, 2)
    assert "this rank itself" in r0[0]
    assert "dst must be a rank in 0..1, got 5" in r0[1]
    assert "src must be a rank in 0..1, got -1" in r0[2]
    assert "tag must be an int in 0.." in r0[3]
    assert "C-contiguous" in r0[4]
    assert r0[5].startswith("TypeError") and "numeric" in r0[5]
    assert len(r0) == 6
    assert "rank 1 receives into out of dtype float64 and size 4, but rank 0 sent dtype float64 and shape (3,)" in r1[6]


def rank_and_size(g: ProcessGroup, extra: str) -> tuple:
    return g.rank, g.world_size, g.backend, extra


def test_launch_passes_args_and_returns_results_by_rank():
    assert launch(rank_and_size, 3, args=("x",)) == [(r, 3, "sim", "x") for r in range(3)]


def test_launch_checks_its_arguments():
    with pytest.raises(ValueError, match="world_size must be an int >= 1"):
        launch(rank_and_size, 0)
    with pytest.raises(ValueError, match="unknown backend 'gloo'"):
        launch(rank_and_size, 2, backend="gloo")
    with pytest.raises(TypeError, match="fn must be callable"):
        launch("not a function", 2)

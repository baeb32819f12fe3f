"""The sim backend's transport: shared-memory segments reused only once released, BLAS threads per rank."""

from __future__ import annotations

import os

import numpy as np
import pytest

from mlsys_lib.comm import PROTOCOLS, ProcessGroup, launch
from mlsys_lib.comm.shm import SegmentPool, attach, release, unlink_run
from mlsys_lib.comm.sim import INLINE_BYTES
from mlsys_lib.comm.sim_launcher import new_token

BIG = INLINE_BYTES // 8 + 1  # float64 elements: these payloads go through shared memory


def test_a_segment_is_reused_only_once_its_receiver_released_it():
    token = new_token()
    pool = SegmentPool(token, 0)
    try:
        first = pool.take(10_000)
        second = pool.take(100)
        assert second.name != first.name  # the first one is still busy
        receiver_side = attach(first.name)  # released through another mapping, as a receiver does
        release(receiver_side)
        receiver_side.close()
        assert pool.take(5_000).name == first.name
        assert pool.take(20_000).name not in (first.name, second.name)  # the free ones are too small
    finally:
        pool.close()
        assert unlink_run(token, 1) == 3


def fan_out(g: ProcessGroup, rounds: int, per_round: int) -> list[np.ndarray]:
    """Rank 0 starts ``per_round`` large sends to each other rank before any is received, ``rounds`` times;
    the others return what they received."""
    received = []
    for k in range(rounds):
        if g.rank == 0:
            requests = [g.isend(np.full(BIG, 1000.0 * k + 10 * i + dst), dst, tag=i)
                        for i in range(per_round) for dst in range(1, g.world_size)]
            g.barrier()
            for request in requests:
                request.wait()
        else:
            g.barrier()
            received += [g.recv(0, tag=i) for i in range(per_round)]
        g.barrier()  # every payload of the round has been copied out: the next round reuses segments
    return received


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_payloads_in_flight_are_never_overwritten(protocol):
    rounds, per_round = 3, 4
    results = launch(fan_out, 3, args=(rounds, per_round), protocol=protocol)
    for dst in (1, 2):
        expected = [1000.0 * k + 10 * i + dst for k in range(rounds) for i in range(per_round)]
        assert [got.tolist() for got in results[dst]] == [[value] * BIG for value in expected]


def blas_threads(g: ProcessGroup) -> list[int]:
    from threadpoolctl import threadpool_info
    return [lib["num_threads"] for lib in threadpool_info() if lib["user_api"] == "blas"]


def test_each_rank_gives_its_blas_at_most_its_share_of_the_cores():
    p = 4
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    per_rank = launch(blas_threads, p)
    assert all(threads and all(1 <= n <= max(1, cores // p) for n in threads) for threads in per_rank)

"""Failures: a rank that raises, dies or hangs fails the launch quickly, names that rank, reaps every
process and leaves no shared memory behind; every other rank's error names the rank that failed first, not
the peer it was waiting for; ranks that disagree in a collective all raise the same error.
"""

from __future__ import annotations

import multiprocessing
import os
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from mlsys_lib.comm import (CollectiveMismatchError, LaunchTimeoutError, PeerFailedError, ProcessGroup,
                            RankFailedError, launch)
from mlsys_lib.comm.shm import PREFIX
from mlsys_lib.comm.sim import SimTransport
from mlsys_lib.comm.sim_launcher import new_token

SHM = Path("/dev/shm")
needs_dev_shm = pytest.mark.skipif(not SHM.is_dir(), reason="POSIX shared memory is not listed in /dev/shm here")


def _segments() -> set[str]:
    return {p.name for p in SHM.iterdir() if p.name.startswith(PREFIX)} if SHM.is_dir() else set()


def _record_pid(pid_dir: str, rank: int) -> None:
    Path(pid_dir, str(rank)).write_text(str(os.getpid()))


def _assert_reaped(pid_dir: Path, p: int) -> None:
    pids = [int(Path(pid_dir, str(r)).read_text()) for r in range(p)]
    assert len(pids) == p
    for pid in pids:
        with pytest.raises(ProcessLookupError):  # gone, not even a zombie
            os.kill(pid, 0)
    assert multiprocessing.active_children() == []


def fail_during_all_reduce(g: ProcessGroup, how: str, pid_dir: str) -> None:
    """Every rank does one large all-reduce (segments in shared memory); then rank p-2 fails, others wait."""
    _record_pid(pid_dir, g.rank)
    g.all_reduce(np.ones(100_000))
    if g.rank == g.world_size - 2:
        if how == "raise":
            raise ZeroDivisionError("rank-specific failure")
        g.isend(np.ones(50_000), (g.rank + 1) % g.world_size)
        os._exit(3)
    g.all_reduce(np.ones(100_000))


@needs_dev_shm
@pytest.mark.parametrize("how", ["raise", "die"])
def test_failed_rank_fails_the_launch_quickly_and_cleanly(how, tmp_path):
    before = _segments()
    start = time.monotonic()
    with pytest.raises(RankFailedError) as info:
        launch(fail_during_all_reduce, 4, args=(how, str(tmp_path)), timeout=60)
    assert time.monotonic() - start < 15
    err = info.value
    assert err.rank == 2
    if how == "raise":
        assert isinstance(err.exception, ZeroDivisionError)
        assert str(err).startswith("rank 2 raised: ZeroDivisionError: rank-specific failure")
        assert "fail_during_all_reduce" in str(err)  # the rank's traceback is included
    else:
        assert str(err).startswith("rank 2 died") and "exit code 3" in str(err)
    for r in (0, 1, 3):  # their pending all_reduce raised (they were not killed), naming rank 2
        assert err.failures[r].kind == "raised"
        assert isinstance(err.failures[r].exception, PeerFailedError)
        assert err.failures[r].exception.rank == 2, err.failures[r].summary
        assert f"rank 2 {'raised' if how == 'raise' else 'died'}" in err.failures[r].summary
    _assert_reaped(tmp_path, 4)
    assert _segments() == before


def die_mid_step(g: ProcessGroup, pause: float) -> None:
    """Rank 2 dies between two all-reduces; rank 0 first pauses, then sends to rank 1, which has failed by then
    because of rank 2 (its all-reduce needed rank 2): a peer that failed second."""
    g.all_reduce(np.ones(1000))
    if g.rank == 2:
        os._exit(3)
    if g.rank == 0:
        time.sleep(pause)
        g.send(np.ones(10), 1)
    g.all_reduce(np.ones(1000))


def test_every_surviving_rank_names_the_first_rank_that_failed():
    # A rank that fails because of rank 2 exits too, and its peers may see its pipes close before the launcher
    # has told them about rank 2: which rank sees what first varies from run to run (before the fix a survivor
    # blamed a rank that had failed because of rank 2 in some runs, and rank 0's send to the exited rank 1
    # blamed rank 1 in every run). The transport's side is tested deterministically below; here every survivor
    # of a few whole runs.
    for _ in range(3):
        with pytest.raises(RankFailedError) as info:
            launch(die_mid_step, 4, args=(0.3,), timeout=60)
        err = info.value
        assert err.rank == 2 and str(err).startswith("rank 2 died")
        for r in (0, 1, 3):
            assert isinstance(err.failures[r].exception, PeerFailedError), err.failures[r]
            assert err.failures[r].exception.rank == 2, err.failures[r].summary
            assert "rank 2 died: its process ended without a result (exit code 3)" in err.failures[r].summary


def _rank_0_of_3() -> tuple[SimTransport, list, multiprocessing.connection.Connection]:
    """Rank 0's transport of 3 ranks, with this process as ranks 1 and 2 and as the launcher: (the transport,
    the ends ranks 1 and 2 hold of their pipes with rank 0, the launcher's end of its pipe to rank 0)."""
    to_0 = {src: multiprocessing.Pipe(duplex=False) for src in (1, 2)}
    from_0 = {dst: multiprocessing.Pipe(duplex=False) for dst in (1, 2)}
    launcher_reads, launcher_writes = multiprocessing.Pipe(duplex=False)
    transport = SimTransport(0, 3, new_token(), {src: r for src, (r, _) in to_0.items()},
                             {dst: w for dst, (_, w) in from_0.items()}, launcher_reads)
    peer_ends = [None, (to_0[1][1], from_0[1][0]), (to_0[2][1], from_0[2][0])]
    return transport, peer_ends, launcher_writes


@pytest.mark.parametrize("word, blamed, message", [
    (("abort", 2, "rank 2 died: its process ended without a result (exit code 3)"), 2,
     "rank 0 stopped (waiting for|sending to) rank 1: rank 2 died"),
    (("returned", 1), 1, "rank 1 returned before (sending what rank 0 waits for|reading what rank 0 sends it)"),
])
@pytest.mark.parametrize("call", ["recv", "send"])
def test_a_rank_whose_peer_exited_waits_for_the_launcher_to_say_why(call, word, blamed, message):
    # Rank 1 exits (its pipes close) and only later does the launcher say why: rank 2 failed first (rank 1
    # failed because of it), or rank 1 returned. Rank 0 must not blame rank 1 on seeing its pipes close.
    transport, peers, launcher = _rank_0_of_3()
    try:
        for end in peers[1]:
            end.close()
        later = threading.Timer(0.2, launcher.send, args=(word,))
        later.start()
        with pytest.raises(PeerFailedError, match=message) as info:
            if call == "recv":
                transport.start_recv(1, (0, 0)).wait()
            else:
                transport.post(1, ("ctl", None, None))
        later.join()
        assert info.value.rank == blamed
    finally:
        transport.close()
        for end in (*peers[2], launcher):
            end.close()


def hang(g: ProcessGroup, pid_dir: str) -> None:
    _record_pid(pid_dir, g.rank)
    if g.rank == 0:
        time.sleep(600)
    g.recv(0)


def test_timeout_stops_every_rank(tmp_path):
    start = time.monotonic()
    with pytest.raises(LaunchTimeoutError, match=r"after 3 s: ranks \[0, 1\] had not finished"):
        launch(hang, 2, args=(str(tmp_path),), timeout=3)
    assert time.monotonic() - start < 15
    _assert_reaped(tmp_path, 2)


def disagree(g: ProcessGroup, case: str) -> str:
    """Rank 2 gets its arguments wrong; every rank returns the error its collective raised."""
    odd = g.rank == 2
    x = np.zeros((4, 3))
    try:
        if case == "shape":
            g.all_reduce(np.zeros((4, 2)) if odd else x)
        elif case == "dtype":
            g.reduce_scatter(x.astype(np.float32) if odd else x, algorithm="tree")
        elif case == "collective":
            g.broadcast(x, 0) if odd else g.all_reduce(x)
        elif case == "root":
            g.reduce(x, root=1 if odd else 0)
        elif case == "algorithm":
            g.all_gather(x, algorithm="naive" if odd else "ring")
        elif case == "gather":
            g.gather(np.zeros((2, 5)) if odd else x)
        elif case == "broadcast buffer":
            g.broadcast(np.zeros(3) if odd else x, 0)
    except CollectiveMismatchError as exc:
        return str(exc)
    return "no error"


@pytest.mark.parametrize("case, message", [
    ("shape", "all_reduce: the ranks disagree on the shape (rank 0: (4, 3), rank 1: (4, 3), rank 2: (4, 2))"),
    ("dtype", "reduce_scatter: the ranks disagree on the dtype (rank 0: float64, rank 1: float64, rank 2: float32)"),
    ("collective", "collectives out of step: the ranks disagree on the collective "
                   "(rank 0: all_reduce, rank 1: all_reduce, rank 2: broadcast)"),
    ("root", "reduce: the ranks disagree on the root (rank 0: 0, rank 1: 0, rank 2: 1)"),
    ("algorithm", "all_gather: the ranks disagree on the algorithm (rank 0: ring, rank 1: ring, rank 2: naive)"),
    ("gather", "gather: the ranks disagree on the shape after axis 0 (rank 0: (3,), rank 1: (3,), rank 2: (5,))"),
    ("broadcast buffer", "broadcast: the root (rank 0) sends ('float64', (4, 3)), but these ranks pass arrays "
                         "that do not match (rank 2: ('float64', (3,)))"),
])
def test_mismatched_collective_raises_the_same_error_on_every_rank(case, message):
    errors = launch(disagree, 3, args=(case,))
    assert errors[0] == errors[1] == errors[2]
    assert message in errors[0]


def unpicklable_result(g: ProcessGroup):
    return (lambda: None) if g.rank == 1 else 0


def test_unpicklable_result_is_reported():
    with pytest.raises(RankFailedError, match="rank 1 raised: (PicklingError|AttributeError)"):
        launch(unpicklable_result, 2)

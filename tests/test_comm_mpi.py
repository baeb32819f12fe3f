"""The same collectives on real MPI (mpi4py + Open MPI), through ``mpiexec -n p`` subprocesses.

Skipped when mpi4py or mpiexec is missing (``pip install "mlsys_lib[mpi]"``). Each launch starts
p Python processes, so the cases are batched: one launch runs every collective, the α-β trace and
data-parallel SGD; one checks failures; one runs a student's script under ``mpiexec`` directly.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from mlsys_lib.comm import ProcessGroup, RankFailedError, UnfinishedRequestError, data_parallel_sgd, launch, sgd
from mlsys_lib.comm.mpi import find_mpiexec

pytestmark = pytest.mark.skipif(importlib.util.find_spec("mpi4py") is None or find_mpiexec() is None,
                                reason='needs mpi4py and mpiexec: pip install "mlsys_lib[mpi]"')

from test_comm_collectives import check_every_collective, run_every_collective  # noqa: E402
from test_comm_cost import COST, check_traces, trace_every_collective  # noqa: E402
from test_comm_data_parallel import TRAINING, blobs  # noqa: E402


def everything(g: ProcessGroup, seed: int) -> tuple:
    X, y = blobs()
    return (run_every_collective(g, seed), trace_every_collective(g),
            data_parallel_sgd(g, X, y, *TRAINING.values(), "ring"), g.backend)


def test_collectives_trace_and_sgd_on_mpi():
    p = 3
    results = launch(everything, p, backend="mpi", args=(p,), cost=COST, timeout=240)
    assert {r[3] for r in results} == {"mpi"}
    assert check_every_collective([r[0] for r in results], p) >= 80
    assert check_traces([r[1] for r in results]) >= 12
    W_ref, b_ref = sgd(*blobs(), **TRAINING)
    for W, b in (r[2] for r in results):
        np.testing.assert_allclose(W, W_ref, rtol=1e-10, atol=1e-12)
        np.testing.assert_array_equal(W, results[0][2][0])


def fail_on_rank_1(g: ProcessGroup) -> None:
    if g.rank == 1:
        raise ZeroDivisionError("rank 1 divides by zero")
    g.all_reduce(np.ones(3))


def test_failure_on_mpi_names_the_rank():
    with pytest.raises(RankFailedError) as info:
        launch(fail_on_rank_1, 2, backend="mpi", timeout=120)
    assert info.value.rank == 1
    assert isinstance(info.value.exception, ZeroDivisionError)
    assert str(info.value).startswith("rank 1 raised: ZeroDivisionError: rank 1 divides by zero")


def ring_then_forget(g: ProcessGroup, forget: bool) -> list:
    """A ring shift (isend first) under synchronous sends; with ``forget``, rank 1 leaves an isend unwaited."""
    p, r = g.world_size, g.rank
    sending = g.isend(np.full(1000, float(r)), (r + 1) % p)
    got = g.recv((r - 1) % p)
    sending.wait()
    if forget and r == 1:
        g.isend(np.ones(2), 0, tag=3)
    elif forget and r == 0:
        g.recv(1, tag=3)
    return [float(got[0]), g.protocol]


def test_rendezvous_protocol_and_unfinished_requests_on_mpi():
    assert launch(ring_then_forget, 3, backend="mpi", args=(False,), protocol="rendezvous", timeout=120) == [
        [2.0, "rendezvous"], [0.0, "rendezvous"], [1.0, "rendezvous"]]
    with pytest.raises(RankFailedError) as info:
        launch(ring_then_forget, 3, backend="mpi", args=(True,), protocol="rendezvous", timeout=120)
    assert info.value.rank == 1 and isinstance(info.value.exception, UnfinishedRequestError)


STUDENT_SCRIPT = '''
    import numpy as np
    from mlsys_lib.comm import launch, mpi_group


    def my_ring_all_reduce(group, x):
        """A student's ring all-reduce on the public point-to-point API."""
        p, r = group.world_size, group.rank
        blocks = np.array_split(x.astype(float), p)
        for s in range(p - 1):  # reduce-scatter
            sending = group.isend(blocks[(r - s) % p], (r + 1) % p)
            group.reduce_local(blocks[(r - s - 1) % p], group.recv((r - 1) % p))
            sending.wait()
        for s in range(p - 1):  # all-gather
            sending = group.isend(blocks[(r - s + 1) % p], (r + 1) % p)
            blocks[(r - s) % p] = group.recv((r - 1) % p)
            sending.wait()
        return np.concatenate(blocks)


    def check(group):
        x = np.arange(10.0) * (group.rank + 1)
        return bool(np.allclose(my_ring_all_reduce(group, x), group.all_reduce(x))), group.backend


    if __name__ == "__main__":
        group = mpi_group()
        print("rank", group.rank, "of", group.world_size, "sum", group.all_reduce(np.ones(2)).tolist(), flush=True)
        print("launch", launch(check, group.world_size, backend="mpi"), flush=True)
'''


def test_student_script_runs_unchanged_under_mpiexec(tmp_path):
    script = tmp_path / "student.py"
    script.write_text(textwrap.dedent(STUDENT_SCRIPT))
    env = {**os.environ, "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
           "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    done = subprocess.run([find_mpiexec(), "--oversubscribe", "-n", "3", sys.executable, str(script)],
                          capture_output=True, text=True, env=env, timeout=120, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert sorted(line for line in lines if line.startswith("rank")) == [
        f"rank {r} of 3 sum [3.0, 3.0]" for r in range(3)]
    launched = [line for line in lines if line.startswith("launch")]
    assert launched == ["launch [(True, 'mpi'), (True, 'mpi'), (True, 'mpi')]"] * 3

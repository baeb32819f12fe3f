"""Fault behaviour of ``mlsys_lib.distributed`` (as Lab 7's ``comm``): a rank that raises or dies in the middle
of a DDP backward, a ZeRO-3 step or a parameter-server run fails every peer at once (their pending calls raise
PeerFailedError, so the launch ends long before its timeout), the launch names that rank, every process is
reaped and none of the run's shared-memory segments is left in /dev/shm.

The failure is injected without touching the library: an identity :class:`Tripwire` op whose backward fires
(a layer of the DDP model; ZeRO's ``relu`` patched inside the rank), or the parameter server's gradient
function patched inside one worker. Fired on rank :data:`FAILING` only, after messages large enough to go
through shared memory have been exchanged; it records which segments that rank had mapped.
"""

from __future__ import annotations

import importlib.util
import os
import select
from pathlib import Path

import numpy as np
import pytest

import mlsys_lib.distributed.param_server as param_server
import mlsys_lib.distributed.zero as zero
from mlsys_lib.autodiff import Tensor, cross_entropy, nn
from mlsys_lib.autodiff.tensor import Op, apply
from mlsys_lib.comm import PeerFailedError, ProcessGroup, RankFailedError, launch
from mlsys_lib.comm.mpi import find_mpiexec
from mlsys_lib.comm.shm import PREFIX
from mlsys_lib.distributed.ddp import DistributedDataParallel
from mlsys_lib.distributed.param_server import PSConfig, synthetic_problem, train_on_group
from mlsys_lib.distributed.zero import zero_train
from test_comm_faults import SHM, _assert_reaped, _record_pid, _segments, needs_dev_shm

FAILING = 2  # the rank that fails, of 4
P = 4
SEGMENTS_FILE = "segments"  # in the pid folder: the segments the failing rank had mapped when it failed


class InjectedFault(RuntimeError):
    """The failure the tests inject."""


def mapped_segments() -> list[str]:
    """Names of the ``comm`` shared-memory segments this process has mapped (from /proc/self/maps)."""
    maps = Path("/proc/self/maps").read_text()
    return sorted({line.rsplit("/", 1)[-1] for line in maps.splitlines() if f"/dev/shm/{PREFIX}" in line})


class Fault:
    """Fails the ``at_call``-th time it is called: raises :class:`InjectedFault` or ends the process."""

    def __init__(self, how: str, at_call: int, record_dir: str) -> None:
        self.how, self.at_call, self.record_dir, self.calls = how, at_call, record_dir, 0

    def __call__(self) -> None:
        self.calls += 1
        if self.calls < self.at_call:
            return
        Path(self.record_dir, SEGMENTS_FILE).write_text("\n".join(mapped_segments()))
        if self.how == "raise":
            raise InjectedFault(f"injected failure at call {self.calls}")
        os._exit(3)


def arm(g: ProcessGroup, how: str, pid_dir: str, at_call: int):
    """Record this rank's pid; a :class:`Fault` on rank FAILING, a no-op elsewhere."""
    _record_pid(pid_dir, g.rank)
    return Fault(how, at_call, pid_dir) if g.rank == FAILING else (lambda: None)


class Tripwire(Op):
    """The identity, whose backward calls ``fire`` first."""

    name = "tripwire"

    def __init__(self, fire) -> None:
        self.fire = fire

    def forward(self, x: np.ndarray) -> np.ndarray:
        return x.copy()

    def shape(self, shape):
        return shape

    def vjp(self, g: Tensor, out: Tensor, x: Tensor) -> tuple[Tensor]:
        self.fire()
        return (g,)


class TripwireLayer(nn.Module):
    """A layer without parameters that passes its input through a :class:`Tripwire`."""

    def __init__(self, fire) -> None:
        self.fire = fire

    def forward(self, x) -> Tensor:
        return apply(Tripwire(self.fire), x)


def ddp_backward_fails(g: ProcessGroup, how: str, pid_dir: str) -> None:
    """Two DDP steps; rank FAILING fails in the first backward, after bucket 0 (layers 3 and 2) was issued."""
    fire = arm(g, how, pid_dir, at_call=1)
    model = nn.MLP([32, 64, 64, 64, 10], rng=1, dtype=np.float64)
    model.layers.insert(3, TripwireLayer(fire))  # after Linear 1: its backward runs between buckets 0 and 1
    ddp = DistributedDataParallel(model, g, 38_500)  # buckets of 38480 (shared memory), 33792 and 16384 bytes
    assert ddp.buckets == [[7, 6, 5, 4], [3, 2, 1], [0]]  # W0 b0 W1 b1 W2 b2 W3 b3, last first
    rng = np.random.default_rng(g.rank)
    for _ in range(2):
        ddp.backward(cross_entropy(ddp(rng.standard_normal((8, 32))), rng.integers(0, 10, 8)))


def zero3_step_fails(g: ProcessGroup, how: str, pid_dir: str) -> None:
    """Two ZeRO-3 steps of a 3-layer MLP; rank FAILING fails in the second step's backward of layer 1."""
    fire = arm(g, how, pid_dir, at_call=3)  # relu's backward runs twice per step (layers 1 and 0)
    plain_relu = zero.relu
    zero.relu = lambda y: apply(Tripwire(fire), plain_relu(y))  # this rank's process only
    rng = np.random.default_rng(0)
    X, y = rng.standard_normal((16, 64)).astype(np.float32), rng.integers(0, 10, 16)
    zero_train(g, [64, 64, 64, 10], X, y, 2, 3, prefetch=True)  # layers of 4160 floats: shards in shared memory


def parameter_server_fails(g: ProcessGroup, how: str, pid_dir: str) -> None:
    """1 server and 3 workers under BSP; worker FAILING - 1 fails computing its second gradient."""
    fire = arm(g, how, pid_dir, at_call=2)
    plain_gradient = param_server.gradient_sum

    def gradient_sum(*args):
        fire()
        return plain_gradient(*args)
    param_server.gradient_sum = gradient_sum  # this rank's process only
    X, y = synthetic_problem(n=128, d=128, k=4)  # θ of 516 float64 values: pulls go through shared memory
    train_on_group(g, X, y, 4, PSConfig(num_workers=3, steps=4))


RUNS = {"DDP backward": (ddp_backward_fails, "in backward"),
        "ZeRO-3 step": (zero3_step_fails, "in step"),
        "parameter server": (parameter_server_fails, "in train_on_group")}


@needs_dev_shm
@pytest.mark.parametrize("how", ["raise", "die"])
@pytest.mark.parametrize("run", list(RUNS))
def test_a_rank_failing_mid_step_fails_every_peer_and_leaves_nothing_behind(run, how, tmp_path):
    fn, where = RUNS[run]
    with pytest.raises(RankFailedError) as info:
        launch(fn, P, args=(how, str(tmp_path)), timeout=60)
    err = info.value
    assert err.rank == FAILING
    if how == "raise":
        assert isinstance(err.exception, InjectedFault)
        assert str(err).startswith(f"rank {FAILING} raised: InjectedFault: injected failure at call")
        assert where in err.failure.remote_traceback  # it failed inside the step, not before or after
    else:
        assert str(err).startswith(f"rank {FAILING} died") and "exit code 3" in str(err)
    for r in set(range(P)) - {FAILING}:  # each peer's pending call raised (none ran into the launcher's timeout)
        assert err.failures[r].kind == "raised", err.failures[r]
        assert isinstance(err.failures[r].exception, PeerFailedError)
    _assert_reaped(tmp_path, P)
    mapped = (tmp_path / SEGMENTS_FILE).read_text().split()
    assert mapped  # the failure came after messages through shared memory
    (token,) = {name[len(PREFIX):].split("_")[0] for name in mapped}  # one run's segments
    left = {name for name in _segments() if name.startswith(f"{PREFIX}{token}_")}
    assert left == set(), f"segments of the failed run left in {SHM}: {sorted(left)}"


@pytest.mark.skipif(importlib.util.find_spec("mpi4py") is None or find_mpiexec() is None,
                    reason='needs mpi4py and mpiexec: pip install "mlsys_lib[mpi]"')
def test_a_rank_dying_in_a_zero3_step_on_mpi_is_named_and_every_rank_ends(tmp_path):
    with pytest.raises(RankFailedError) as info:
        launch(zero3_step_fails, P, backend="mpi", args=("die", str(tmp_path)), timeout=120)
    assert info.value.rank == FAILING and info.value.failure.kind == "died"
    for r in range(P):  # mpiexec ended every rank: none runs on (one may outlive mpiexec by a moment)
        assert_ends(int((tmp_path / str(r)).read_text()), within_s=10)


def assert_ends(pid: int, within_s: float) -> None:
    """Process ``pid`` has ended (or ends within ``within_s`` seconds; a zombie has ended)."""
    try:
        handle = os.pidfd_open(pid)
    except ProcessLookupError:
        return
    try:
        assert select.select([handle], [], [], within_s)[0], f"process {pid} still runs {within_s} s later"
    finally:
        os.close(handle)


# ------------------------------------------------------------------ bad input: a clear error, never a hang

SIZES = [4, 5, 3]
BATCH_X, BATCH_Y = np.ones((8, 4), np.float32), np.arange(8) % 3
PS_X, PS_Y = synthetic_problem(n=64, d=4, k=3)


def bad_ddp(g: ProcessGroup, **kwargs) -> None:
    ddp = DistributedDataParallel(nn.MLP(SIZES, rng=1, dtype=np.float64), g, **{"bucket_bytes": 100, **kwargs})
    ddp.backward(cross_entropy(ddp(BATCH_X.astype(np.float64)), BATCH_Y))


def bad_zero(g: ProcessGroup, **kwargs) -> None:
    zero_train(**{"group": g, "sizes": SIZES, "X": BATCH_X, "labels": BATCH_Y, "steps": 1, "stage": 1, **kwargs})


def bad_ps(g: ProcessGroup, **kwargs) -> None:
    train_on_group(**{"group": g, "X": PS_X, "y": PS_Y, "num_classes": 3,
                      "config": PSConfig(num_workers=1, steps=2), **kwargs})


BAD_WITH_A_GROUP = {  # name: (function, its bad keyword arguments, the error every rank raises)
    "bucket_bytes 0": (bad_ddp, dict(bucket_bytes=0), "bucket_bytes must be an int >= 1 (bytes) or None, got 0"),
    "bucket_bytes 1.5": (bad_ddp, dict(bucket_bytes=1.5), "bucket_bytes must be an int >= 1 (bytes) or None, got 1.5"),
    "flops_per_s 0": (bad_ddp, dict(flops_per_s=0), "flops_per_s must be > 0, got 0"),
    "ZeRO stage 4": (bad_zero, dict(stage=4), "ZeRO stage must be 0 (plain data parallelism), 1, 2 or 3, got 4"),
    "ZeRO width 0": (bad_zero, dict(sizes=[4, 0, 3]), "sizes must be layer widths, ints >= 1, got [4, 0, 3]"),
    "ZeRO steps 0": (bad_zero, dict(steps=0), "steps must be an int >= 1, got 0"),
    "ZeRO one row": (bad_zero, dict(X=BATCH_X[:1], labels=BATCH_Y[:1]), "the batch (1 rows) must have a row for each"),
    "ZeRO label 3": (bad_zero, dict(labels=BATCH_Y + 1), "labels must lie in [0, 3)"),
    "ZeRO lr 0": (bad_zero, dict(lr=0.0), "lr must be > 0, got 0.0"),
    "PS servers = world size": (bad_ps, dict(config=PSConfig(num_servers=2, num_workers=1)),
                                "the group has 2 ranks, but 2 servers + 1 workers need 3"),
    "PS label 3": (bad_ps, dict(num_classes=2), "y must hold integer labels in 0..1 (num_classes 2), got int64 "
                                               "labels from 0 to 2"),
    "PS label -1": (bad_ps, dict(y=PS_Y - 1), "y must hold integer labels in 0..2"),
    "PS float labels": (bad_ps, dict(y=PS_Y.astype(float)), "y must hold integer labels in 0..2"),
    "PS no classes": (bad_ps, dict(num_classes=0), "num_classes must be an int >= 1, got 0"),
    "PS config dict": (bad_ps, dict(config={"num_workers": 1}), "config must be a PSConfig, got dict"),
}


def every_bad_call(g: ProcessGroup) -> dict[str, str]:
    """Each bad call of BAD_WITH_A_GROUP on every rank: {name: "ErrorType: message"} ("no error" if none)."""
    errors = {}
    for name, (fn, kwargs, _) in BAD_WITH_A_GROUP.items():
        try:
            fn(g, **kwargs)
            errors[name] = "no error"
        except (ValueError, TypeError) as exc:
            errors[name] = f"{type(exc).__name__}: {exc}"
    return errors


def test_bad_arguments_raise_the_same_clear_error_on_every_rank():
    per_rank = launch(every_bad_call, 2, timeout=60)  # a hang would be a LaunchTimeoutError, a PeerFailedError fail
    assert per_rank[0] == per_rank[1]
    for name, (_, _, message) in BAD_WITH_A_GROUP.items():
        assert message in per_rank[0][name], name


@pytest.mark.parametrize("fn", [bad_ddp, bad_zero, bad_ps])
def test_no_group_is_named_before_anything_else(fn):
    with pytest.raises(TypeError, match="group must be a comm ProcessGroup .*got NoneType"):
        fn(None)

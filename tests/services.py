"""Servers the class-scale tests start and stop: a PostgreSQL cluster and a Dask scheduler with workers.

Each is real (Debian's ``postgresql``, the ``dask`` commands of this environment), on this machine
only, in a temporary folder, on free ports, and stopped after its test: nothing outlives it.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Iterator

from autograder.paths import REPO

#: The unprivileged user the PostgreSQL server runs as (its initdb refuses root).
PG_USER = "nobody"
#: Seconds a server has to start or stop.
START_TIMEOUT_S = 60


def free_port() -> int:
    """A TCP port of localhost that nothing listens on now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def postgres_bin(name: str) -> str:
    """The path of PostgreSQL's ``name`` command (Debian keeps them off PATH); fails with what to install."""
    found = shutil.which(name) or next(iter(sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"), reverse=True)), None)
    if not found:
        raise RuntimeError(f"PostgreSQL's {name} is not installed: `make system-deps` installs Debian's postgresql")
    return found


def _as_user(command: list[str], **kwargs) -> subprocess.CompletedProcess:
    prefix = ["runuser", "-u", PG_USER, "--"] if os.geteuid() == 0 else []
    return subprocess.run(prefix + command, check=True, capture_output=True, text=True, timeout=START_TIMEOUT_S,
                          **kwargs)


@contextlib.contextmanager
def postgres() -> Iterator[str]:
    """A fresh PostgreSQL cluster with an empty database ``gradebook``, run by :data:`PG_USER` in a temporary
    folder, listening on a Unix socket only; yields its SQLAlchemy URL and stops it (and removes it) after."""
    folder = Path(tempfile.mkdtemp(prefix="mlsys-pg-"))
    folder.chmod(0o755)
    data, sockets, port = folder / "data", folder / "sockets", free_port()
    for path in (data, sockets):
        path.mkdir()
        if os.geteuid() == 0:
            user = pwd.getpwnam(PG_USER)
            os.chown(path, user.pw_uid, user.pw_gid)
    data.chmod(0o700)
    try:
        _as_user([postgres_bin("initdb"), "-D", str(data), "-U", "mlsys", "-A", "trust", "--no-sync"])
        _as_user([postgres_bin("pg_ctl"), "-D", str(data), "-l", str(sockets / "server.log"), "-w",
                  "-t", str(START_TIMEOUT_S), "-o", f"-p {port} -k {sockets} -c listen_addresses=''", "start"])
        try:
            _as_user([postgres_bin("createdb"), "-h", str(sockets), "-p", str(port), "-U", "mlsys", "gradebook"])
            yield f"postgresql://mlsys@/gradebook?host={sockets}&port={port}"
        finally:
            _as_user([postgres_bin("pg_ctl"), "-D", str(data), "-m", "immediate", "-w", "stop"])
    finally:
        shutil.rmtree(folder, ignore_errors=True)


class DaskCluster:
    """A ``dask scheduler`` on a free port of localhost and ``dask worker`` processes (one thread each, no
    nanny: a killed worker stays dead), each in a process group of its own, started from the repository
    (the course installed as on a grading machine). The scheduler gives a worker a chunk only when it
    is free (worker saturation 1.0, not Dask's 1.1, which queues a second task on a busy one), so the
    first worker to finish a chunk is the one that grades the next."""

    def __init__(self, folder: Path):
        self.folder, self.port = folder, free_port()
        self.address = f"tcp://127.0.0.1:{self.port}"
        self.processes: list[subprocess.Popen] = []
        self.workers: dict[str, subprocess.Popen] = {}
        self._start("scheduler", ["scheduler", "--host", "127.0.0.1", "--port", str(self.port), "--no-dashboard"],
                    {"DASK_DISTRIBUTED__SCHEDULER__WORKER_SATURATION": "1.0"})

    def _start(self, name: str, args: list[str], env: dict | None = None) -> subprocess.Popen:
        env = {**os.environ, "PYTHONPATH": str(REPO), **(env or {})}
        log = open(self.folder / f"{name}.log", "w")
        process = subprocess.Popen([str(Path(sys.executable).parent / "dask"), *args], cwd=REPO, env=env,
                                   stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        log.close()
        self.processes.append(process)
        return process

    def add_worker(self, name: str, env: dict | None = None) -> None:
        """Start worker ``name`` (``env``: its environment's changes) and wait until the scheduler has it."""
        self.workers[name] = self._start(name, ["worker", self.address, "--name", name, "--nthreads", "1",
                                                "--no-nanny", "--no-dashboard", "--local-directory",
                                                str(self.folder / name)], env)
        self.wait_for(lambda info: name in {w["name"] for w in info["workers"].values()}, f"worker {name}")

    def wait_for(self, condition, what: str) -> None:
        from distributed import Client

        deadline = time.monotonic() + START_TIMEOUT_S
        with Client(self.address, timeout=START_TIMEOUT_S, set_as_default=False) as client:
            while not condition(client.scheduler_info()):
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{what} did not join the scheduler at {self.address} "
                                       f"within {START_TIMEOUT_S} s (logs in {self.folder})")
                time.sleep(0.2)

    def kill(self, name: str) -> None:
        """Kill worker ``name`` and everything it started, at once (a grading machine that died)."""
        os.killpg(self.workers[name].pid, signal.SIGKILL)
        self.workers[name].wait(timeout=10)

    def stop(self) -> None:
        for process in reversed(self.processes):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=10)


@contextlib.contextmanager
def dask_cluster(folder: Path) -> Iterator[DaskCluster]:
    """A :class:`DaskCluster` with no worker yet, stopped after."""
    cluster = DaskCluster(folder)
    try:
        cluster.wait_for(lambda info: True, "the scheduler")
        yield cluster
    finally:
        cluster.stop()

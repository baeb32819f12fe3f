"""The course's JupyterHub (``deploy/jupyterhub``) for a test: a class of fresh Unix accounts in a scratch
folder, the hub on free ports of 127.0.0.1, everything stopped and the accounts removed afterwards.

It needs root (it adds accounts; the hub runs each server as its user, as ``make hub`` does) and
configurable-http-proxy (``make hub-deps``). Where either is missing the test is skipped, or fails
where ``$MLSYS_REQUIRE_BROWSER`` is ``1`` (``make test``).
"""

from __future__ import annotations

import contextlib
import os
import pwd
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import yaml

from browser import REQUIRE_ENV
from deploy.jupyterhub import provision
from deploy.jupyterhub.classroom import Classroom, load

REPO = Path(__file__).resolve().parents[1]
CONFIG = REPO / "deploy" / "jupyterhub" / "jupyterhub_config.py"
PROXY = REPO / ".venv" / "hub" / "node_modules" / ".bin" / "configurable-http-proxy"
#: Longest the hub and its Formgrader service take to start, and the hub to stop (seconds).
START_TIMEOUT_S = 120
STOP_TIMEOUT_S = 30
#: How long what the hub started may take to end by itself once the hub stopped (seconds).
LEFTOVER_GRACE_S = 15


def hub_or_skip() -> None:
    """Skip (or fail where ``$MLSYS_REQUIRE_BROWSER=1``) unless this process may run the hub."""
    missing = None
    if os.geteuid() != 0:
        missing = "the course's hub needs root (it adds Unix accounts and runs each server as its user)"
    elif not PROXY.is_file():
        missing = f"{PROXY} is missing (`make hub-deps` installs configurable-http-proxy from npm)"
    if missing is None:
        return
    if os.environ.get(REQUIRE_ENV) == "1":
        pytest.fail(f"{missing}; the hub's browser test is required here (${REQUIRE_ENV}=1)")
    pytest.skip(missing)


def free_ports(count: int) -> int:
    """The first of ``count`` consecutive ports of 127.0.0.1 that are free now."""
    for _ in range(200):
        base = 20000 + secrets.randbelow(30000)
        try:
            with contextlib.ExitStack() as stack:
                for port in range(base, base + count):
                    sock = stack.enter_context(socket.socket())
                    sock.bind(("127.0.0.1", port))
            return base
        except OSError:
            continue
    raise RuntimeError(f"no {count} consecutive free ports found")


def answers(url: str, timeout_s: float = 2) -> int | None:
    """The HTTP status ``url`` answers with (redirects not followed), or None if nothing answers."""
    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args):
            return None
    try:
        with urllib.request.build_opener(NoRedirect).open(url, timeout=timeout_s) as response:
            return response.status
    except urllib.error.HTTPError as error:
        return error.code
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return None


class CourseHub:
    """The hub of a fresh class (``instructors``, ``tas``, ``students``: names without the random
    prefix this adds). The hub's log (with every server's) goes to ``log``, which outlives the hub, so a
    failed test leaves it to read. Use as a context manager."""

    def __init__(self, instructors: list[str], tas: list[str], students: list[str], log: Path,
                 late_penalty: str = "zero"):
        self.folder = Path(tempfile.mkdtemp(prefix="mlsys-hub-"))
        os.chmod(self.folder, 0o755)  # the accounts' homes are below it
        tag = "h" + secrets.token_hex(3)
        self.names = {name: f"{tag}-{name}" for name in [*instructors, *tas, *students]}
        settings = {"course": "mlsys", "root": str(self.folder / "srv"), "home": str(self.folder / "home"),
                    "port": free_ports(4), "ip": "127.0.0.1", "late_penalty": late_penalty,
                    "instructors": [self.names[n] for n in instructors], "tas": [self.names[n] for n in tas],
                    "students": [self.names[n] for n in students]}
        self.class_file = self.folder / "class.yaml"
        self.class_file.write_text(yaml.safe_dump(settings))
        self.classroom: Classroom = load(self.class_file)
        self.log = log
        self.process: subprocess.Popen | None = None
        #: What was still running after the hub stopped (``"pid command line"``, killed): empty when it stopped cleanly.
        self.leftovers: list[str] = []

    @property
    def url(self) -> str:
        return self.classroom.url

    def password(self, name: str) -> str:
        """The password ``provision`` gave the account of ``name`` (the name without the prefix)."""
        lines = dict(line.split(":", 1) for line in self.classroom.passwords.read_text().split())
        return lines[self.names[name]]

    def home(self, name: str) -> Path:
        return self.classroom.home / self.names[name]

    def __enter__(self):
        try:
            provision.up(self.classroom)
            env = {k: v for k, v in os.environ.items() if not k.startswith(("MLSYS_", "JUPYTER"))}
            env["MLSYS_HUB_CLASS"] = str(self.class_file)
            with open(self.log, "wb") as out:
                self.process = subprocess.Popen([sys.executable, "-m", "jupyterhub", "-f", str(CONFIG)],
                                                cwd=self.folder, env=env, stdout=out, stderr=subprocess.STDOUT,
                                                start_new_session=True)
            self.wait_ready()
        except BaseException:
            self.__exit__()
            raise
        return self

    def wait_ready(self) -> None:
        """Wait until the hub answers and routes to Formgrader (which asks for a login); raise with the log's end."""
        deadline = time.monotonic() + START_TIMEOUT_S
        service = f"{self.url}/services/{self.classroom.course}/"
        while time.monotonic() < deadline and self.process.poll() is None:
            if answers(f"{self.url}/hub/api") == 200 and answers(service) == 302:
                return
            time.sleep(0.5)
        raise RuntimeError(f"the hub did not start (exit status {self.process.poll()}):\n{self.tail()}")

    def tail(self) -> str:
        return self.log.read_text(errors="replace")[-4000:] if self.log.is_file() else "(no log)"

    def __exit__(self, *exc) -> None:
        """Stop the hub (on SIGTERM it stops the servers, Formgrader and the proxy), then whatever the
        class's accounts still run, remove the accounts and the scratch folder."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
        self.leftovers = self.kill_leftovers()
        provision.down(self.classroom)
        shutil.rmtree(self.folder, ignore_errors=True)

    def kill_leftovers(self) -> list[str]:
        """Kill, by process id, what the hub started and left running: the proxy (named by its pid
        file) and any process of the accounts made for this class, after :data:`LEFTOVER_GRACE_S`
        for them to end by themselves (a kernel whose server stopped ends when it sees its parent
        gone). Returns them as ``"pid command line"`` (none when everything ended)."""
        deadline = time.monotonic() + LEFTOVER_GRACE_S
        running = self.running()
        while running and time.monotonic() < deadline:
            time.sleep(0.2)
            running = self.running()
        for pid in running:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        return [f"{pid} {command}" for pid, command in running.items()]

    def running(self) -> dict[int, str]:
        """The proxy and the processes of the class's accounts that run now: process id, command line."""
        uids = set()
        for name in provision.created(self.classroom):
            with contextlib.suppress(KeyError):
                uids.add(pwd.getpwnam(name).pw_uid)
        pids = [int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit() and _owner(p) in uids]
        with contextlib.suppress(OSError, ValueError):
            pid = int((self.classroom.state / "proxy.pid").read_text())
            if f"{self.classroom.proxy_api_port}".encode() in Path(f"/proc/{pid}/cmdline").read_bytes():
                pids.append(pid)
        commands = {}
        for pid in pids:
            with contextlib.suppress(OSError):
                commands[pid] = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        return commands


def _owner(proc: Path) -> int | None:
    try:
        return proc.stat().st_uid
    except OSError:
        return None

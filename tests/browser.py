"""Real-browser test helpers: Playwright (from PyPI) driving Debian's chromium, and a JupyterLab server.

``make`` installs both (chromium with ``make system-deps`` as root). Where one is missing the browser
tests are skipped, unless ``$MLSYS_REQUIRE_BROWSER`` is ``1`` (``make test``, so CI never skips them):
then they fail and say what to install.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

CHROMIUM = Path("/usr/bin/chromium")
#: Set to 1 where a missing browser is a failure, not a skip.
REQUIRE_ENV = "MLSYS_REQUIRE_BROWSER"
#: A URL that leaves this machine: not ``data:``, ``blob:``, ``file:`` or ``about:``, and not to a local
#: host. Written so that Python and JavaScript read it alike: Playwright's driver matches it itself.
REMOTE = re.compile(r"^(?!(?:data|blob|file|about):|[a-z][a-z0-9+.-]*://(?:127\.0\.0\.1|localhost|\[::1\])"
                    r"(?::[0-9]+)?(?:[/?#]|$))", re.IGNORECASE)


def browser_or_skip():
    """Playwright's sync API, if it and Debian's chromium are installed; else skip (or fail where
    ``$MLSYS_REQUIRE_BROWSER=1``)."""
    missing = None
    try:
        import playwright.sync_api as playwright
    except ImportError:
        missing = "playwright is not installed (pip install -e .[dev])"
    if missing is None and not CHROMIUM.exists():
        missing = f"{CHROMIUM} is missing (Debian package chromium; `make system-deps` as root installs it)"
    if missing is None:
        return playwright
    if os.environ.get(REQUIRE_ENV) == "1":
        pytest.fail(f"{missing}; the browser tests are required here (${REQUIRE_ENV}=1)")
    pytest.skip(missing)


def launch_chromium(driver):
    """Debian's chromium, headless, started by a Playwright driver (no sandbox: tests may run as root)."""
    return driver.chromium.launch(executable_path=str(CHROMIUM), args=["--no-sandbox"])


def is_local(url: str) -> bool:
    """Whether ``url`` stays on this machine (a local host, or a ``data:``, ``blob:``, ``file:``, ``about:`` URL)."""
    return not REMOTE.match(url)


def refuse_remote(context, seen: list[str]) -> None:
    """Record in ``seen`` and refuse every request of the browser ``context`` that would leave this machine.

    The route is a pattern, not a Python predicate: with a predicate Playwright hands *every* request to
    this process, and under the sync API a request then waits until the test next calls Playwright
    (a save the page sends while the test sleeps never reaches the server)."""
    def refuse(route):
        seen.append(route.request.url)
        route.abort()

    context.route(REMOTE, refuse)


class Screens:
    """Screenshots of the pages of a failed step, in ``folder``; the failure's message gives their paths."""

    def __init__(self, folder: Path):
        self.folder = folder
        self.folder.mkdir(parents=True, exist_ok=True)

    @contextlib.contextmanager
    def step(self, name: str, page):
        """Run a step on ``page``; if it raises, save a full-page screenshot and raise an
        ``AssertionError`` naming the step, the error and the screenshot."""
        try:
            yield
        except Exception as error:
            path = self.folder / f"{name}.png"
            try:
                page.screenshot(path=str(path), full_page=True)
                where = f"screenshot: {path}"
            except Exception as shot_error:  # the page itself is gone
                where = f"no screenshot ({type(shot_error).__name__}: {shot_error})"
            raise AssertionError(f"step {name!r} failed: {type(error).__name__}: {error}\n{where}") from error


def close_formgrader_modal(page, action: str, timeout_s: float) -> None:
    """Formgrader's result dialog of ``action`` (on a page or a frame): fail with its text unless it says
    Success; close it."""
    modal = page.locator(".modal")
    modal.wait_for(timeout=timeout_s * 1000)
    title = modal.locator(".modal-title").inner_text()
    if title != "Success":
        raise AssertionError(f"{action}: {title}: {modal.locator('.modal-body').inner_text()[-4000:]}")
    modal.locator(".modal-footer button").last.click()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class JupyterLab:
    """A JupyterLab server of this interpreter's environment, serving ``root`` from the working folder
    ``cwd`` with ``env``, its output in ``log``; on a free port of 127.0.0.1, a random token. Use as a
    context manager."""

    def __init__(self, root: Path, cwd: Path, env: dict[str, str], log: Path):
        self.token = secrets.token_hex(16)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = log
        command = [sys.executable, "-m", "jupyter", "lab", "--no-browser", f"--ServerApp.port={self.port}",
                   "--ServerApp.ip=127.0.0.1", f"--IdentityProvider.token={self.token}",
                   f"--ServerApp.root_dir={root}"]
        if os.geteuid() == 0:
            command.append("--allow-root")
        with open(log, "wb") as out:
            self.process = subprocess.Popen(command, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT,
                                            start_new_session=True)

    def wait_ready(self, timeout_s: float = 60) -> None:
        """Wait until the server answers its status API; raise with its log's end if it does not."""
        deadline = time.monotonic() + timeout_s
        request = urllib.request.Request(f"{self.url}/api/status", headers={"Authorization": f"token {self.token}"})
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                break
            try:
                with urllib.request.urlopen(request, timeout=2):
                    return
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                time.sleep(0.2)
        tail = self.log.read_text(errors="replace")[-3000:]
        raise RuntimeError(f"JupyterLab did not start (exit status {self.process.poll()}):\n{tail}")

    def login_url(self, path: str) -> str:
        """The URL of ``path`` (e.g. ``/lab``) that logs the browser in with the server's token."""
        return f"{self.url}{path}?token={self.token}"

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        """Stop the server (on SIGTERM it shuts its kernels down), forcibly after 10 s."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, 15)
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, 9)
            self.process.wait()

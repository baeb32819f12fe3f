"""Run nbgrader's own converters and validator with the course configuration."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Iterator

from nbgrader.coursedir import CourseDirectory
from nbgrader.utils import capture_log

from ..config import first_on, install_grading_kernel, load_config
from ..sandbox.sandbox import SETTINGS_ENV


class NbgraderError(RuntimeError):
    """An nbgrader step failed; the message carries the end of its log."""


@contextlib.contextmanager
def grading_environment(root: Path, sandbox: dict | None = None) -> Iterator[Path]:
    """Make the grading kernel findable (and the tool importable) while nbgrader runs.

    nbgrader also runs the ``alembic`` command of this environment when it creates a gradebook,
    so this interpreter's ``bin/`` goes first on ``PATH`` even if the venv is not activated.
    Yields a private, short folder (socket paths are limited to ~100 bytes) for the kernels'
    connection files and the supervisors' reports; its ``sockets/`` sub-folder, the only part a
    sandboxed kernel sees, holds the kernels' Unix sockets. With ``sandbox`` settings (see
    :func:`~autograder.config.sandbox_settings`) the kernel launcher sandboxes every kernel.
    """
    runtime = Path(tempfile.mkdtemp(prefix="mlsys-kernel-"))
    (runtime / "sockets").mkdir()
    if os.geteuid() == 0:  # each kernel has its own user id: all may create sockets, none remove others'
        os.chmod(runtime / "sockets", 0o1777)
    env = install_grading_kernel(root)
    repo = str(Path(__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (repo, os.environ.get("PYTHONPATH")) if p)
    env["PATH"] = first_on(os.environ.get("PATH", ""), Path(sys.executable).parent)
    env["JUPYTER_RUNTIME_DIR"] = str(runtime)
    env[SETTINGS_ENV] = json.dumps(sandbox) if sandbox else None
    saved = {k: os.environ.get(k) for k in env}
    _set_environment(env)
    try:
        yield runtime
    finally:
        _set_environment(saved)
        shutil.rmtree(runtime, ignore_errors=True)


def _set_environment(values: dict[str, str | None]) -> None:
    for key, value in values.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


def run_converter(converter_cls, lab: str, student: str = "*", *, root: Path,
                  release_dir: Path | None = None, sandbox: dict | None = None) -> dict:
    """Run one nbgrader converter (GenerateAssignment, Autograde, GenerateFeedback) for one lab.

    ``sandbox`` (settings of :func:`~autograder.config.sandbox_settings`) runs the notebooks'
    kernels in the course's sandbox (for student code).

    Returns nbgrader's ``capture_log`` result: ``{"success": bool, "log": str, "error": str}``.
    """
    config = load_config(root, release_dir)
    with grading_environment(root, sandbox) as runtime:
        config.KernelManager.ip = str(runtime / "sockets" / "kernel")  # absolute: kernel and grader agree
        coursedir = CourseDirectory(config=config)
        coursedir.assignment_id = lab
        coursedir.student_id = student
        app = converter_cls(coursedir=coursedir, config=config)
        app.force = True
        return capture_log(app)


def require_success(result: dict, what: str) -> None:
    """Raise :class:`NbgraderError` with the tail of nbgrader's log if ``result`` failed."""
    if not result.get("success"):
        tail = "\n".join((result.get("log", "") + "\n" + result.get("error", "")).strip().splitlines()[-25:])
        raise NbgraderError(f"{what} failed:\n{tail}")


def validate(notebook: Path, *, root: Path, invert: bool = False) -> dict:
    """Execute ``notebook`` with nbgrader's Validator; returns its result dictionary.

    Not inverted, a notebook whose tests all pass gives ``{}``; inverted, a notebook none of whose
    graded tests passes gives ``{}`` (checksums are not compared then: the caller may have put the
    hidden tests back into the test cells).
    """
    from nbgrader.validator import Validator

    config = load_config(root)
    with grading_environment(root) as runtime:
        config.KernelManager.ip = str(runtime / "sockets" / "kernel")
        validator = Validator(config=config)
        validator.invert = invert
        validator.ignore_checksums = invert
        return validator.validate(str(notebook))

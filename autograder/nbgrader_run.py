"""Run nbgrader's own converters and validator with the course configuration."""

from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path
from typing import Iterator

from nbgrader.coursedir import CourseDirectory
from nbgrader.utils import capture_log

from .config import course_config, install_grading_kernel


class NbgraderError(RuntimeError):
    """An nbgrader step failed; the message carries the end of its log."""


@contextlib.contextmanager
def grading_environment(root: Path) -> Iterator[None]:
    """Make the grading kernel findable (and the tool importable) while nbgrader runs.

    nbgrader also runs the ``alembic`` command of this environment when it creates a gradebook,
    so this interpreter's ``bin/`` goes first on ``PATH`` even if the venv is not activated.
    """
    env = install_grading_kernel(root)
    repo = str(Path(__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (repo, os.environ.get("PYTHONPATH")) if p)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def run_converter(converter_cls, lab: str, student: str = "*", *, root: Path,
                  release_dir: Path | None = None) -> dict:
    """Run one nbgrader converter (GenerateAssignment, Autograde, GenerateFeedback) for one lab.

    Returns nbgrader's ``capture_log`` result: ``{"success": bool, "log": str, "error": str}``.
    """
    config = course_config(root, release_dir)
    coursedir = CourseDirectory(config=config)
    coursedir.assignment_id = lab
    coursedir.student_id = student
    app = converter_cls(coursedir=coursedir, config=config)
    app.force = True
    with grading_environment(root):
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

    config = course_config(root)
    validator = Validator(config=config)
    validator.invert = invert
    validator.ignore_checksums = invert
    with grading_environment(root):
        return validator.validate(str(notebook))

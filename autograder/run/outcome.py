"""What a grading worker hands back for one student, wherever it ran (a local process, a Dask worker)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

#: The folders of one graded submission in a course root, ``<step>/<student>/<lab>/``, in nbgrader's order.
STEPS = ("submitted", "autograded", "feedback")


@dataclass
class Outcome:
    """What a worker did with one submission: graded (``problem`` None) or why not; reasons to flag it."""

    student: str
    problem: str | None = None
    flags: list[str] = field(default_factory=list)
    work: Path | None = None  # the private course root holding the graded submission
    worker: str | None = None  # the Dask worker that graded it (None: a local process)

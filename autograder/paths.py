"""Where the course lives on disk.

The repository holds the nbgrader *source* (``solutions/``) and *release* (``labs/``). The live
course directory (submissions, autograded copies, feedback, ``gradebook.db``) is git-ignored and
always an absolute path, so nbgrader never creates a stray gradebook in the current directory.
"""

from __future__ import annotations

import os
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SOLUTIONS = REPO / "solutions"
LABS = REPO / "labs"
LECTURES = REPO / "lectures"
FIXTURES = REPO / "tests" / "fixtures"


def course_dir() -> Path:
    """The live course directory: ``$MLSYS_COURSE_DIR`` if set, else ``<repo>/.course``."""
    return Path(os.environ.get("MLSYS_COURSE_DIR", REPO / ".course")).resolve()


def lab_names() -> list[str]:
    """Every lab that has a source folder with a notebook, sorted (``lab01_tensors``, ...)."""
    return sorted(p.parent.name for p in SOLUTIONS.glob("lab*/*.ipynb"))


def check_lab(lab: str) -> str:
    """Return ``lab`` if it names a lab in ``solutions/``, else raise ``ValueError`` listing them."""
    known = lab_names()
    if lab not in known:
        raise ValueError(f"unknown lab {lab!r}; the labs are: {', '.join(known) or '(none)'}")
    return lab

"""Find the students' notebooks in what an instructor downloaded: a folder or an LMS zip.

Accepted layouts, for a lab ``lab01_tensors``:

* a folder of ``<student>/lab01_tensors.ipynb`` (a student folder holding one notebook under
  another name, e.g. ``lab01_tensors (1).ipynb``, is accepted too);
* a zip of such a folder, or a zip of flat files named ``<student>_<anything>.ipynb`` (the way
  LMS bulk downloads name them).
"""

from __future__ import annotations

import re
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

STUDENT_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.@-]{0,63}$")
FLAT_NAME = re.compile(r"^(?P<student>[^_]+)_.*\.ipynb$")
_IGNORED_PARTS = {"__MACOSX", ".ipynb_checkpoints"}


@dataclass
class Found:
    """Notebooks to grade (student id -> path) and students that cannot be graded, with why."""

    notebooks: dict[str, Path] = field(default_factory=dict)
    problems: dict[str, str] = field(default_factory=dict)


def _is_wrapper(folder: Path) -> bool:
    """True if ``folder`` holds a single folder of student folders or of several notebooks."""
    entries = [p for p in folder.iterdir() if p.name not in _IGNORED_PARTS]
    if len(entries) != 1 or not entries[0].is_dir():
        return False
    inside = list(entries[0].iterdir())
    return any(p.is_dir() for p in inside) or sum(p.suffix == ".ipynb" for p in inside) > 1


def find_submissions(source: Path, lab: str, unpack_dir: Path) -> Found:
    """Locate every student's notebook for ``lab`` in ``source`` (a folder or a ``.zip``).

    A zip is extracted into ``unpack_dir``. Raises ``ValueError`` if ``source`` is neither.
    """
    source = Path(source)
    if source.is_file() and zipfile.is_zipfile(source):
        unpack_dir.mkdir(parents=True, exist_ok=True)
        with zipfile.ZipFile(source) as archive:
            archive.extractall(unpack_dir)  # zipfile drops absolute paths and '..' parts
        source = unpack_dir
        while _is_wrapper(source):  # a zip of the submissions folder itself: step inside
            source = next(p for p in source.iterdir() if p.name not in _IGNORED_PARTS)
    elif not source.is_dir():
        raise ValueError(f"submissions must be a folder of <student>/{lab}.ipynb or a zip; got {source}")

    notebooks = sorted(p for p in source.rglob("*.ipynb") if not _IGNORED_PARTS & set(p.parts))
    by_student: dict[str, list[Path]] = {}
    found = Found()
    for path in notebooks:
        relative = path.relative_to(source)
        if len(relative.parts) == 1:
            match = FLAT_NAME.match(path.name)
            if not match:
                found.problems[path.name] = "file is not named <student>_<anything>.ipynb"
                continue
            student = match["student"]
        else:
            student = relative.parts[0]
        by_student.setdefault(student, []).append(path)

    for student, paths in sorted(by_student.items()):
        if not STUDENT_ID.match(student):
            found.problems[student] = "student id may only hold letters, digits and _ . @ -"
        elif len(paths) == 1:
            found.notebooks[student] = paths[0]
        else:
            named = [p for p in paths if p.name == f"{lab}.ipynb"]
            if len(named) == 1:
                found.notebooks[student] = named[0]
            else:
                names = ", ".join(p.name for p in paths)
                found.problems[student] = f"several notebooks and none is exactly {lab}.ipynb: {names}"
    return found

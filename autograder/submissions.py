"""Find the students' notebooks in what an instructor downloaded: a folder or an LMS zip.

Accepted layouts, for a lab ``lab01_tensors``:

* a folder of ``<student>/lab01_tensors.ipynb`` (a student folder holding one notebook under
  another name, e.g. ``lab01_tensors (1).ipynb``, is accepted too);
* a zip of such a folder, or a zip of flat files named ``<student>_<anything>.ipynb`` (the way
  LMS bulk downloads name them).

Nothing a student could have placed is followed: a student folder or notebook that is a symbolic
link, a FIFO or a device is reported with the reason, never read (see :mod:`autograder.safe_fs`). A
zip is extracted only for its notebooks, each at most the size limit, so a zip bomb costs nothing.
"""

from __future__ import annotations

import os
import re
import stat
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

STUDENT_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.@-]{0,63}$")
FLAT_NAME = re.compile(r"^(?P<student>[^_]+)_.*\.ipynb$")
_IGNORED_PARTS = {"__MACOSX", ".ipynb_checkpoints"}
#: Most entries of a zip looked at; a bigger archive is refused as a whole.
MAX_ZIP_ENTRIES = 20_000


@dataclass
class Found:
    """Notebooks to grade (student id -> path) and students that cannot be graded, with why."""

    notebooks: dict[str, Path] = field(default_factory=dict)
    problems: dict[str, str] = field(default_factory=dict)
    root: Path = Path(".")  # the folder the notebooks lie under: read them with safe_fs.read_beneath


def _is_wrapper(folder: Path) -> bool:
    """True if ``folder`` holds a single folder of student folders or of several notebooks."""
    entries = [p for p in folder.iterdir() if p.name not in _IGNORED_PARTS]
    if len(entries) != 1 or not entries[0].is_dir():
        return False
    inside = list(entries[0].iterdir())
    return any(p.is_dir() for p in inside) or sum(p.suffix == ".ipynb" for p in inside) > 1


def _extract_notebooks(archive_path: Path, unpack_dir: Path, limit: int, found: Found) -> None:
    """Extract the ``.ipynb`` members of the zip (none bigger than ``limit`` bytes) into ``unpack_dir``."""
    with zipfile.ZipFile(archive_path) as archive:
        members = archive.infolist()
        if len(members) > MAX_ZIP_ENTRIES:
            raise ValueError(f"{archive_path}: {len(members)} entries in the zip (at most {MAX_ZIP_ENTRIES})")
        for member in members:
            name = Path(member.filename)
            if member.is_dir() or name.suffix != ".ipynb" or _IGNORED_PARTS & set(name.parts):
                continue
            if member.file_size > limit:
                found.problems[name.name] = f"{name} is larger than {limit} bytes: not extracted"
                continue
            archive.extract(member, unpack_dir)  # zipfile drops absolute paths and '..' parts


def _walk_notebooks(source: Path, found: Found) -> list[Path]:
    """Every regular ``.ipynb`` file below ``source``, links not followed: a link or special file in
    a student's folder becomes a problem of that student (of the file, at the top level)."""
    notebooks = []
    for folder, dirs, names in os.walk(source, followlinks=False):
        here = Path(folder)
        dirs[:] = [d for d in dirs if d not in _IGNORED_PARTS]
        for name in sorted(dirs + names):
            path = here / name
            relative = path.relative_to(source)
            mode = path.lstat().st_mode
            if stat.S_ISDIR(mode):
                continue
            if stat.S_ISREG(mode):
                if path.suffix == ".ipynb":
                    notebooks.append(path)
                continue
            if path.suffix == ".ipynb" or len(relative.parts) == 1 or stat.S_ISLNK(mode):
                kind = "a symbolic link" if stat.S_ISLNK(mode) else "not a regular file"
                owner = relative.parts[0]
                found.problems[owner] = f"{relative} is {kind}: not followed, not graded"
    return sorted(notebooks)


def find_submissions(source: Path, lab: str, unpack_dir: Path, *, limit: int = 32 * 2**20) -> Found:
    """Locate every student's notebook for ``lab`` in ``source`` (a folder or a ``.zip``).

    A zip's notebooks are extracted into ``unpack_dir``. Notebooks over ``limit`` bytes, links and
    special files are reported in ``Found.problems``. Raises ``ValueError`` if ``source`` is neither
    a folder nor a zip.
    """
    source = Path(source)
    found = Found()
    if source.is_file() and zipfile.is_zipfile(source):
        unpack_dir.mkdir(parents=True, exist_ok=True)
        _extract_notebooks(source, unpack_dir, limit, found)
        source = unpack_dir
        while _is_wrapper(source):  # a zip of the submissions folder itself: step inside
            source = next(p for p in source.iterdir() if p.name not in _IGNORED_PARTS)
    elif not source.is_dir():
        raise ValueError(f"submissions must be a folder of <student>/{lab}.ipynb or a zip; got {source}")
    source = source.resolve()
    found.root = source

    by_student: dict[str, list[Path]] = {}
    for path in _walk_notebooks(source, found):
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
        if student in found.problems:
            continue  # a link or special file among this student's files: reported, nothing graded
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

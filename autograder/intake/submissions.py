"""Find the students' notebooks in what an instructor downloaded: a folder, an LMS zip, nbgrader's own.

Accepted layouts, for a lab ``lab01_tensors``, as a folder or a zip (even one wrapped in a folder):

* a folder of ``<student>/lab01_tensors.ipynb`` (a student folder holding one notebook under
  another name, e.g. ``lab01_tensors (1).ipynb``, is accepted too);
* nbgrader's own layout (``<course>/submitted`` after ``nbgrader collect``): ``<student>/lab01_tensors/``
  holding the notebook, ``timestamp.txt`` and ``submission_secret.txt``, which are reported in
  :attr:`Found.companions`; other labs' folders beside it are left alone;
* the bulk downloads of Moodle, Canvas, Blackboard and Gradescope, and flat files named
  ``<student>_lab01_tensors.ipynb`` (:mod:`autograder.intake.lms` reads the names).

A name that fits none of them, and several submitters claiming one student id, are reported in
``Found.problems`` and never guessed at; a mapping file (:class:`~autograder.intake.lms.StudentMap`)
settles them.

Nothing a student could have placed is followed: a student folder or notebook that is a symbolic
link, a FIFO or a device is reported with the reason, never read (see :mod:`autograder.intake.safe_fs`). A
zip is extracted only for its notebooks and small text files, each at most its size limit, so a
zip bomb costs nothing.
"""

from __future__ import annotations

import os
import stat
import zipfile
from dataclasses import dataclass, field, replace
from pathlib import Path, PurePosixPath

from ..paths import lab_names
from .lms import (FORMATS, GRADESCOPE_FOLDER, STUDENT_ID, Parsed, Person, StudentMap, gradescope_submitters,
                  identify, is_blackboard_receipt, moodle)
from .safe_fs import UnsafePath, read_beneath

#: nbgrader's files beside a collected notebook, in ``<student>/<lab>/``.
COMPANIONS = ("timestamp.txt", "submission_secret.txt")
GRADESCOPE_METADATA = "submission_metadata.yml"
#: Most bytes of a text file (receipt, time stamp, secret) extracted from a zip or read.
TEXT_LIMIT = 2**20
_IGNORED_PARTS = {"__MACOSX", ".ipynb_checkpoints"}
#: Most entries of a zip looked at; a bigger archive is refused as a whole.
MAX_ZIP_ENTRIES = 20_000


@dataclass
class Found:
    """Notebooks to grade (student id -> path) and students that cannot be graded, with why."""

    notebooks: dict[str, Path] = field(default_factory=dict)
    problems: dict[str, str] = field(default_factory=dict)
    root: Path = Path(".")  # the folder the notebooks lie under: read them with safe_fs.read_beneath
    people: dict[str, Person] = field(default_factory=dict)  # student -> what the LMS said of them
    #: student -> {"timestamp.txt": path, "submission_secret.txt": path} (those present, under root)
    companions: dict[str, dict[str, Path]] = field(default_factory=dict)
    notes: dict[str, str] = field(default_factory=dict)  # student -> remark on what was picked (graded)


@dataclass(frozen=True)
class _File:
    """A file below the root worth knowing of (a notebook, a text file), or one refused with why."""

    relative: PurePosixPath
    refused: str = ""


@dataclass
class _Claim:
    """One entry at the top of the download, read as one student's submission."""

    student: str
    entry: str
    files: list[tuple[str, _File]]  # (the name it was uploaded under, the file)
    person: Person | None = None
    attempt: str = ""
    companions: dict[str, Path] = field(default_factory=dict)
    folder: bool = False

    @property
    def submitter(self) -> tuple[str, str]:
        """Who made it: the LMS and its id for them, else the entry's own name."""
        return (self.person.lms, self.person.lms_id) if self.person else ("", self.entry)

    @property
    def submission(self) -> str:
        """Which of its submitter's submissions: a folder is one, the flat files of a submitter are one."""
        return self.entry if self.folder else ""


def _size_limit(name: PurePosixPath, limit: int) -> int | None:
    """Most bytes taken of a file with this name (a notebook, Gradescope's metadata, an nbgrader
    companion, a Blackboard receipt); None: of no use, not extracted from a zip nor looked at."""
    if name.suffix == ".ipynb" or name.name == GRADESCOPE_METADATA:
        return limit
    return TEXT_LIMIT if name.name in COMPANIONS or is_blackboard_receipt(name.name) else None


def _extract(archive_path: Path, unpack_dir: Path, limit: int) -> list[_File]:
    """Extract the zip's notebooks and text files within their size limits into ``unpack_dir``;
    return the members left out for their size (paths relative to ``unpack_dir``), refused."""
    oversized = []
    with zipfile.ZipFile(archive_path) as archive:
        members = archive.infolist()
        if len(members) > MAX_ZIP_ENTRIES:
            raise ValueError(f"{archive_path}: {len(members)} entries in the zip (at most {MAX_ZIP_ENTRIES})")
        for member in members:
            name = PurePosixPath(*[p for p in PurePosixPath(member.filename).parts if p not in ("/", "..")])
            most = _size_limit(name, limit)
            if member.is_dir() or most is None or _IGNORED_PARTS & set(name.parts):
                continue
            if member.file_size > most:
                oversized.append(_File(name, f"{name} is larger than {most} bytes: not extracted"))
                continue
            archive.extract(member, unpack_dir)  # zipfile drops absolute paths and '..' parts
    return oversized


def _is_wrapper(folder: Path, lab: str, pending: list[_File]) -> bool:
    """True if ``folder`` (plus the ``pending`` files not extracted) holds nothing but one folder of
    student folders or of several notebooks: not a student's own, an LMS entry or a lab folder."""
    tops = {p.name for p in folder.iterdir() if p.name not in _IGNORED_PARTS} | {f.relative.parts[0] for f in pending}
    if len(tops) != 1 or not (folder / next(iter(tops))).is_dir():
        return False
    only = folder / next(iter(tops))
    labs = {lab, *lab_names()}
    if moodle(only.name) or GRADESCOPE_FOLDER.match(only.name) or only.name in labs:
        return False
    inside = list(only.iterdir())
    if any(p.name in labs for p in inside):  # a student's folder in nbgrader's layout
        return False
    return any(p.is_dir() for p in inside) or sum(p.suffix == ".ipynb" for p in inside) > 1


def _unpack(source: Path, lab: str, unpack_dir: Path, limit: int) -> tuple[Path, list[_File]]:
    """The folder the submissions lie in (a zip is extracted into ``unpack_dir`` and wrapping
    folders are stepped into) and the zip's members refused for their size, relative to it."""
    if not (source.is_file() and zipfile.is_zipfile(source)):
        if not source.is_dir():
            raise ValueError(f"submissions must be a folder of <student>/{lab}.ipynb or a zip; got {source}")
        return source.resolve(), []
    unpack_dir.mkdir(parents=True, exist_ok=True)
    root, pending = unpack_dir, _extract(source, unpack_dir, limit)
    while _is_wrapper(root, lab, pending):  # a zip of the submissions folder itself: step inside
        root = next(p for p in root.iterdir() if p.name not in _IGNORED_PARTS)
        pending = [replace(f, relative=f.relative.relative_to(root.name)) for f in pending]
    return root.resolve(), pending


def _walk(root: Path) -> list[_File]:
    """Every regular file below ``root`` the grader uses (see :func:`_size_limit`), links not
    followed; a link anywhere, and a special file that is one of those or sits at the top, is
    refused with the reason."""
    files = []
    for folder, dirs, names in os.walk(root, followlinks=False):
        here = Path(folder)
        dirs[:] = [d for d in dirs if d not in _IGNORED_PARTS]
        for name in sorted(dirs + names):
            path = here / name
            relative = PurePosixPath(path.relative_to(root))
            mode = path.lstat().st_mode
            if stat.S_ISDIR(mode):
                continue
            wanted = _size_limit(PurePosixPath(name), 0) is not None
            if stat.S_ISREG(mode):
                if wanted:
                    files.append(_File(relative))
            elif wanted or len(relative.parts) == 1 or stat.S_ISLNK(mode):
                kind = "a symbolic link" if stat.S_ISLNK(mode) else "not a regular file"
                files.append(_File(relative, f"{relative} is {kind}: not followed, not graded"))
    return files


def _read_text(root: Path, name: str) -> str | None:
    """The text file ``root / name`` read safely (no link followed, bounded); None if it cannot be."""
    try:
        return read_beneath(root, Path(name), TEXT_LIMIT).data.decode("utf-8", "replace")
    except UnsafePath:
        return None


def _gradescope(root: Path, entries: dict[str, list[_File]], limit: int, found: Found) -> dict[str, list[Parsed]]:
    """``submission_<n>`` -> its submitters, from ``submission_metadata.yml`` at the top (if any)."""
    if GRADESCOPE_METADATA not in entries:
        return {}
    try:
        return gradescope_submitters(read_beneath(root, Path(GRADESCOPE_METADATA), limit).data.decode("utf-8"))
    except (UnsafePath, UnicodeDecodeError, ValueError) as error:
        found.problems[GRADESCOPE_METADATA] = f"{error}: the submission folders cannot be told apart"
        return {}


def _notebooks(files: list[_File]) -> list[tuple[str, _File]]:
    """The notebooks (and refused files) among ``files``, by their own names."""
    return [(f.relative.name, f) for f in files if f.relative.suffix == ".ipynb" or f.refused]


def _student_folder(root: Path, entry: str, files: list[_File], lab: str) -> tuple[list, dict] | None:
    """A folder ``<student>/``: in nbgrader's layout only ``<student>/<lab>/`` and its companions,
    else every notebook but those in other labs' folders. Returns (notebooks, companions), or None
    if it holds nothing of this lab."""
    if os.path.lexists(root / entry / lab):  # a link there is among the files, refused
        mine = [f for f in files if f.relative.parts[1] == lab]
        companions = {f.relative.name: root / f.relative for f in mine
                      if len(f.relative.parts) == 3 and f.relative.name in COMPANIONS and not f.refused}
        return _notebooks(mine), companions
    others = set(lab_names())
    mine = _notebooks([f for f in files if f.relative.parts[1] not in others])
    return (mine, {}) if mine else None


def _claims(root: Path, files: list[_File], lab: str, limit: int, mapping: StudentMap | None,
            found: Found) -> list[_Claim]:
    """Read every entry at the top of ``root`` as one or more students' submissions; the entries
    that cannot be (unparseable names, unmapped in a mapped run) go to ``found.problems``."""
    entries: dict[str, list[_File]] = {}
    for f in files:
        entries.setdefault(f.relative.parts[0], []).append(f)
    submitters = _gradescope(root, entries, limit, found)
    claims = []
    for entry, inside in sorted(entries.items()):
        refused = ""
        if len(inside[0].relative.parts) == 1:  # a file (or a link) at the top
            refused = inside[0].refused
            if not refused and inside[0].relative.suffix != ".ipynb":
                continue  # a Blackboard receipt, Gradescope's metadata: read when needed
            parsed = identify(entry, lab, lambda name: _read_text(root, name)) or Parsed("", None)
            readings = [(parsed, [(parsed.original, inside[0])], {})]  # one flat file
        elif entry in submitters:
            readings = [(parsed, _notebooks(inside), {}) for parsed in submitters[entry]]
        elif GRADESCOPE_FOLDER.match(entry):
            found.problems[entry] = f"a Gradescope submission folder that no {GRADESCOPE_METADATA} lists"
            continue
        elif moodle(entry):
            readings = [(moodle(entry), _notebooks(inside), {})]
        else:
            folder = _student_folder(root, entry, inside, lab)
            readings = [(Parsed(entry, None), *folder)] if folder else []
        for parsed, notebooks, companions in readings:
            student = mapping.lookup(entry, parsed.person) if mapping else parsed.student
            if student:
                claims.append(_Claim(student, entry, notebooks, parsed.person, parsed.attempt, companions,
                                     folder=len(inside[0].relative.parts) > 1))
            else:
                found.problems[entry] = refused or (_unmapped(mapping) if mapping else _unparseable(lab))
    return claims


def _unparseable(lab: str) -> str:
    return ("whose submission this is cannot be told from its name; the accepted namings are "
            f"{FORMATS.format(lab=lab)}. Name its student in a mapping file: mlsys course grade {lab} "
            "SUBMISSIONS --students FILE (a CSV with the columns prefix,student_id)")


def _unmapped(mapping: StudentMap) -> str:
    return f"no row of the mapping file {mapping.path} names it (by prefix or lms_id)"


def _collision(student: str, group: list[_Claim]) -> str:
    """Why ``student`` cannot be graded whoever submitted: an invalid id, or several submitters
    (two people) or several submissions (two folders of one person) claiming it; empty if none."""
    entries = ", ".join(sorted({claim.entry for claim in group}))
    submitters = {claim.submitter for claim in group}
    if len(submitters) > 1:
        return (f"{len(submitters)} different submitters claim the student id {student} ({entries}): "
                "not graded; give them distinct ids in a mapping file (--students)")
    if not STUDENT_ID.match(student):
        return "student id may only hold letters, digits and _ . @ - (at most 64, starting with a letter or digit)"
    if len({(claim.submission, claim.attempt) for claim in group}) > len({claim.attempt for claim in group}):
        return f"several submissions of one submitter ({entries}): not graded; keep the one that counts"
    return ""


def _take(student: str, group: list[_Claim], lab: str, found: Found) -> None:
    """Record ``student``'s notebook (of the latest attempt) with what the LMS said, or why there is none."""
    attempts = sorted({claim.attempt for claim in group})
    group = [claim for claim in group if claim.attempt == attempts[-1]]
    notes = [f"{len(attempts)} attempts in the download: graded the latest, {attempts[-1]}"] if len(attempts) > 1 else []
    person = group[0].person
    if person:
        found.people[student] = person
        notes += ["the LMS marked the submission late"] if person.late else []
    if notes:
        found.notes[student] = "; ".join(notes)
    files = [item for claim in group for item in claim.files]
    refused = [f.refused for _, f in files if f.refused]
    named = [f for name, f in files if name == f"{lab}.ipynb"]
    if refused:
        found.problems[student] = refused[0]
    elif not files:
        found.problems[student] = f"no notebook in {group[0].entry}/{lab}/"
    elif len(files) == 1 or len(named) == 1:
        found.notebooks[student] = found.root / (files[0][1] if len(files) == 1 else named[0]).relative
        if group[0].companions:
            found.companions[student] = group[0].companions
    else:
        found.problems[student] = (f"several notebooks and none is exactly {lab}.ipynb: "
                                   f"{', '.join(name for name, _ in files)}")


def _settle(claims: list[_Claim], lab: str, found: Found) -> None:
    """One notebook per student id, or the reason there is none: colliding claims are reported,
    never merged; of several Blackboard attempts the latest counts."""
    by_student: dict[str, list[_Claim]] = {}
    for claim in claims:
        by_student.setdefault(claim.student, []).append(claim)
    for student, group in sorted(by_student.items()):
        why = _collision(student, group)
        if why:
            found.problems[student] = why
        else:
            _take(student, group, lab, found)


def find_submissions(source: Path, lab: str, unpack_dir: Path, *, limit: int = 32 * 2**20,
                     students: Path | None = None) -> Found:
    """Locate every student's notebook for ``lab`` in ``source`` (a folder or a ``.zip``).

    A zip's notebooks are extracted into ``unpack_dir``. ``students`` names a mapping file (see
    :class:`~autograder.intake.lms.StudentMap`) whose ids win over those read off the names. Notebooks
    over ``limit`` bytes, links, special files, unreadable names and colliding ids are reported in
    ``Found.problems``. Raises ``ValueError`` if ``source`` is neither a folder nor a zip, or the
    mapping file is malformed.
    """
    mapping = StudentMap.load(students) if students else None
    found = Found()
    root, pending = _unpack(Path(source), lab, Path(unpack_dir), limit)
    found.root = root
    _settle(_claims(root, _walk(root) + pending, lab, limit, mapping, found), lab, found)
    return found


def format_found(found: Found) -> str:
    """What :func:`find_submissions` found, for an instructor: a line per student (id, LMS and its
    id for them, name, notebook), then what will not be graded and why, then remarks."""
    people = {student: found.people.get(student) for student in found.notebooks}
    width = max([len("student")] + [len(student) for student in people])
    lines = [f"{'student':<{width}}  {'lms':<10}  {'lms id':<14}  {'name':<20}  notebook"]
    for student, person in people.items():
        lms, lms_id, name = (person.lms, person.lms_id, person.name) if person else ("-", "-", "-")
        lines.append(f"{student:<{width}}  {lms:<10}  {lms_id:<14}  {name:<20}  "
                     f"{found.notebooks[student].relative_to(found.root)}")
    lines += [f"not graded: {key}: {why}" for key, why in sorted(found.problems.items())]
    lines += [f"note: {student}: {note}" for student, note in sorted(found.notes.items())]
    return "\n".join(lines)

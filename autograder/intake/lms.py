"""Whose notebook is this? The file naming of LMS downloads, a mapping file, and what the LMS told us.

Each LMS names a bulk download of an assignment its own way (every format below was read off the
LMS's own code or real downloads):

* **Moodle** ("Download all submissions"): ``<Full Name>_<participant>_assignsubmission_file_<file>``,
  or, with "Download submissions in folders" (the default since 3.1), a folder
  ``<Full Name>_<participant>_assignsubmission_file_`` (trailing ``_`` or not) holding the file(s).
  Moodle replaces ``_`` in the name by a space, so the name holds none. The participant number is
  the one the grading worksheet calls ``Participant <n>``; Moodle draws it per assignment.
* **Canvas** ("Download Submissions"): ``<name>_[late_]<user id>_<file id>_<file>``, where ``<name>``
  is the sortable name ("Doe, John") lowercased with everything but letters, digits and ``_``
  removed (``doejohn``), ``late_`` marks a late submission, and a resubmitted file's name gains
  ``-1``, ``-2`` (``lab01-1.ipynb``). The user id is the student's Canvas id in every course.
* **Blackboard** ("Assignment File Download"): ``<assignment>_<username>_attempt_<YYYY-MM-DD-HH-MM-SS>_<file>``
  plus a receipt ``<assignment>_<username>_attempt_<stamp>.txt`` per attempt whose first line is
  ``Name: <Full Name> (<username>)``; a download may hold several attempts of one student.
* **Gradescope** ("Export Submissions"): ``submission_metadata.yml`` mapping each ``submission_<n>/``
  folder to its submitters (``:name:``, ``:sid:``, ``:email:``); the folder holds the files.

A student id keeps the LMS's own number (two "John Doe"s are two students): Moodle
``jane-doe-123456``, Canvas ``doejohn-20001``, Blackboard the username, Gradescope the SID (else
the e-mail's local part). Names that fit no format are never guessed at: a mapping file
(:class:`StudentMap`) names their students.
"""

from __future__ import annotations

import csv
import json
import re
import unicodedata
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

import yaml
from nbgrader.api import Gradebook

from ..config import gradebook_url

#: What nbgrader accepts as a student id (it becomes a folder name and a database key).
STUDENT_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.@-]{0,63}$")

#: LMSes whose number for a student changes from one assignment to the next.
ASSIGNMENT_SCOPED = {"moodle"}

_MOODLE = re.compile(r"^(?P<name>[^_]+)_(?P<number>\d+)_assignsubmission_file(?:_(?P<file>.*))?$")
_BLACKBOARD = re.compile(r"^(?P<head>.+)_attempt_(?P<stamp>\d{4}(?:-\d\d){5})(?:_(?P<file>.+)|\.txt)$")
_RECEIPT_NAME = re.compile(r"^Name:\s*(?P<name>.*?)\s*\((?P<username>[^()\s]+)\)\s*$")
_CANVAS = re.compile(r"^(?:(?P<name>\w+?)_)??(?:(?P<late>late)_)?(?P<number>\d+)_(?P<file_id>\d+)_(?P<file>.+)$")
GRADESCOPE_FOLDER = re.compile(r"^submission_\d+$")

FORMATS = ("Moodle 'Full Name_<participant>_assignsubmission_file_<file>' (file or folder), "
           "Canvas '<name>_[late_]<user id>_<file id>_<file>', "
           "Blackboard '<assignment>_<username>_attempt_<YYYY-MM-DD-HH-MM-SS>_<file>', "
           "Gradescope 'submission_<n>/' beside submission_metadata.yml, "
           "'<student>_{lab}.ipynb' or a folder '<student>/'")


@dataclass(frozen=True)
class Person:
    """What an LMS download said about a student.

    ``lms_id`` is the LMS's own number or name for them: Moodle's participant number (of this
    assignment), Canvas's user id, Blackboard's username, Gradescope's SID (or e-mail).
    """

    lms: str
    lms_id: str
    name: str = ""
    email: str = ""
    late: bool = False

    def first_last(self) -> tuple[str, str]:
        """(first name, last name): the full name split at its last space."""
        first, _, last = self.name.rpartition(" ")
        return first, last


@dataclass(frozen=True)
class Parsed:
    """One file or folder name read as a student's: the id derived from it and what it tells."""

    student: str
    person: Person | None  # None for a plain '<student>_<lab>.ipynb'
    original: str = ""  # the file's name as the student uploaded it (flat downloads)
    attempt: str = ""  # Blackboard's attempt stamp, YYYY-MM-DD-HH-MM-SS (sorts by time)


def _slug(text: str) -> str:
    """``José Müller`` -> ``jose-muller``: folded to ASCII, lowercase letters and digits joined by ``-``."""
    folded = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode().lower()
    return re.sub(r"[^a-z0-9]+", "-", folded).strip("-")[:40].strip("-")


def slug_id(name: str, number: str, lms: str) -> str:
    """``jane-doe-123456``: the name's slug, then the LMS's number (``<lms>-<number>`` when nothing
    of the name is ASCII). Always a valid id."""
    return f"{_slug(name) or lms}-{number}"


def _valid_or_slug(candidate: str, lms: str) -> str:
    """``candidate`` if nbgrader accepts it as an id, else its slug (``lms`` if that is empty)."""
    return candidate if STUDENT_ID.match(candidate) else _slug(candidate) or lms


def moodle(name: str) -> Parsed | None:
    """A Moodle file ``Jane Doe_123456_assignsubmission_file_lab.ipynb`` or folder ``..._file_``."""
    match = _MOODLE.match(name)
    if not match:
        return None
    person = Person("moodle", match["number"], match["name"].strip())
    return Parsed(slug_id(person.name, person.lms_id, "moodle"), person, match["file"] or "")


def canvas(name: str) -> Parsed | None:
    """A Canvas file ``doejohn_late_20001_7788_lab.ipynb``."""
    match = _CANVAS.match(name)
    if not match:
        return None
    person = Person("canvas", match["number"], match["name"] or "", late=bool(match["late"]))
    return Parsed(slug_id(person.name, person.lms_id, "canvas"), person, match["file"])


def blackboard(name: str, read: Callable[[str], str | None]) -> Parsed | None:
    """A Blackboard file ``Lab 1_jdoe_attempt_2024-03-01-10-15-02_lab.ipynb``.

    The username is the part just before ``_attempt_``; the attempt's receipt (read by ``read``,
    which returns None when it is absent), names it and the full name, so a username holding ``_``
    is read whole.
    """
    match = _BLACKBOARD.match(name)
    if not match or not match["file"]:
        return None
    head, stamp = match["head"], match["stamp"]
    username, full_name = head.rpartition("_")[2], ""
    receipt = _RECEIPT_NAME.match((read(f"{head}_attempt_{stamp}.txt") or "").partition("\n")[0])
    if receipt and head.endswith("_" + receipt["username"]):
        username, full_name = receipt["username"], receipt["name"]
    person = Person("blackboard", username, full_name)
    return Parsed(_valid_or_slug(username, "blackboard"), person, match["file"], stamp)


def plain(name: str, lab: str) -> Parsed | None:
    """``<student>_<lab>.ipynb``: the part after the student is exactly the lab's name."""
    student = name.removesuffix(f"_{lab}.ipynb")
    return Parsed(student, None, f"{lab}.ipynb") if student != name and student else None


def identify(name: str, lab: str, read: Callable[[str], str | None]) -> Parsed | None:
    """The student a flat file of a download belongs to, by the first format its name fits; None if none."""
    return moodle(name) or blackboard(name, read) or canvas(name) or plain(name, lab)


def is_blackboard_receipt(name: str) -> bool:
    """True for ``<assignment>_<username>_attempt_<stamp>.txt``."""
    match = _BLACKBOARD.match(name)
    return bool(match) and not match["file"]


def gradescope_submitters(text: str) -> dict[str, list[Parsed]]:
    """``submission_metadata.yml``'s ``submission_<n>`` -> its submitters (several for a group).

    Raises ``ValueError`` if the text is not such a file.
    """
    try:
        metadata = yaml.safe_load(text)
    except yaml.YAMLError as error:
        raise ValueError(f"submission_metadata.yml is not YAML: {error}") from None
    if not isinstance(metadata, dict):
        raise ValueError("submission_metadata.yml does not map submission folders to their submitters")
    submissions = {}
    for folder, entry in metadata.items():
        submitters = entry.get(":submitters") if isinstance(entry, dict) else None
        if not isinstance(submitters, list):
            raise ValueError(f"submission_metadata.yml: {folder} lists no :submitters:")
        submissions[str(folder)] = [_gradescope_person(s) for s in submitters]
    return submissions


def _gradescope_person(submitter: dict) -> Parsed:
    name, sid, email = (str(submitter.get(f":{key}") or "").strip() for key in ("name", "sid", "email"))
    person = Person("gradescope", sid or email, name, email)
    return Parsed(_valid_or_slug(sid or email.partition("@")[0], "gradescope"), person)


class StudentMap:
    """A mapping file (``--students FILE``): a CSV with a header naming the column ``student_id``
    and ``prefix`` and/or ``lms_id``; other columns are ignored. Each row maps to ``student_id``

    * ``prefix``: every file or folder at the top of the download whose name is the prefix or
      starts with it followed by ``_`` or ``.`` (the longest prefix wins), or
    * ``lms_id``: the LMS's own id as the name shows it (Moodle participant number, Canvas user
      id, Blackboard username, Gradescope SID).

    Mapped ids win over the derived ones; in a mapped run an entry no row names is not graded.
    """

    def __init__(self, path: Path, prefixes: dict[str, str], lms_ids: dict[str, str]):
        self.path, self.prefixes, self.lms_ids = path, prefixes, lms_ids

    @classmethod
    def load(cls, path: Path) -> StudentMap:
        """Read and check the file; ``ValueError`` naming the file and line of the first mistake."""
        path = Path(path)
        try:
            rows = list(csv.reader(path.read_text(encoding="utf-8-sig").splitlines()))
        except UnicodeDecodeError:
            raise ValueError(f"{path}: not UTF-8 text") from None
        except OSError as error:
            raise ValueError(f"{path}: {error.strerror}") from None
        header = [column.strip().lower() for column in rows[0]] if rows else []
        if "student_id" not in header or not {"prefix", "lms_id"} & set(header):
            raise ValueError(f"{path} line 1: the header must name the columns student_id and prefix "
                             f"and/or lms_id; it has {', '.join(header) or 'nothing'}")
        tables: dict[str, dict[str, str]] = {"prefix": {}, "lms_id": {}}
        where: dict[tuple[str, str], int] = {}
        for line, row in enumerate(rows[1:], start=2):
            cells = dict(zip(header, (cell.strip() for cell in row)))
            if not any(cells.values()):
                continue
            student = cells.get("student_id", "")
            if not STUDENT_ID.match(student):
                raise ValueError(f"{path} line {line}: student_id {student!r} is not a valid id (letters, "
                                 "digits and _ . @ -, at most 64, starting with a letter or digit)")
            keys = [(column, cells[column]) for column in tables if cells.get(column)]
            if not keys:
                raise ValueError(f"{path} line {line}: neither prefix nor lms_id is given")
            for column, key in keys:
                if tables[column].get(key, student) != student:
                    raise ValueError(f"{path} line {line}: {column} {key!r} is mapped to "
                                     f"{tables[column][key]} on line {where[column, key]} already")
                tables[column][key], where[column, key] = student, line
        return cls(path, tables["prefix"], tables["lms_id"])

    def lookup(self, entry: str, person: Person | None) -> str | None:
        """The student id the file requires for the top-level ``entry`` (by what ``person`` says)."""
        fitting = [p for p in self.prefixes
                   if entry == p or (entry.startswith(p) and entry[len(p):len(p) + 1] in ("_", "."))]
        if fitting:
            return self.prefixes[max(fitting, key=len)]
        return self.lms_ids.get(person.lms_id) if person else None


def _people_file(root: Path) -> Path:
    return root / "people.json"


def load_people(root: Path, lab: str) -> dict[str, Person]:
    """student -> what the LMS said about them when ``lab`` was last graded under ``root``."""
    path = _people_file(root)
    stored = json.loads(path.read_text()).get(lab, {}) if path.exists() else {}
    return {student: Person(**fields) for student, fields in stored.items()}


def remember_people(root: Path, lab: str, people: dict[str, Person]) -> None:
    """Keep ``people`` for ``lab`` in ``<root>/people.json`` (for the grade export) and put their
    names, e-mail and LMS user id into the course gradebook (which must exist).

    The gradebook's ``lms_user_id`` is left alone for an LMS whose number is per assignment (Moodle).
    """
    path = _people_file(root)
    everything = json.loads(path.read_text()) if path.exists() else {}
    everything.setdefault(lab, {}).update({student: asdict(person) for student, person in people.items()})
    path.write_text(json.dumps(everything, indent=1, sort_keys=True))
    with Gradebook(gradebook_url(root)) as gradebook:
        for student, person in people.items():
            first, last = person.first_last()
            known = {"first_name": first, "last_name": last, "email": person.email,
                     "lms_user_id": person.lms_id if person.lms not in ASSIGNMENT_SCOPED else ""}
            gradebook.update_or_create_student(student, **{key: value for key, value in known.items() if value})

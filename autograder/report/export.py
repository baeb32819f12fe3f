"""A lab's grades as the file an LMS imports: Canvas's gradebook CSV, Moodle's grading worksheet.

* **Canvas** (Grades > Import): the columns ``Student, ID, SIS User ID, SIS Login ID, Section`` and
  one per assignment, then a ``Points Possible`` row; Canvas finds each student by ``ID`` (the user
  id of the submissions download) and the assignment by the column's title, ``Name (<assignment
  id>)`` as its own export writes it (a title it does not know makes a new assignment).
* **Moodle** (the assignment's "Upload grading worksheet", which needs the feedback type "Offline
  grading worksheet"): Moodle reads the columns ``Identifier`` (``Participant <n>``, the number of
  the submissions download), ``Grade`` and ``Last modified (grade)`` (a grade changed in Moodle
  after it is kept unless "Ignore modified" is ticked); the others are those of its own worksheet.

Only students the LMS itself named when the lab was graded are exported: one graded from a plain
folder, or whose id came from another LMS, is reported, never given a made-up LMS id.
"""

from __future__ import annotations

import csv
import datetime as dt
from dataclasses import dataclass, field
from pathlib import Path

from ..config import gradebook_file, gradebook_url
from ..intake.lms import load_people
from ..paths import check_lab, course_dir
from .report import load_notes, read_results

LMSES = ("canvas", "moodle")
CANVAS_COLUMNS = ["Student", "ID", "SIS User ID", "SIS Login ID", "Section"]
MOODLE_COLUMNS = ["Identifier", "Full name", "Email address", "Status", "Grade", "Maximum Grade",
                  "Grade can be changed", "Last modified (submission)", "Last modified (grade)"]


@dataclass
class Exported:
    """The file written, how many students it holds, and the students left out with why."""

    path: Path
    rows: int
    left_out: dict[str, str] = field(default_factory=dict)


def _number(value: float) -> str:
    """``7.5``, ``10``: at most two decimals, no trailing zeros."""
    return f"{value:.2f}".rstrip("0").rstrip(".")


def export_grades(lab: str, lms: str, out: Path | None = None, *, root: Path | None = None,
                  column: str | None = None, points: float | None = None) -> Exported:
    """Write ``lab``'s grades under the course ``root`` as ``lms`` ("canvas" or "moodle") imports
    them into ``out`` (default ``<root>/<lab>_<lms>.csv``).

    ``column`` titles Canvas's assignment column (default: the lab); ``points`` rescales every
    score to that maximum (the LMS assignment's points). Raises ``ValueError`` for an unknown lab
    or LMS, or a lab with no grades under ``root``.
    """
    check_lab(lab)
    if lms not in LMSES:
        raise ValueError(f"unknown LMS {lms!r}: the exports are {', '.join(LMSES)}")
    root = Path(root or course_dir())
    file = gradebook_file(gradebook_url(root))
    if file is not None and not file.exists():
        raise ValueError(f"no gradebook in {root}: grade {lab} first")
    results = read_results(root, lab, load_notes(root, "problems", lab), load_notes(root, "flags", lab))
    if not results:
        raise ValueError(f"no grades of {lab} in {root}")
    people, left_out, rows = load_people(root, lab), {}, []
    for result in results:
        person = people.get(result.student)
        if person is None:
            left_out[result.student] = "the LMS did not name this student (a plain folder, or an unreadable name)"
        elif person.lms != lms or not person.lms_id:
            left_out[result.student] = f"named by {person.lms} {person.lms_id!r}, not by {lms}"
        else:
            rows.append((result, person))
    maximum = max(r.max_score for r in results)
    scale = points / maximum if points and maximum else 1.0
    out = Path(out or root / f"{lab}_{lms}.csv")
    with open(out, "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        if lms == "canvas":
            writer.writerow(CANVAS_COLUMNS + [column or lab])
            writer.writerow(["    Points Possible", "", "", "", "", _number(maximum * scale)])
            for result, person in rows:
                writer.writerow([person.name or result.student, person.lms_id, "", "", "", _number(result.score * scale)])
        else:
            stamp = dt.datetime.now().strftime("%Y-%m-%d %H:%M:%S")
            writer.writerow(MOODLE_COLUMNS)
            for result, person in rows:
                writer.writerow([f"Participant {person.lms_id}", person.name, person.email, result.status,
                                 _number(result.score * scale), _number(maximum * scale), "Yes", "-", stamp])
    return Exported(out, len(rows), left_out)

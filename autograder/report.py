"""Grades out of the gradebook: ``grades.csv``, ``exercises.csv`` and the table printed to instructors."""

from __future__ import annotations

import csv
from dataclasses import dataclass, field
from pathlib import Path

from nbgrader.api import Gradebook, MissingEntry

GRADED = "graded"


@dataclass
class StudentResult:
    """One student's result on one lab. ``exercises`` maps each test cell's grade_id to (score, max)."""

    student: str
    lab: str
    score: float
    max_score: float
    status: str = GRADED
    exercises: dict[str, tuple[float, float]] = field(default_factory=dict)


def read_results(root: Path, lab: str, problems: dict[str, str]) -> list[StudentResult]:
    """Results of every student of ``lab`` in the gradebook under ``root``, plus the ungradable ones.

    A student listed in ``problems`` scores 0 with the reason as status, even if an older
    submission of theirs is still in the gradebook.
    """
    with Gradebook(f"sqlite:///{root / 'gradebook.db'}") as gb:
        try:
            assignment = gb.find_assignment(lab)
        except MissingEntry:
            return [StudentResult(s, lab, 0.0, 0.0, why) for s, why in sorted(problems.items())]
        max_score = float(assignment.max_score)
        results = {}
        for submission in assignment.submissions:
            student = submission.student.id
            if student in problems:
                continue
            exercises = {
                grade.name: (float(grade.score), float(grade.max_score))
                for notebook in submission.notebooks
                for grade in sorted(notebook.grades, key=lambda g: g.cell.name)
                if grade.max_score > 0
            }
            results[student] = StudentResult(student, lab, float(submission.score), max_score, GRADED, exercises)
        for student, why in problems.items():
            results[student] = StudentResult(student, lab, 0.0, max_score, why)
    return [results[s] for s in sorted(results)]


def write_reports(root: Path, problems_by_lab: dict[str, dict[str, str]]) -> None:
    """Rewrite ``grades.csv`` (a row per student and lab) and ``exercises.csv`` (a row per test)."""
    rows = [r for lab, problems in problems_by_lab.items() for r in read_results(root, lab, problems)]
    with open(root / "grades.csv", "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["student_id", "lab", "score", "max_score", "status"])
        for r in rows:
            writer.writerow([r.student, r.lab, f"{r.score:g}", f"{r.max_score:g}", r.status])
    with open(root / "exercises.csv", "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["student_id", "lab", "test", "score", "max_score"])
        for r in rows:
            for name, (score, maximum) in r.exercises.items():
                writer.writerow([r.student, r.lab, name, f"{score:g}", f"{maximum:g}"])


def format_table(results: list[StudentResult]) -> str:
    """A plain-text table: student, score / max, status."""
    width = max([len("student")] + [len(r.student) for r in results])
    lines = [f"{'student':<{width}}  {'score':>13}  status"]
    for r in results:
        lines.append(f"{r.student:<{width}}  {r.score:>6g} / {r.max_score:<4g}  {r.status}")
    return "\n".join(lines)

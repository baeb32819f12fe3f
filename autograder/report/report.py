"""Grades out of the gradebook: ``grades.csv``, ``exercises.csv`` and the table printed to instructors."""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass, field
from pathlib import Path

from nbgrader.api import Gradebook, MissingEntry

from ..config import gradebook_url

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


def read_results(root: Path, lab: str, problems: dict[str, str],
                 flags: dict[str, str] | None = None) -> list[StudentResult]:
    """Results of every student of ``lab`` in the gradebook under ``root``, plus the ungradable ones.

    A student listed in ``problems`` scores 0 with the reason as status, even if an older
    submission of theirs is still in the gradebook; one listed in ``flags`` keeps the score, with
    status ``flagged: <why>`` for an instructor to look at. The score is net of nbgrader's late
    penalty (``c.LateSubmissionPlugin``), which the status then names; the exercises' are not.
    """
    flags = flags or {}
    with Gradebook(gradebook_url(root)) as gb:
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
            penalty = float(submission.late_submission_penalty or 0)
            status = f"flagged: {flags[student]}" if student in flags else GRADED
            if penalty:
                status += f" (late: -{penalty:g})"
            results[student] = StudentResult(student, lab, max(0.0, float(submission.score) - penalty), max_score,
                                             status, exercises)
        for student, why in problems.items():
            results[student] = StudentResult(student, lab, 0.0, max_score, why)
    return [results[s] for s in sorted(results)]


def write_reports(root: Path, notes_by_lab: dict[str, tuple[dict[str, str], dict[str, str]]]) -> None:
    """Rewrite ``grades.csv`` (a row per student and lab) and ``exercises.csv`` (a row per test).

    ``notes_by_lab`` maps each lab to its (problems, flags), as :func:`read_results` takes them.
    """
    rows = [r for lab, notes in notes_by_lab.items() for r in read_results(root, lab, *notes)]
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


def exercise_summary(results: list[StudentResult]) -> list[tuple[str, float, float, float]]:
    """Per test cell over the graded students: (test, mean score, max score, fraction failing), the
    most failed first."""
    by_test: dict[str, list[tuple[float, float]]] = {}
    for r in results:
        for name, scored in r.exercises.items():
            by_test.setdefault(name, []).append(scored)
    rows = []
    for name, scores in by_test.items():
        maximum = scores[0][1]
        failing = sum(score < top for score, top in scores) / len(scores)
        rows.append((name, sum(score for score, _ in scores) / len(scores), maximum, failing))
    return sorted(rows, key=lambda row: (-row[3], row[0]))


def write_summary(root: Path, lab: str, results: list[StudentResult]) -> Path:
    """``summary_<lab>.md`` (score statistics, tests that fail most, students needing attention)
    and ``scores_<lab>.png`` (the score distribution); returns the Markdown file."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    scores = [r.score for r in results]
    maximum = max((r.max_score for r in results), default=0)
    figure, ax = plt.subplots(figsize=(6, 3.5), layout="constrained")
    ax.hist(scores, bins=min(20, max(1, int(maximum) + 1)), range=(0, maximum or 1), color="tab:blue")
    ax.set_xlabel(f"score (out of {maximum:g})")
    ax.set_ylabel("students")
    ax.set_title(f"{lab}: {len(scores)} submissions")
    plot = root / f"scores_{lab}.png"
    figure.savefig(plot, dpi=110)
    plt.close(figure)

    mean = sum(scores) / len(scores) if scores else 0.0
    lines = [f"# {lab}: grading summary", "",
             f"{len(results)} students, mean {mean:.2f} / {maximum:g}, "
             f"{sum(r.score == maximum for r in results)} with full marks.", "",
             f"![score distribution]({plot.name})", "", "## Tests, most failed first", "",
             "| test | mean | max | failing |", "|---|---|---|---|"]
    lines += [f"| {name} | {avg:.2f} | {top:g} | {fail:.0%} |" for name, avg, top, fail in exercise_summary(results)]
    attention = [r for r in results if r.status != GRADED]
    if attention:
        lines += ["", "## Needs attention", ""] + [f"- {r.student}: {r.status}" for r in attention]
    summary = root / f"summary_{lab}.md"
    summary.write_text("\n".join(lines) + "\n")
    return summary


def _notes_file(root: Path) -> Path:
    return root / "grading_notes.json"


def load_notes(root: Path, kind: str, lab: str) -> dict[str, str]:
    """student -> note of ``kind`` ("problems": why not graded; "flags": why to look again) for ``lab``."""
    path = _notes_file(root)
    return json.loads(path.read_text()).get(kind, {}).get(lab, {}) if path.exists() else {}


def record_notes(root: Path, kind: str, lab: str, notes: dict[str, str], replaced: set[str]) -> None:
    """Store ``notes``; the old notes of the ``replaced`` students go (their new ones are in ``notes``)."""
    path = _notes_file(root)
    everything = json.loads(path.read_text()) if path.exists() else {}
    kept = {s: why for s, why in everything.get(kind, {}).get(lab, {}).items() if s not in replaced}
    everything.setdefault(kind, {})[lab] = {**kept, **notes}
    path.write_text(json.dumps(everything, indent=1, sort_keys=True))

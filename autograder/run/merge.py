"""Copy one student's graded submission from a worker's gradebook into the course gradebook."""

from __future__ import annotations

from pathlib import Path

from nbgrader.api import Gradebook, MissingEntry


def _db(path: Path) -> str:
    return f"sqlite:///{path}"


def merge_submission(source_db: Path, target_db: Path, lab: str, student: str) -> None:
    """Replace ``student``'s submission of ``lab`` in ``target_db`` by the one in ``source_db``.

    Both gradebooks must hold the same assignment (the worker's is a copy of the course's, made
    before grading). Scores, comments, flags and the timestamp are carried over.
    """
    with Gradebook(_db(source_db)) as source, Gradebook(_db(target_db)) as target:
        graded = source.find_submission(lab, student)
        try:
            target.remove_submission(lab, student)
        except MissingEntry:
            pass
        target.update_or_create_student(student)
        target.add_submission(lab, student, timestamp=graded.timestamp)
        for notebook in graded.notebooks:
            copy = target.find_submission_notebook(notebook.name, lab, student)
            copy.flagged = notebook.flagged
            copy.late_submission_penalty = notebook.late_submission_penalty
            for grade in notebook.grades:
                into = target.find_grade(grade.name, notebook.name, lab, student)
                into.auto_score, into.manual_score = grade.auto_score, grade.manual_score
                into.extra_credit, into.needs_manual_grade = grade.extra_credit, grade.needs_manual_grade
            for comment in notebook.comments:
                into = target.find_comment(comment.name, notebook.name, lab, student)
                into.auto_comment, into.manual_comment = comment.auto_comment, comment.manual_comment
        target.db.commit()

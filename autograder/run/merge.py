"""Copy between the course gradebook and a worker's private one: the lab's definition out, one
student's graded submission back in.

The course gradebook is nbgrader's (any ``db_url``: the SQLite file of the course folder or a
PostgreSQL server the teaching team shares); a worker's is always a SQLite file of its private root.
"""

from __future__ import annotations

import functools
from pathlib import Path
from unittest import mock

import nbgrader.api
from nbgrader.api import Gradebook, MissingEntry

from ..config import gradebook_file


def _db(path: Path) -> str:
    return f"sqlite:///{path}"


def holds_lab(url: str, lab: str) -> bool:
    """Whether the gradebook at ``url`` holds ``lab`` (a SQLite file that does not exist holds nothing)."""
    file = gradebook_file(url)
    if file is not None and not file.is_file():
        return False
    with open_gradebook(url) as gradebook:
        try:
            gradebook.find_assignment(lab)
        except MissingEntry:
            return False
    return True


@functools.cache
def alembic_head() -> str:
    """The revision nbgrader stamps a new gradebook with: its migrations' head, read in this process."""
    from alembic.config import Config
    from alembic.script import ScriptDirectory
    from nbgrader.dbutil import ALEMBIC_DIR

    config = Config()
    config.set_main_option("script_location", ALEMBIC_DIR)
    return ScriptDirectory.from_config(config).get_current_head()


def open_gradebook(url: str) -> Gradebook:
    """nbgrader's gradebook at ``url``, made if the database is empty. To make one, nbgrader asks a
    subprocess, ``alembic heads``, which revision to stamp it with: seconds (the whole of a small
    batch's template), and found only if this environment's ``bin`` is on ``PATH``; the same answer
    comes from :func:`alembic_head` in this process."""
    with mock.patch.object(nbgrader.api, "get_alembic_version", alembic_head):
        return Gradebook(url)


def copy_assignment(source_url: str, target_db: Path, lab: str) -> None:
    """Put ``lab`` as the gradebook at ``source_url`` defines it (its notebooks, their cells, points and
    checksums: what nbgrader's autograde needs) into the SQLite gradebook ``target_db``, made if absent.

    Raises :class:`nbgrader.api.MissingEntry` if ``source_url`` does not hold ``lab``.
    """
    with open_gradebook(source_url) as source, open_gradebook(_db(target_db)) as target:
        assignment = source.find_assignment(lab)
        target.update_or_create_assignment(lab, duedate=assignment.duedate, course_id=assignment.course_id)
        for notebook in assignment.notebooks:
            target.update_or_create_notebook(notebook.name, lab, kernelspec=notebook.kernelspec)
            for cell in notebook.grade_cells:
                target.update_or_create_grade_cell(cell.name, notebook.name, lab, max_score=cell.max_score,
                                                   cell_type=cell.cell_type)
            for cell in notebook.solution_cells:
                target.update_or_create_solution_cell(cell.name, notebook.name, lab)
            for cell in notebook.task_cells:
                target.update_or_create_task_cell(cell.name, notebook.name, lab, max_score=cell.max_score,
                                                  cell_type=cell.cell_type)
            for cell in notebook.source_cells:
                target.update_or_create_source_cell(cell.name, notebook.name, lab, cell_type=cell.cell_type,
                                                    locked=cell.locked, source=cell.source, checksum=cell.checksum)
        target.db.commit()


def merge_submission(source_db: Path, target_url: str, lab: str, student: str) -> None:
    """Replace ``student``'s submission of ``lab`` in the gradebook at ``target_url`` by the one in the
    SQLite gradebook ``source_db``.

    Both gradebooks must hold the same assignment (the worker's is a copy of the course's lab, made
    before grading: :func:`copy_assignment`). Scores, comments, flags and the timestamp are carried
    over; only ``student``'s rows are written, so graders writing other students at once lose nothing.
    """
    with open_gradebook(_db(source_db)) as source, open_gradebook(target_url) as target:
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

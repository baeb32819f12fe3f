"""The nbgrader cells of the course's source notebooks (``solutions/``), read by grade_id.

What every stage needs of them: the answer cells' solutions and the graded test cells, hidden tests
included (the sandbox's settings list the test cells' digests, :func:`autograder.config.sandbox_settings`);
a release with chosen answers filled in (sample submissions, the student kit's probes, the blank
release as the autograder sees it); and the markers that no released file may contain.
"""

from __future__ import annotations

import hashlib
import re

import nbformat

from .paths import SOLUTIONS

#: nbgrader's markers of solution and hidden-test text: a release or student kit holding one leaks it.
SECRET_MARKERS = ("BEGIN SOLUTION", "END SOLUTION", "BEGIN HIDDEN TESTS", "END HIDDEN TESTS")
SOLUTION_MARKER = re.compile(r"^[ \t]*### (BEGIN|END) SOLUTION[ \t]*\n?", re.MULTILINE)


def source_fingerprint(lab: str) -> str:
    """Changes when the lab's source notebooks (its cells, tests and points) change."""
    digest = hashlib.sha256()
    for source in sorted((SOLUTIONS / lab).glob("*.ipynb")):
        digest.update(source.read_bytes())
    return digest.hexdigest()


def _grade_id(cell) -> str | None:
    return cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")


def _source_cells(lab: str, kind: str) -> dict[str, str]:
    """grade_id -> source of every cell of ``lab``'s source notebook whose nbgrader ``kind`` is set."""
    cells = {}
    for path in sorted((SOLUTIONS / lab).glob("*.ipynb")):
        for cell in nbformat.read(path, as_version=4).cells:
            meta = cell.get("metadata", {}).get("nbgrader", {})
            if meta.get(kind):
                cells[meta["grade_id"]] = cell.source
    return cells


def solution_cells(lab: str) -> dict[str, str]:
    """grade_id -> full solution source (markers removed) of every answer cell of ``lab``."""
    return {grade_id: SOLUTION_MARKER.sub("", source) for grade_id, source in _source_cells(lab, "solution").items()}


def grade_cells(lab: str) -> dict[str, str]:
    """grade_id -> full source, hidden tests included, of every graded test cell of ``lab``."""
    return _source_cells(lab, "grade")


def fill(release: nbformat.NotebookNode, answers: dict[str, str]) -> nbformat.NotebookNode:
    """A copy of ``release`` whose answer cells hold ``answers`` (grade_id -> source)."""
    notebook = nbformat.from_dict(release)
    unknown = set(answers) - {_grade_id(c) for c in notebook.cells}
    if unknown:
        raise ValueError(f"no cell with grade_id {sorted(unknown)} in the release")
    for cell in notebook.cells:
        if _grade_id(cell) in answers:
            cell.source = answers[_grade_id(cell)]
    return notebook

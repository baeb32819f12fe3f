"""Repair what students do to notebooks before nbgrader sees them.

A student who copies a cell duplicates its nbgrader ``grade_id``. nbgrader's own DeduplicateIds
then empties the copy's metadata to ``{}``, which its CheckCellMetadata reads as an outdated format
and fails the whole notebook ("nbgrader update ."): the student would score 0. Here the copies are
demoted to plain cells *before* nbgrader runs (the last occurrence keeps the grade_id, as nbgrader
would keep it), so they still run but are not graded twice.
"""

from __future__ import annotations

from pathlib import Path

import nbformat


class UnreadableSubmission(ValueError):
    """The file is not a notebook nbgrader can read; the message says why."""


def read_submission(path: Path) -> nbformat.NotebookNode:
    """Read a submitted notebook, raising :class:`UnreadableSubmission` with a short reason."""
    try:
        return nbformat.read(path, as_version=4)
    except Exception as error:  # corrupted JSON, wrong schema, binary junk: all the same to a grader
        first_line = (str(error).splitlines() or [""])[0][:120]
        raise UnreadableSubmission(f"unreadable notebook ({type(error).__name__}: {first_line})") from None


def demote_duplicate_cells(notebook: nbformat.NotebookNode) -> list[str]:
    """Strip nbgrader metadata from every earlier copy of a grade_id; return the ids that had copies."""
    seen: set[str] = set()
    duplicated = []
    for cell in reversed(notebook.cells):
        grade_id = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")
        if grade_id is None:
            continue
        if grade_id in seen:
            del cell.metadata["nbgrader"]
            duplicated.append(grade_id)
        seen.add(grade_id)
    return sorted(set(duplicated))

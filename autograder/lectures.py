"""Render the lecture notebooks: executing each one writes its figures to ``lectures/figures/``."""

from __future__ import annotations

from pathlib import Path

import nbformat
from nbclient import NotebookClient

from .config import GRADING_KERNEL
from .nbgrader_run import grading_environment
from .paths import LECTURES, course_dir

#: Seconds one lecture cell may take (the matmul sweeps time naive kernels).
LECTURE_CELL_TIMEOUT_S = 600


def render_lectures(names: list[str] | None = None, *, root: Path | None = None) -> list[Path]:
    """Execute ``lectures/<name>.ipynb`` (default: all) in ``lectures/``; return the figures written.

    The notebooks on disk are left as they are (outputs stay out of git).
    """
    notebooks = sorted(LECTURES.glob("lec*.ipynb"))
    if names:
        notebooks = [nb for nb in notebooks if nb.stem in names]
    figures = LECTURES / "figures"
    figures.mkdir(exist_ok=True)
    before = {p: p.stat().st_mtime for p in figures.glob("*")}
    with grading_environment(Path(root or course_dir())):
        for path in notebooks:
            notebook = nbformat.read(path, as_version=4)
            NotebookClient(notebook, kernel_name=GRADING_KERNEL, timeout=LECTURE_CELL_TIMEOUT_S,
                           resources={"metadata": {"path": str(LECTURES)}}).execute()
    return sorted(p for p in figures.glob("*") if before.get(p) != p.stat().st_mtime)

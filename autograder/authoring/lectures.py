"""Render the lecture notebooks: executing each one writes its figures to ``lectures/figures/``.

Each timing figure also states the claim it illustrates with :func:`mlsys_lib.viz.claim`, which
prints the measured ratio; the claim lines are collected here so ``mlsys course figures`` can show
them and warn when this machine's measurement contradicts the lecture's text.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from unittest import mock

import nbformat
from nbclient import NotebookClient

from mlsys_lib.viz.claims import parse_claims

from ..config import GRADING_KERNEL
from ..paths import LECTURES, course_dir
from ..run.nbgrader_run import grading_environment

#: Seconds one lecture cell may take (the matmul sweeps time naive kernels).
LECTURE_CELL_TIMEOUT_S = 600
#: Set to "1" in a lecture's kernel, it draws its figures at small sizes (seconds, not minutes).
QUICK_ENV = "MLSYS_QUICK"


@dataclass
class Rendered:
    """What rendering wrote: the figures, and each lecture's claim lines as ``(lecture, holds, line)``."""

    figures: list[Path] = field(default_factory=list)
    claims: list[tuple[str, bool, str]] = field(default_factory=list)

    @property
    def contradicted(self) -> list[tuple[str, bool, str]]:
        return [c for c in self.claims if not c[1]]


def _printed(notebook) -> str:
    """Everything the notebook's code cells printed to stdout."""
    return "".join(output.get("text", "") for cell in notebook.cells if cell.cell_type == "code"
                   for output in cell.get("outputs", []) if output.get("name") == "stdout")


def render_lectures(names: list[str] | None = None, *, root: Path | None = None, quick: bool = False) -> Rendered:
    """Execute ``lectures/<name>.ipynb`` (default: all) in ``lectures/``; return the figures and claims.

    ``quick``: at small sizes (:data:`QUICK_ENV`; what ``make course`` and the tests draw), else at the
    full sizes the lectures show (``make plots``). The notebooks on disk are left as they are (outputs
    stay out of git).
    """
    notebooks = sorted(LECTURES.glob("lec*.ipynb"))
    if names:
        notebooks = [nb for nb in notebooks if nb.stem in names]
    figures = LECTURES / "figures"
    figures.mkdir(exist_ok=True)
    before = {p: p.stat().st_mtime for p in figures.glob("*")}
    rendered = Rendered()
    sizes = {QUICK_ENV: "1"} if quick else {}
    with grading_environment(Path(root or course_dir())), mock.patch.dict(os.environ, sizes):
        for path in notebooks:
            notebook = nbformat.read(path, as_version=4)
            NotebookClient(notebook, kernel_name=GRADING_KERNEL, timeout=LECTURE_CELL_TIMEOUT_S,
                           resources={"metadata": {"path": str(LECTURES)}}).execute()
            rendered.claims += [(path.stem, holds, line) for holds, line in parse_claims(_printed(notebook))]
    rendered.figures = sorted(p for p in figures.glob("*") if before.get(p) != p.stat().st_mtime)
    return rendered

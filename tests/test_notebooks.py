"""The lecture notebooks run top to bottom and write their figures (small sizes: MLSYS_QUICK=1)."""

import os

import pytest

from autograder.lectures import render_lectures
from autograder.paths import LECTURES

pytestmark = pytest.mark.slow

FIGURES = {
    "lec01_tensors": ["lec01_traversal.png", "lec01_matmul_gflops.png", "lec01_roofline.png"],
}


@pytest.mark.parametrize("lecture", sorted(p.stem for p in LECTURES.glob("lec*.ipynb")))
def test_lecture_renders_its_figures(lecture, course_root, monkeypatch):
    monkeypatch.setenv("MLSYS_QUICK", "1")
    assert lecture in FIGURES, f"list the figures {lecture} must write"
    for name in FIGURES[lecture]:
        (LECTURES / "figures" / name).unlink(missing_ok=True)
    written = render_lectures([lecture], root=course_root)
    for name in FIGURES[lecture]:
        path = LECTURES / "figures" / name
        assert path in written and path.stat().st_size > 10_000, f"{lecture} did not draw {name}"

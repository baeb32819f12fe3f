"""Sample submissions: wrong-answer fixtures parse and fill the release."""

import nbformat
import pytest

from autograder.authoring import samples
from autograder.paths import LABS, lab_names


def test_every_lab_has_at_least_two_wrong_answers():
    for lab in lab_names():
        wrongs = samples.wrong_answers(lab)
        assert len(wrongs) >= 2, f"{lab} needs at least two wrong-answer fixtures"
        for wrong in wrongs:
            assert wrong.description and wrong.loses and wrong.cells


def test_fixtures_name_real_cells():
    for lab in lab_names():
        release = nbformat.read(LABS / lab / f"{lab}.ipynb", as_version=4)
        ids = {c.metadata.get("nbgrader", {}).get("grade_id") for c in release.cells}
        for wrong in samples.wrong_answers(lab):
            assert set(wrong.cells) <= ids, f"{wrong.name}: unknown answer cells {set(wrong.cells) - ids}"
            assert set(wrong.loses) <= ids, f"{wrong.name}: unknown test cells {set(wrong.loses) - ids}"


def test_parse_rejects_fixture_without_expectation(tmp_path):
    path = tmp_path / "bad.py"
    path.write_text("# Wrong answer: something\n# %% grade_id=x\npass\n")
    with pytest.raises(ValueError, match="loses"):
        samples.parse_wrong_answer(path)
    path.write_text("# loses: t\nprint('no section')\n")
    with pytest.raises(ValueError, match="grade_id"):
        samples.parse_wrong_answer(path)


def test_solution_sample_has_no_markers_and_no_stubs(tmp_path):
    for lab in lab_names():
        students = samples.build_samples(lab, tmp_path / lab)
        assert {"solution", "blank"} <= set(students)
        solved = (tmp_path / lab / "solution" / f"{lab}.ipynb").read_text()
        assert "BEGIN SOLUTION" not in solved and "NotImplementedError()" not in solved
        blank = nbformat.read(tmp_path / lab / "blank" / f"{lab}.ipynb", as_version=4)
        assert blank == nbformat.read(LABS / lab / f"{lab}.ipynb", as_version=4)

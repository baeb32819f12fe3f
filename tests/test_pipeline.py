"""The whole nbgrader path of a lab: release, check, collect, autograde, feedback, grades, bundle.

Slow: every graded submission runs a real Jupyter kernel through nbgrader.
"""

import copy
import csv
import html
import json
import re
import zipfile

import nbformat
import pytest

from autograder import course, samples
from autograder.bundle import audit, bundle
from autograder.paths import LABS, SOLUTIONS, lab_names

pytestmark = pytest.mark.slow

HIDDEN_REGION = re.compile(r"### BEGIN HIDDEN TESTS\n(.*?)### END HIDDEN TESTS", re.DOTALL)


def hidden_lines(lab):
    """Every substantial source line of the lab's hidden tests that the release does not show."""
    lines = set()
    for path in (SOLUTIONS / lab).glob("*.ipynb"):
        for cell in nbformat.read(path, as_version=4).cells:
            for region in HIDDEN_REGION.findall(cell.source):
                lines |= {line.strip() for line in region.splitlines() if len(line.strip()) > 25}
        released = (LABS / lab / path.name).read_text()
        lines = {line for line in lines if json.dumps(line)[1:-1] not in released}
    return lines


def _cell_index(notebook, grade_id):
    return next(i for i, c in enumerate(notebook.cells) if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id)


def add_trap_submissions(lab, folder):
    """Students who hit nbgrader's known traps, built from the solution sample."""
    solved = nbformat.read(folder / "solution" / f"{lab}.ipynb", as_version=4)
    copied = copy.deepcopy(solved)  # a copied test cell: a duplicate grade_id
    first_test = next(c for c in copied.cells if c.metadata.get("nbgrader", {}).get("grade"))
    copied.cells.insert(_cell_index(copied, first_test.metadata.nbgrader.grade_id) + 1, copy.deepcopy(first_test))
    foreign = copy.deepcopy(solved)  # saved with a kernel the grader does not have
    foreign.metadata.kernelspec = {"name": "julia-1.9", "display_name": "Julia 1.9", "language": "julia"}
    for student, notebook in [("copied_cell", copied), ("foreign_kernel", foreign)]:
        (folder / student).mkdir()
        nbformat.write(notebook, folder / student / f"{lab}.ipynb")
    (folder / "corrupted").mkdir()
    (folder / "corrupted" / f"{lab}.ipynb").write_text('{"cells": [{"cell_type": "code", "sou')


#: The traps test the course tool, not a lab: one lab carries them.
TRAP_LAB = "lab01_tensors"


@pytest.fixture(scope="module", params=lab_names())
def graded(request, course_root, tmp_path_factory):
    lab = request.param
    folder = tmp_path_factory.mktemp(f"submissions_{lab}")
    expected = samples.build_samples(lab, folder)
    if lab == TRAP_LAB:
        add_trap_submissions(lab, folder)
    results = course.grade(lab, folder, root=course_root, log=lambda message: None)
    return lab, {r.student: r for r in results}, expected, course_root


def test_solution_scores_full_marks_and_blank_scores_zero(graded):
    lab, results, _, _ = graded
    assert results["solution"].status == "graded"
    assert results["solution"].score == results["solution"].max_score > 0
    assert results["blank"].status == "graded" and results["blank"].score == 0


def test_each_wrong_answer_loses_exactly_its_tests(graded):
    lab, results, expected, _ = graded
    wrongs = {student: wrong for student, wrong in expected.items() if wrong is not None}
    assert len(wrongs) >= 2
    for student, wrong in wrongs.items():
        result = results[student]
        lost = {name for name, (score, maximum) in result.exercises.items() if score < maximum}
        assert lost == set(wrong.loses), f"{student} ({wrong.description}) lost {sorted(lost)}"
        assert result.score < result.max_score


def test_nbgrader_traps_do_not_cost_a_grade(graded):
    lab, results, _, _ = graded
    if lab != TRAP_LAB:
        pytest.skip(f"the traps are graded with {TRAP_LAB}")
    full = results["solution"].max_score
    assert results["copied_cell"].score == full, results["copied_cell"]
    assert results["foreign_kernel"].score == full, results["foreign_kernel"]
    corrupted = results["corrupted"]
    assert corrupted.score == 0 and "unreadable notebook" in corrupted.status


def test_grades_csv_has_every_student_with_a_status(graded):
    lab, results, _, root = graded
    with open(root / "grades.csv") as handle:
        rows = {(r["student_id"], r["lab"]): r for r in csv.DictReader(handle)}
    for student, result in results.items():
        row = rows[(student, lab)]
        assert float(row["score"]) == result.score and row["status"] == result.status
    with open(root / "exercises.csv") as handle:
        tests = [r for r in csv.DictReader(handle) if r["student_id"] == "solution" and r["lab"] == lab]
    assert tests and all(float(r["score"]) == float(r["max_score"]) for r in tests)


def test_feedback_shows_no_hidden_test(graded):
    lab, results, _, root = graded
    secrets = hidden_lines(lab)
    assert secrets, "the lab has hidden tests"
    for student, result in results.items():
        if result.status != "graded":
            continue
        page = (root / "feedback" / student / lab / f"{lab}.html").read_text()
        text = html.unescape(re.sub(r"<[^>]+>", "", page))
        assert "HIDDEN TESTS" not in text, student
        leaked = [line for line in secrets if line in text]
        assert not leaked, f"feedback of {student} shows hidden-test lines: {leaked[:3]}"


def test_regrading_is_idempotent_and_leaves_no_stray_files(graded, tmp_path, monkeypatch):
    lab, results, _, root = graded
    submissions, elsewhere = tmp_path / "submissions", tmp_path / "cwd"
    (submissions / "solution").mkdir(parents=True)
    elsewhere.mkdir()
    solved = samples.fill(nbformat.read(LABS / lab / f"{lab}.ipynb", as_version=4), samples.solution_cells(lab))
    nbformat.write(solved, submissions / "solution" / f"{lab}.ipynb")
    monkeypatch.chdir(elsewhere)
    again = course.grade(lab, submissions, root=root, log=lambda message: None)
    assert [(r.student, r.score) for r in again] == [("solution", results["solution"].score)]
    assert list(elsewhere.iterdir()) == [], "grading wrote into the current folder (a stray gradebook?)"


@pytest.mark.parametrize("lab", lab_names())
def test_committed_release_is_what_nbgrader_generates(lab, tmp_path):
    released = course.release([lab], release_dir=tmp_path / "release", root=tmp_path / "course")
    assert released
    for fresh in (tmp_path / "release" / lab).rglob("*"):
        if fresh.is_file():
            committed = LABS / lab / fresh.relative_to(tmp_path / "release" / lab)
            assert committed.exists(), f"{committed} missing: run `mlsys course release`"
            assert committed.read_bytes() == fresh.read_bytes(), f"{committed} is stale: run `mlsys course release`"
    for path in LABS.rglob("*.ipynb"):
        text = path.read_text()
        for marker in course.SECRET_MARKERS:
            assert marker not in text, f"{path} contains {marker}"


@pytest.mark.parametrize("lab", lab_names())
def test_check_solutions_pass_and_releases_fail(lab, course_root):
    results = course.check([lab], root=course_root)
    assert len(results) == 2
    assert all(r.ok for r in results), [(str(r.notebook), r.detail) for r in results]


def test_student_bundle_holds_no_secret(tmp_path):
    out = bundle(tmp_path / "kit.zip")
    with zipfile.ZipFile(out) as archive:
        names = archive.namelist()
    assert "mlsys-course/environment.yml" in names and "mlsys-course/README.md" in names
    assert any(n.startswith("mlsys-course/mlsys_lib-") and n.endswith(".whl") for n in names)
    for lab in lab_names():
        assert f"mlsys-course/labs/{lab}/{lab}.ipynb" in names
    assert audit(out) == []


def test_bundle_audit_catches_secrets(tmp_path):
    planted = tmp_path / "planted.zip"
    with zipfile.ZipFile(planted, "w") as archive:
        archive.writestr("mlsys-course/labs/x.ipynb", "### BEGIN HIDDEN TESTS\nassert True\n")
        archive.writestr("mlsys-course/solutions/lab.ipynb", "{}")
    problems = audit(planted)
    assert any("HIDDEN TESTS" in p for p in problems) and any("instructor-only" in p for p in problems)

"""The whole nbgrader path of a lab: release, check, collect, autograde, feedback, grades.

Slow: every graded submission runs a real Jupyter kernel through nbgrader, so each lab grades its
solution, its blank and the first WRONG of its wrong-answer fixtures here, and holds the forked checker
(which ``make course`` and test_fixtures.py run on all of them) to nbgrader's verdict on those;
``make check-all`` grades all of them through nbgrader. What students do
to the grader (copied cells, other kernels, broken files, attacks) is in test_adversarial.py.

Lab 1 is graded through the course tool by three other files already, so not again here:
test_grading_batch.py (its solution full, its blank 0, two wrong answers losing exactly their tests,
grades.csv, a re-run), test_adversarial.py (honest students and the blank among attacks, no hidden
test in any feedback) and test_feedback_safety.py. Its release is checked through
``mlsys course release``; the other labs' through the release the course tool graded them against.
"""

import csv
from pathlib import Path

import nbformat
import pytest

from autograder import course
from autograder.authoring import samples
from autograder.cells import SECRET_MARKERS, fill, solution_cells
from autograder.edition.release_guard import committed_version, in_git
from autograder.paths import LABS, lab_names
from feedback_check import hidden_lines, leaked_lines

pytestmark = pytest.mark.slow

#: Wrong-answer fixtures per lab graded through nbgrader here.
WRONG = 1
#: The lab other test files grade through the course tool (see the module's docstring).
GRADED_ELSEWHERE = "lab01_tensors"
#: What the course tool writes beside a release it grades against (course.prepare_gradebook).
RELEASE_STAMP = "source.sha256"


@pytest.fixture(scope="module", params=[lab for lab in lab_names() if lab != GRADED_ELSEWHERE])
def graded(request, course_root, tmp_path_factory):
    lab = request.param
    folder = tmp_path_factory.mktemp(f"submissions_{lab}")
    expected = samples.build_samples(lab, folder, wrong=WRONG)
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
    assert len(wrongs) == WRONG
    for student, wrong in wrongs.items():
        result = results[student]
        lost = {name for name, (score, maximum) in result.exercises.items() if score < maximum}
        assert lost == set(wrong.loses), f"{student} ({wrong.description}) lost {sorted(lost)}"
        assert result.score < result.max_score


def test_forked_checker_gives_nbgraders_verdict(graded):
    """`make course` grades only each lab's solution and blank through nbgrader and checks the wrong
    answers by forking from the solution notebook (samples.check_wrong_answers): on the fixtures graded
    here, the fork must fail exactly the test cells nbgrader charged."""
    lab, results, expected, _ = graded
    students = {wrong.name: student for student, wrong in expected.items() if wrong is not None}
    checks = samples.check_wrong_answers(lab, names=set(students))
    assert sorted(check.wrong.name for check in checks) == sorted(students)
    for check in checks:
        result = results[students[check.wrong.name]]
        charged = {name for name, (score, maximum) in result.exercises.items() if score < maximum}
        assert check.problem is None and check.lost == charged, \
            f"{check.wrong.name}: forked lost {check.problem or sorted(check.lost)}, nbgrader {sorted(charged)}"


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
    assert hidden_lines(lab), "the lab has hidden tests"
    for student, result in results.items():
        if result.status == "graded":
            page = (root / "feedback" / student / lab / f"{lab}.html").read_text()
            assert not leaked_lines(page, lab), f"feedback of {student} shows hidden tests"


def test_regrading_is_idempotent_and_leaves_no_stray_files(graded, tmp_path, monkeypatch):
    lab, results, _, root = graded
    submissions, elsewhere = tmp_path / "submissions", tmp_path / "cwd"
    (submissions / "solution").mkdir(parents=True)
    elsewhere.mkdir()
    solved = fill(nbformat.read(LABS / lab / f"{lab}.ipynb", as_version=4), solution_cells(lab))
    nbformat.write(solved, submissions / "solution" / f"{lab}.ipynb")
    monkeypatch.chdir(elsewhere)
    again = course.grade(lab, submissions, root=root, log=lambda message: None)
    assert [(r.student, r.score) for r in again] == [("solution", results["solution"].score)]
    assert list(elsewhere.iterdir()) == [], "grading wrote into the current folder (a stray gradebook?)"


def assert_committed(release: Path, lab: str) -> None:
    """Every file of ``lab`` that nbgrader generated into ``release`` is the committed one in labs/:
    git's committed version (a tarball: the file itself), so a student's edits in labs/ do not fail
    it, and a release not regenerated or not committed does."""
    generated = [path for path in release.rglob("*") if path.is_file() and path.name != RELEASE_STAMP]
    assert any(path.suffix == ".ipynb" for path in generated), f"nothing released into {release}"
    under_git = in_git(LABS)
    for fresh in generated:
        path = LABS / lab / fresh.relative_to(release)
        committed = committed_version(path) if under_git else path.read_bytes() if path.exists() else None
        assert committed is not None, f"{path} is not committed: run `mlsys course release` and commit labs/"
        assert committed == fresh.read_bytes(), f"{path} is stale: run `mlsys course release` and commit labs/"


def test_committed_release_is_what_nbgrader_generates(graded):
    """The release the course tool generated to grade the lab against (nbgrader's generate_assignment)."""
    lab, _, _, root = graded
    assert_committed(root / "release" / lab, lab)


def test_release_command_writes_the_committed_release_without_secrets(tmp_path):
    released = course.release([GRADED_ELSEWHERE], release_dir=tmp_path / "release", root=tmp_path / "course")
    assert released == [tmp_path / "release" / GRADED_ELSEWHERE / f"{GRADED_ELSEWHERE}.ipynb"]
    assert_committed(tmp_path / "release" / GRADED_ELSEWHERE, GRADED_ELSEWHERE)
    for path in LABS.rglob("*.ipynb"):
        text = path.read_text()
        for marker in SECRET_MARKERS:
            assert marker not in text, f"{path} contains {marker}"


def test_check_solutions_pass_and_releases_fail(course_root):
    # `mlsys course check` on one lab: every lab's solution and blank are graded above already.
    results = course.check(["lab04_memory"], root=course_root)
    assert len(results) == 2
    assert all(r.ok for r in results), [(str(r.notebook), r.detail) for r in results]

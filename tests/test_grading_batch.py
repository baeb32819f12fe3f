"""Grading a class: killed midway, re-run, nothing lost and nothing graded twice. Plus the report."""

import copy
import csv
import json
import os
import signal
import subprocess
import sys

import nbformat
import pytest

from autograder.authoring import samples
from autograder.paths import REPO
from autograder.report.report import StudentResult, exercise_summary
from autograder.run.batch import chunks

LAB = "lab01_tensors"


def _grade(subs, root, *extra):
    """`mlsys course grade` verbose: each student's progress line, as it is graded."""
    return subprocess.Popen([sys.executable, "-m", "mlsys_lib.cli", "course", "grade", LAB, str(subs),
                             "--course-dir", str(root), "-v", *extra], cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)


@pytest.mark.slow
def test_killed_grader_loses_nothing_and_rerun_is_idempotent(tmp_path):
    subs, root = tmp_path / "subs", tmp_path / "course"
    expected = samples.build_samples(LAB, subs)
    keep = ["solution", "blank", "wrong_strides_reversed", "wrong_edge_tiles_dropped"]
    for student in set(expected) - set(keep):
        for path in (subs / student).iterdir():
            path.unlink()
        (subs / student).rmdir()

    first = _grade(subs, root, "--workers", "1", "--chunk-size", "1")
    for line in first.stdout:
        if "[1/4]" in line:
            os.killpg(first.pid, signal.SIGKILL)  # the grader and its workers and kernels, mid-batch
            break
    first.wait(timeout=60)
    graded_before = json.loads((root / "graded.json").read_text())[LAB]
    assert len(graded_before) == 1

    second = _grade(subs, root)
    output = second.communicate(timeout=600)[0]
    assert second.returncode == 0, output
    assert "1 submission(s) unchanged since last graded: skipped" in output
    assert "[3/3]" in output and "|####################| [3/3]" in output

    third = _grade(subs, root)
    output = third.communicate(timeout=600)[0]
    assert "4 submission(s) unchanged since last graded: skipped" in output

    with open(root / "grades.csv") as handle:
        rows = {r["student_id"]: r for r in csv.DictReader(handle) if r["lab"] == LAB}
    assert sorted(rows) == sorted(keep)
    assert all(row["status"] == "graded" for row in rows.values()), rows
    assert float(rows["solution"]["score"]) == float(rows["solution"]["max_score"]) > 0
    assert float(rows["blank"]["score"]) == 0
    with open(root / "exercises.csv") as handle:
        lost = {(r["student_id"], r["test"]) for r in csv.DictReader(handle)
                if r["lab"] == LAB and float(r["score"]) < float(r["max_score"])}
    for student in keep[2:]:  # through real nbgrader, in a re-run: exactly the tests the mistake costs
        assert {test for name, test in lost if name == student} == set(expected[student].loses), student
        assert 0 < float(rows[student]["score"]) < float(rows[student]["max_score"]), rows[student]
    assert not (root / "work").exists()
    summary = (root / f"summary_{LAB}.md").read_text()
    assert "4 students" in summary and (root / f"scores_{LAB}.png").stat().st_size > 5_000


def test_one_grading_pool_serves_batch_after_batch_and_is_left_open(tmp_path):
    """`mlsys course all` grades lab after lab with one grading process (its imports paid once): a
    batch given a pool grades with it, as it would with its own, and leaves it open for the next."""
    from autograder import course
    from autograder.run.batch import grading_pool

    subs = tmp_path / "subs"
    samples.build_samples(LAB, subs, wrong=0)
    with grading_pool(1) as pool:
        for run in range(2):
            results = {r.student: r for r in course.grade(LAB, subs, root=tmp_path / "course", pool=pool,
                                                          force=True, log=lambda message: None)}
            assert {s: r.status for s, r in results.items()} == {"solution": "graded", "blank": "graded"}, run
            assert results["solution"].score == results["solution"].max_score > 0 and results["blank"].score == 0
            assert pool.submit(abs, -run).result(timeout=30) == run, "the batch shut the pool it was lent"


def test_a_niced_grading_pool_grades_at_lower_priority():
    """`mlsys course all` lends its batches a pool at nice 5 (the lectures' timed claims go first)."""
    from autograder.run.batch import grading_pool

    with grading_pool(1, niceness=5) as pool:
        assert pool.submit(os.nice, 0).result(timeout=60) == os.nice(0) + 5
    with grading_pool(1) as pool:
        assert pool.submit(os.nice, 0).result(timeout=60) == os.nice(0)


def test_exercise_summary_orders_by_failure_rate():
    results = [
        StudentResult("a", LAB, 3, 3, exercises={"t1": (1, 1), "t2": (2, 2)}),
        StudentResult("b", LAB, 1, 3, exercises={"t1": (1, 1), "t2": (0, 2)}),
        StudentResult("c", LAB, 0, 3, exercises={"t1": (0, 1), "t2": (0, 2)}),
    ]
    rows = exercise_summary(results)
    assert [r[0] for r in rows] == ["t2", "t1"]
    name, mean, top, failing = rows[0]
    assert (mean, top) == (2 / 3, 2) and failing == pytest.approx(2 / 3)
    assert rows[1][3] == pytest.approx(1 / 3)


@pytest.mark.parametrize("students, workers, most", [(40, 2, 8), (7, 2, 8), (1, 4, 8), (0, 2, 8), (9, 3, 1), (17, 1, 5)])
def test_chunks_cover_everyone_in_order_and_shrink_toward_the_end(students, workers, most):
    names = [f"s{i:02d}" for i in range(students)]
    parts = chunks(names, workers, most)
    assert [name for part in parts for name in part] == names
    assert all(0 < len(part) <= most for part in parts)
    sizes = [len(part) for part in parts]
    assert sizes == sorted(sizes, reverse=True), sizes
    assert not parts or sizes[-1] <= 2, "a big last chunk leaves the other workers idle"
    if students >= 2 * workers * most >= 4 * workers:  # a big class: start-up paid rarely
        assert sizes[0] == most and len(parts) <= students / 2


def test_gradebook_is_prepared_again_only_when_the_lab_source_changed(tmp_path, monkeypatch):
    from autograder import course

    course.prepare_gradebook(LAB, tmp_path)
    calls = []
    real = course.run_converter
    monkeypatch.setattr(course, "run_converter", lambda *a, **k: calls.append(a) or real(*a, **k))
    course.prepare_gradebook(LAB, tmp_path)
    assert calls == [], "an up-to-date gradebook was generated again"
    monkeypatch.setattr(course, "source_fingerprint", lambda lab: "edited")
    course.prepare_gradebook(LAB, tmp_path)
    assert len(calls) == 1, "a changed lab source must be recorded in the gradebook again"
    assert (tmp_path / "release" / LAB / "source.sha256").read_text() == "edited"


def test_a_new_course_gradebook_is_made_without_the_alembic_subprocess(tmp_path, monkeypatch):
    """nbgrader's generate_assignment makes a missing gradebook by asking `alembic heads` in a subprocess
    (about 4 s a lab in `make course`); the course makes it first, in this process, stamped the same."""
    import nbgrader.api
    from sqlalchemy import text

    from autograder import course
    from autograder.config import gradebook_url
    from autograder.run.merge import alembic_head, open_gradebook

    def no_subprocess():
        raise AssertionError("nbgrader ran its `alembic heads` subprocess")

    monkeypatch.setattr(nbgrader.api, "get_alembic_version", no_subprocess)
    course.prepare_gradebook(LAB, tmp_path)
    with open_gradebook(gradebook_url(tmp_path)) as gradebook:
        assert gradebook.find_assignment(LAB).max_score > 0
        stamped = gradebook.db.execute(text("SELECT version_num FROM alembic_version")).scalar()
    assert stamped == alembic_head()


@pytest.fixture(scope="module")
def small_limits(tmp_path_factory):
    """A course root with the lab's gradebook and the template of its workers' private roots (``template``),
    its sandbox settings with small limits, and the solution."""
    from autograder import course
    from autograder.config import load_config, sandbox_settings
    from autograder.edition.edition import build_edition
    from autograder.run.batch import make_template

    tmp = tmp_path_factory.mktemp("limits")
    course.prepare_gradebook(LAB, tmp / "course")
    make_template(tmp / "course", LAB, tmp / "template")
    settings = sandbox_settings(load_config(tmp / "course"), LAB, build_edition(LAB, tmp / "course" / "editions" / LAB))
    samples.build_samples(LAB, tmp / "samples", wrong=0)
    solved = nbformat.read(tmp / "samples" / "solution" / f"{LAB}.ipynb", as_version=4)
    return tmp, settings, solved


def _submit(solved, cells: list[str], path):
    """The solution with ``cells`` (code) put first."""
    notebook = copy.deepcopy(solved)
    notebook.cells[:0] = [nbformat.v4.new_code_cell(source) for source in cells]
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(notebook, path)
    return path


@pytest.mark.slow
def test_a_kernel_stopped_by_the_cpu_limit_is_graded_once_as_far_as_it_got(small_limits):
    from autograder.run.batch import grade_chunk

    tmp, settings, solved = small_limits
    notebook = _submit(solved, ["while True:\n    pass"], tmp / "cpu" / f"{LAB}.ipynb")
    work = tmp / "course" / "work" / "cpu"
    (outcome,) = grade_chunk(LAB, {"spinner": notebook}, tmp / "template", work, {**settings, "cpu_seconds": 4})
    assert outcome.problem is None, outcome.problem
    assert outcome.work == work and not (work / "alone").exists(), "a kernel stopped by a limit was graded again"
    assert any("stopped by the notebook's CPU-time limit (4 s)" in flag for flag in outcome.flags), outcome.flags
    assert not any("was skipped" in flag for flag in outcome.flags), outcome.flags
    graded = nbformat.read(work / "autograded" / "spinner" / LAB / f"{LAB}.ipynb", as_version=4)
    errors = [o.get("ename") for cell in graded.cells if cell.cell_type == "code" for o in cell.outputs
              if o.get("output_type") == "error"]
    assert errors[0] == "LimitExceeded" and set(errors[1:]) == {"NotebookTimeout"}, errors[:3]


@pytest.mark.slow
def test_cells_that_kill_the_kernel_are_retried_within_one_wall_clock_budget(small_limits):
    """Four killer cells, each after 3 s of sleep: skipping them one by one would take four runs
    and over 30 s; all the runs together get the notebook's 15 s."""
    from autograder.run.batch import grade_chunk
    from autograder.run.execute import spent_seconds

    tmp, settings, solved = small_limits
    cells = ["import time\ntime.sleep(3)", "import os\nos._exit(1)"] * 4
    notebook = _submit(solved, cells, tmp / "killer" / f"{LAB}.ipynb")
    work = tmp / "course" / "work" / "killer"
    (outcome,) = grade_chunk(LAB, {"killer": notebook}, tmp / "template", work, {**settings, "wall_seconds": 15})
    said = " ".join([outcome.problem or "", *outcome.flags])
    skipped = [flag for flag in outcome.flags if "stopped the kernel and was skipped" in flag]
    assert 1 <= len(skipped) <= 2, f"retried {len(skipped)} times: {said}"
    assert "all of its 15 s" in said, said
    spent = spent_seconds(work / "notes", "killer") + spent_seconds(work / "alone" / "killer" / "notes", "killer")
    assert spent < 15 + 5, f"the student's grading runs took {spent:.1f} s together; the budget is 15 s"


def test_a_private_gradebook_is_stamped_with_the_revision_nbgrader_stamps(monkeypatch):
    """The batch's private gradebooks are made without nbgrader's `alembic heads` subprocess (seconds a
    batch); the revision read in-process must be the one that subprocess prints."""
    from pathlib import Path

    import nbgrader.api

    from autograder.run.merge import alembic_head

    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}:{os.environ['PATH']}")  # where `alembic` is
    assert alembic_head() == nbgrader.api.get_alembic_version()


def test_files_back_from_a_dask_worker_stay_in_the_chunks_folder(tmp_path):
    """What a grading worker sends back is written on the grading host: a student not of the chunk, or a
    file name leading out of the folder, is refused and nothing is written outside."""
    from autograder.run.cluster import _unpack

    packed = {"student": "ada", "problem": None, "flags": [], "worker": "w1",
              "files": {"gradebook.db": (b"x", 0.0)}}
    with pytest.raises(ValueError, match="not a student of its chunk"):
        _unpack({**packed, "student": "../../escaped"}, tmp_path / "work", {"ada"})
    with pytest.raises(ValueError, match="refused a file named '../escaped'"):
        _unpack({**packed, "files": {"../escaped": (b"x", 0.0)}}, tmp_path / "work", {"ada"})
    assert not (tmp_path / "escaped").exists() and not (tmp_path / "work" / "escaped").exists()
    outcome = _unpack(packed, tmp_path / "work", {"ada"})
    assert (outcome.work / "gradebook.db").read_bytes() == b"x"
    assert outcome.work.is_relative_to(tmp_path / "work")

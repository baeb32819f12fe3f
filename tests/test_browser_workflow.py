"""The student's and the instructor's workflow, clicked through in a real browser.

One JupyterLab server of the course's environment (the settings ``make`` installs into the venv,
here installed into a scratch prefix) runs in a scratch folder laid out like the repository root an
instructor starts it from: the course folder ``.course`` with two collected Lab 4 submissions (the
solution and the untouched release), and a student's work copy of Lab 1 in ``work/``. Chromium,
driven by Playwright:

- the student opens Lab 1, writes the first exercise, runs it and its visible test, clicks *Validate*;
- the instructor opens *Nbgrader → Formgrader*, autogrades both submissions, generates feedback,
  opens the solution's manual-grading page, then the feedback pages (from disk, as students do).

Every request that would leave the machine is refused and recorded. A failed step saves a
screenshot, whose path its message gives.
"""

from __future__ import annotations

import os
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import nbformat
import pytest
from nbgrader.api import Gradebook

from autograder import course
from autograder.authoring import samples
from autograder.cells import grade_cells, solution_cells
from autograder.config import install_into_environment
from autograder.paths import LABS, REPO, SOLUTIONS
from autograder.run.batch import collect, graded_in_place
import browser
from browser import (REQUIRE_ENV, JupyterLab, Screens, browser_or_skip, close_formgrader_modal, is_local,
                     launch_chromium, refuse_remote)
from feedback_check import leaked_lines

STUDENT_LAB = "lab01_tensors"
GRADED_LAB = "lab04_memory"
STUDENTS = ("solution", "blank")
#: The course folder's name, as in the repository (hidden: Formgrader's pages work all the same).
COURSE = ".course"
#: Longest wait for one step that runs notebooks (seconds): a kernel start, a Validate, an autograde.
RUN_TIMEOUT_S = 180
#: Whether a page has loaded MathJax (2, which the pages of nbconvert's templates load).
MATHJAX_LOADED = "() => typeof window.MathJax !== 'undefined' && typeof window.MathJax.Hub !== 'undefined'"
#: JupyterLab's settings: no prompt about Jupyter news over the page.
LAB_SETTINGS = {"@jupyterlab/apputils-extension/notification.jupyterlab-settings": '{"fetchNews": "false"}'}


def _nbgrader(cell) -> dict:
    return cell.get("metadata", {}).get("nbgrader", {})


def _graded_points(lab: str) -> dict[str, float]:
    """grade_id -> points of every graded test cell of ``lab``'s source notebook."""
    nb = nbformat.read(SOLUTIONS / lab / f"{lab}.ipynb", as_version=4)
    return {_nbgrader(c)["grade_id"]: float(_nbgrader(c)["points"]) for c in nb.cells if _nbgrader(c).get("grade")}


def _expected_scores() -> tuple[dict[str, float], float]:
    """Each student's score and the most points: the solution earns every point of the source, the
    untouched release none."""
    total = sum(_graded_points(GRADED_LAB).values())
    return {"solution": total, "blank": 0.0}, total


@dataclass
class Site:
    """The served folder: the course, the student's work copy, the server, where screenshots go."""

    server: JupyterLab
    home: Path              # the server's root (and working) folder
    course: Path
    notebook: Path          # the student's work copy of the lab
    screens: Screens


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    browser_or_skip()
    tmp = tmp_path_factory.mktemp("browser")
    prefix, home = tmp / "venv-jupyter", tmp / "home"
    install_into_environment(prefix)  # what `make` installs into the venv
    course_root = home / COURSE
    course_root.mkdir(parents=True)
    work = home / "work" / STUDENT_LAB
    shutil.copytree(LABS / STUDENT_LAB, work)
    settings = tmp / "lab-settings"
    for name, text in LAB_SETTINGS.items():
        (settings / name).parent.mkdir(parents=True, exist_ok=True)
        (settings / name).write_text(text)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MLSYS_", "JUPYTER"))}
    env.update(MLSYS_COURSE_DIR=str(course_root), JUPYTER_CONFIG_PATH=str(prefix / "etc" / "jupyter"),
               JUPYTER_PATH=str(prefix / "share" / "jupyter"), PYTHONPATH=str(REPO),
               JUPYTERLAB_SETTINGS_DIR=str(settings), JUPYTERLAB_WORKSPACES_DIR=str(tmp / "lab-workspaces"))
    with JupyterLab(home, home, env, tmp / "jupyterlab.log") as server:
        # while the server starts: the lab in the gradebook, two collected submissions
        course.prepare_gradebook(GRADED_LAB, course_root)
        samples.build_samples(GRADED_LAB, tmp / "samples", wrong=0)
        for student in STUDENTS:
            collect(GRADED_LAB, student, tmp / "samples" / student / f"{GRADED_LAB}.ipynb", course_root)
        server.wait_ready()
        yield Site(server, home, course_root, work / f"{STUDENT_LAB}.ipynb", Screens(tmp / "screens"))


@pytest.fixture(scope="module")
def chromium():
    playwright = browser_or_skip()
    with playwright.sync_playwright() as driver:
        instance = launch_chromium(driver)
        try:
            yield instance
        finally:
            instance.close()


def _context(chromium):
    """A fresh browser profile whose requests off this machine are refused and recorded."""
    context = chromium.new_context(viewport={"width": 1400, "height": 900})
    context.set_default_timeout(30_000)
    remote: list[str] = []
    refuse_remote(context, remote)
    return context, remote


def test_a_missing_browser_is_skipped_or_fails_where_required(monkeypatch, tmp_path):
    monkeypatch.setattr(browser, "CHROMIUM", tmp_path / "chromium")
    monkeypatch.delenv(REQUIRE_ENV, raising=False)
    with pytest.raises(pytest.skip.Exception, match="chromium is missing"):
        browser_or_skip()
    monkeypatch.setenv(REQUIRE_ENV, "1")
    with pytest.raises(pytest.fail.Exception, match="chromium is missing.*required here"):
        browser_or_skip()


def test_only_this_machine_is_local():
    assert all(map(is_local, ["http://127.0.0.1:8888/lab", "http://localhost/x", "data:image/png;base64,AA",
                              "blob:http://127.0.0.1/1", "about:blank"]))
    assert not any(map(is_local, ["https://cdnjs.cloudflare.com/ajax/libs/mathjax/2.7.7/latest.js",
                                  "http://127.0.0.1.evil.example/", "ws://10.0.0.1/api",
                                  "http://localhost@evil.example/"]))


# --- The student ----------------------------------------------------------------------------------

@dataclass
class StudentRun:
    answer: str                          # grade_id of the answer cell written
    test: str                            # grade_id of its visible test
    test_output: str                     # what the visible test cell shows
    errors_shown: int                    # error and stderr outputs shown by the answer and test cells
    dialog_title: str
    failed_sources: list[str]            # the cells the Validate dialog says failed
    saved: nbformat.NotebookNode         # the notebook as Validate saved it
    remote: list[str] = field(default_factory=list)


def _run_cell(page, cell, source: str | None = None) -> None:
    """Click into a code cell's editor, replace its source by ``source`` if given, run it (Shift+Enter)
    and wait until it has run (its prompt shows an execution count; one at a time, as a cell that
    fails cancels those queued after it)."""
    cell.locator(".cm-content").click()
    if source is not None:
        page.keyboard.press("Control+a")
        page.keyboard.insert_text(source)  # as pasted: no auto-indent, no closing brackets added
    page.keyboard.press("Shift+Enter")
    prompt = cell.locator(".jp-InputPrompt")
    browser_or_skip().expect(prompt).to_have_text(re.compile(r"\[\d+\]"), timeout=RUN_TIMEOUT_S * 1000)


@pytest.fixture(scope="module")
def student(site, chromium):
    release = nbformat.read(site.notebook, as_version=4)
    answer_index = next(i for i, c in enumerate(release.cells) if _nbgrader(c).get("solution"))
    test_index = next(i for i, c in enumerate(release.cells) if i > answer_index and _nbgrader(c).get("grade"))
    setup = [i for i, c in enumerate(release.cells[:answer_index]) if c.cell_type == "code"]
    answer, test = _nbgrader(release.cells[answer_index])["grade_id"], _nbgrader(release.cells[test_index])["grade_id"]
    context, remote = _context(chromium)
    page = context.new_page()
    screens = site.screens
    try:
        with screens.step("student-open", page):
            page.goto(site.server.login_url(f"/lab/tree/{site.notebook.relative_to(site.home)}"))
            cells = page.locator(".jp-NotebookPanel .jp-Notebook-cell")
            cells.nth(test_index).wait_for()
            # the status bar names the notebook's kernel once it runs (a cell run before would ask for one)
            kernel = f"{release.metadata.kernelspec.display_name} | Idle"
            page.locator(".jp-StatusBar-TextItem", has_text=kernel).wait_for(timeout=RUN_TIMEOUT_S * 1000)
        with screens.step("student-run", page):
            for index in setup:
                _run_cell(page, cells.nth(index))
            _run_cell(page, cells.nth(answer_index), solution_cells(STUDENT_LAB)[answer])
            _run_cell(page, cells.nth(test_index))
            test_output = cells.nth(test_index).locator(".jp-OutputArea").inner_text()
            stderr = '.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stderr"]'  # errors too
            errors = sum(cells.nth(i).locator(stderr).count() for i in (answer_index, test_index))
        with screens.step("student-validate", page):
            page.locator(".jp-NotebookPanel-toolbar .validate-button").click()
            dialog = page.locator(".jp-Dialog").filter(has=page.locator("#validation-message"))
            dialog.wait_for(timeout=RUN_TIMEOUT_S * 1000)
            title = dialog.locator(".jp-Dialog-header").inner_text()
            # the dialog lists each failed cell as its source, then its error
            blocks = dialog.locator("#validation-message > div.jp-RenderedText pre").all_inner_texts()
            dialog.locator(".jp-mod-accept").click()
        return StudentRun(answer, test, test_output.strip(), errors, title.strip(), blocks[::2],
                          nbformat.read(site.notebook, as_version=4), remote)
    finally:
        context.close()


@pytest.mark.slow
def test_student_answer_and_its_visible_test_run_without_error(student):
    assert student.errors_shown == 0
    assert student.test_output == "visible tests passed"
    cells = {_nbgrader(c).get("grade_id"): c for c in student.saved.cells}
    written = cells[student.answer].source
    assert written.strip() == solution_cells(STUDENT_LAB)[student.answer].strip(), "typed as given"
    outputs = cells[student.test].outputs
    assert [o.get("text") for o in outputs] == ["visible tests passed\n"], outputs


@pytest.mark.slow
def test_validate_names_the_unanswered_exercises_tests_and_not_the_answered_one(student):
    """The dialog lists every visible test of the exercises left blank, and only those (hidden-test
    cells are empty in the release, so they pass)."""
    sources = {c.source.strip(): _nbgrader(c)["grade_id"] for c in student.saved.cells if _nbgrader(c).get("grade")}
    failed = {sources.get(text.strip(), f"unknown cell: {text[:60]!r}") for text in student.failed_sources}
    visible = {gid for gid, source in grade_cells(STUDENT_LAB).items() if "BEGIN HIDDEN TESTS" not in source}
    assert student.dialog_title == "Validation Results"
    assert student.test in visible and failed == visible - {student.test}


@pytest.mark.slow
def test_student_pages_load_nothing_from_outside(student):
    assert student.remote == []


# --- The instructor -------------------------------------------------------------------------------

@dataclass
class InstructorRun:
    rows: dict[str, tuple[str, str]]                 # student -> (status, score) on Manage Submissions
    graded_student: str                              # whose notebook the manual-grading page shows
    cell_scores: dict[str, str]                      # grade_id -> score shown on the solution's grading page
    printed: list[str]                               # the standard output its cells show
    grading_errors: int                              # error and stderr outputs it shows
    feedback: dict[str, str] = field(default_factory=dict)  # student -> feedback page (rendered HTML)
    mathjax: dict[str, bool] = field(default_factory=dict)  # page -> whether MathJax loaded there
    remote: list[str] = field(default_factory=list)


def _student_row(frame, student: str):
    """The row of ``student`` on Formgrader's Manage Submissions page."""
    return frame.locator("tbody tr").filter(has=frame.locator(".student-id", has_text=re.compile(f"^{student}$")))


@pytest.fixture(scope="module")
def instructor(site, chromium):
    context, remote = _context(chromium)
    page = context.new_page()
    screens = site.screens
    try:
        with screens.step("formgrader-open", page):
            page.goto(site.server.login_url("/lab/workspaces/instructor"))
            page.get_by_role("menuitem", name="Nbgrader").click()
            page.get_by_role("menuitem", name="Formgrader").click()
            frame = page.frame_locator('iframe[src*="formgrader"]')
            frame.get_by_role("row", name=GRADED_LAB).locator(".num-submissions a").click()
        rows = {}
        for student in STUDENTS:
            with screens.step(f"autograde-{student}", page):
                row = _student_row(frame, student)
                row.locator(".autograde a").click()
                close_formgrader_modal(frame, f"autograde {student}", RUN_TIMEOUT_S)
                row.locator(".status", has_text=re.compile("^graded$")).wait_for()
                rows[student] = (row.locator(".status").inner_text(), row.locator(".score").inner_text())
        with screens.step("generate-feedback", page):
            frame.locator(".breadcrumb").get_by_role("link", name="Assignments").click()
            assignment = frame.get_by_role("row", name=GRADED_LAB)
            assignment.locator(".generate-feedback a").click()
            close_formgrader_modal(frame, "generate feedback", RUN_TIMEOUT_S)
            assignment.locator(".num-submissions a").click()
        with screens.step("manual-grading", page):
            _student_row(frame, "solution").locator(".student-name a").click()
            frame.locator("tbody").get_by_role("link", name=GRADED_LAB).click()
            # each test's autograded score shows as its input's placeholder, filled in from the gradebook API
            scores = frame.locator("input.score")
            browser_or_skip().expect(scores.last).to_have_attribute("placeholder", re.compile("."))
            cell_scores = dict(scores.evaluate_all("inputs => inputs.map(i => [i.id, i.placeholder])"))
            graded_student = frame.locator(".live-notebook a.name-shown").text_content().strip()
            notebook = frame.locator("#notebook").first  # (the template nests two)
            printed = notebook.locator(".output_stdout").all_inner_texts()
            grading_errors = notebook.locator(".output_error, .output_stderr").count()
            grading_page = next(f for f in page.frames if "/formgrader/submissions/" in f.url)
            mathjax = {"manual grading": grading_page.evaluate(MATHJAX_LOADED)}
        run = InstructorRun(rows, graded_student, cell_scores, printed, grading_errors, mathjax=mathjax, remote=remote)
        for student in STUDENTS:
            with screens.step(f"feedback-{student}", page):
                # opened from disk, as the student who receives it does (served by Jupyter, a page is
                # sandboxed: it could load no MathJax from the server)
                page.goto((site.course / "feedback" / student / GRADED_LAB / f"{GRADED_LAB}.html").as_uri())
                run.feedback[student] = page.content()
                run.mathjax[f"feedback of {student}"] = page.evaluate(MATHJAX_LOADED)
        return run
    finally:
        context.close()


@pytest.mark.slow
def test_formgrader_autogrades_each_submission_and_shows_its_score(instructor, site):
    expected, total = _expected_scores()
    with Gradebook(f"sqlite:///{site.course / 'gradebook.db'}") as gradebook:
        recorded = {s: gradebook.find_submission(GRADED_LAB, s).score for s in STUDENTS}
    assert recorded == expected
    assert instructor.rows == {s: ("graded", f"{expected[s]:g} / {total:g}") for s in STUDENTS}


@pytest.mark.slow
def test_manual_grading_page_shows_the_autograded_notebook_and_each_tests_score(instructor):
    assert instructor.graded_student == "solution"
    assert instructor.cell_scores == {gid: f"{points:g}" for gid, points in _graded_points(GRADED_LAB).items()}
    passed = [line for text in instructor.printed for line in text.splitlines()
              if line.startswith("visible tests passed")]
    assert len(passed) == sum("BEGIN HIDDEN TESTS" not in s for s in grade_cells(GRADED_LAB).values())
    assert instructor.grading_errors == 0, "a correct solution's graded copy shows no error or stderr"


@pytest.mark.slow
def test_feedback_pages_show_the_score_and_no_hidden_test(instructor, site):
    assert set(instructor.feedback) == set(STUDENTS)
    expected, total = _expected_scores()
    for student, page in instructor.feedback.items():
        scores = re.findall(r"\(Score: ([\d.]+) / ([\d.]+)\)", page)  # the notebook's first, then each test's
        assert scores and tuple(map(float, scores[0])) == (expected[student], total), student
        assert leaked_lines(page, GRADED_LAB) == [], student
    assert graded_in_place(site.course, GRADED_LAB, set(STUDENTS)) == set(STUDENTS)


@pytest.mark.slow
def test_instructor_pages_render_math_with_nothing_from_outside(instructor):
    assert instructor.remote == []
    assert instructor.mathjax == dict.fromkeys(instructor.mathjax, True)

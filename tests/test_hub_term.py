"""A whole term of Lab 1 on the course's JupyterHub (``deploy/jupyterhub``, what ``make hub`` runs), in a browser.

Fresh Unix accounts (an instructor, a TA, two students) log in with their passwords (PAM). Chromium,
driven by Playwright:

- the instructor opens Formgrader (the hub service ``mlsys``), generates and releases Lab 1;
- each student fetches it from the Assignments tab, answers (the first student every exercise, from
  the solution notebook; the second the first exercise, typed), validates and submits; the instructor
  sets the deadline between the two submissions, so the second is late;
- the TA collects, autogrades (on the sandboxed grading kernel), overrides one test's score by hand,
  generates and releases feedback;
- each student fetches feedback and finds only their own: their own score of every test (the TA's
  override in the first's, the late penalty in the second's);
- a student who opens Formgrader gets 403.

Then, as the students' Unix accounts: no course folder, gradebook or other home opens. The hub runs
on free ports of 127.0.0.1 and everything it started ends (or the test fails naming it); the
accounts are removed, pass or fail.
"""

from __future__ import annotations

import datetime
import re
import subprocess
import time

import nbformat
import pytest
from nbgrader.api import Gradebook

from autograder.cells import solution_cells
from browser import Screens, browser_or_skip, close_formgrader_modal, launch_chromium, refuse_remote
from deploy.jupyterhub import provision
from hub import CourseHub, hub_or_skip

LAB = "lab01_tensors"
#: Longest wait for a step that runs notebooks or starts a server (seconds).
STEP_TIMEOUT_S = 150
#: The test score the TA sets by hand (out of its 2 points).
OVERRIDE = ("test_permute_hidden", 1.0)


def _nbgrader(cell) -> dict:
    return cell.get("metadata", {}).get("nbgrader", {})


def _points() -> dict[str, float]:
    from autograder.paths import SOLUTIONS
    nb = nbformat.read(SOLUTIONS / LAB / f"{LAB}.ipynb", as_version=4)
    return {_nbgrader(c)["grade_id"]: float(_nbgrader(c)["points"]) for c in nb.cells if _nbgrader(c).get("grade")}


#: A score line of nbgrader's feedback page: ``<a href="#GRADE_ID">Test cell</a> (Score: 1.0 / 2.0)``.
SCORE_LINE = re.compile(r'<a href="#([\w-]+)">[^<]*</a> \(Score: (-?[\d.]+) / [\d.]+\)')


def _feedback_scores(page: str) -> dict[str, float]:
    """The score of each graded cell that a feedback page lists."""
    return {grade_id: float(score) for grade_id, score in SCORE_LINE.findall(page)}


def _login(context, hub: CourseHub, who: str, next_url: str):
    page = context.new_page()
    page.goto(f"{hub.url}/hub/login?next={next_url}")
    page.fill("#username_input", hub.names[who])
    page.fill("#password_input", hub.password(who))
    page.click("#login_submit")
    return page


def _assignments_tab(page):
    """Open nbgrader's Assignments tab from JupyterLab's menu."""
    page.locator("#jp-menu-panel div.lm-MenuBar-itemLabel", has_text="Nbgrader").click()
    page.locator('li[data-command="nbgrader:open-assignment-list"]').click()
    page.locator("#released_assignments_list").wait_for(timeout=STEP_TIMEOUT_S * 1000)


def _dialog_text(page) -> str:
    dialog = page.locator(".jp-Dialog")
    dialog.wait_for(timeout=STEP_TIMEOUT_S * 1000)
    text = dialog.inner_text()
    dialog.locator(".jp-mod-accept").click()
    dialog.wait_for(state="detached")
    return text


def _answer_all(hub: CourseHub, who: str) -> None:
    """Fill every exercise of the student's fetched notebook from the solution notebook, as them."""
    path = hub.home(who) / "mlsys" / LAB / f"{LAB}.ipynb"
    nb = nbformat.read(path, as_version=4)
    solutions = solution_cells(LAB)
    for cell in nb.cells:
        if _nbgrader(cell).get("solution"):
            cell.source = solutions[_nbgrader(cell)["grade_id"]]
    text = nbformat.writes(nb)
    subprocess.run(["runuser", "-u", hub.names[who], "--", "tee", str(path)], input=text, text=True,
                   stdout=subprocess.DEVNULL, check=True, timeout=30)


def _answer_first_typed(page, hub: CourseHub, who: str) -> None:
    """Open the fetched notebook in JupyterLab, type the first exercise's answer into its cell, save
    with Ctrl+S; fail unless the server saved it and the file on disk holds the answer."""
    path = hub.home(who) / "mlsys" / LAB / f"{LAB}.ipynb"
    nb = nbformat.read(path, as_version=4)
    index = next(i for i, c in enumerate(nb.cells) if _nbgrader(c).get("solution"))
    answer = solution_cells(LAB)[_nbgrader(nb.cells[index])["grade_id"]]
    page.goto(f"{hub.url}/user/{hub.names[who]}/lab/tree/mlsys/{LAB}/{LAB}.ipynb")
    editor = page.locator(".jp-NotebookPanel .jp-Notebook-cell").nth(index).locator(".cm-content")
    editor.click()
    page.keyboard.press("Control+a")
    page.keyboard.insert_text(answer)
    saved_url = f"/api/contents/mlsys/{LAB}/{LAB}.ipynb"
    with page.expect_response(lambda r: r.request.method == "PUT" and saved_url in r.url,
                              timeout=STEP_TIMEOUT_S * 1000) as saved:
        page.keyboard.press("Control+s")
    assert saved.value.status == 200, f"saving the notebook: HTTP {saved.value.status}"
    assert nbformat.read(path, as_version=4).cells[index].source == answer, "the saved cell is not what was typed"


def _fetch_validate_submit(page, hub: CourseHub, who: str, answer) -> str:
    """In the Assignments tab: fetch the lab, answer (``answer(page)``), validate, submit; the Validate dialog's text."""
    page.goto(f"{hub.url}/user/{hub.names[who]}/lab", timeout=STEP_TIMEOUT_S * 1000)
    _assignments_tab(page)
    released = page.locator("#released_assignments_list .list_item", has_text=LAB)
    released.locator(".item_status button").click()
    page.locator("#fetched_assignments_list .list_item", has_text=LAB).first.wait_for()
    answer(page)
    _assignments_tab(page)
    page.locator(f'#fetched_assignments_list a:text("{LAB}")').first.click()
    rows = page.locator(f"#nbgrader-mlsys-{LAB} .list_item")
    rows.last.locator('.item_status button:text("Validate")').click()
    validated = _dialog_text(page)
    page.locator("#fetched_assignments_list .list_item", has_text=LAB).first \
        .locator('.item_status button:text("Submit")').click()
    page.locator("#submitted_assignments_list .list_item", has_text=LAB).first.wait_for(timeout=STEP_TIMEOUT_S * 1000)
    return validated


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_term_of_lab1_on_the_course_hub(tmp_path):
    playwright = browser_or_skip()
    hub_or_skip()
    screens = Screens(tmp_path / "screens")
    started = time.monotonic()
    with CourseHub(["instructor"], ["ta"], ["ada", "bob"], tmp_path / "jupyterhub.log") as hub, playwright.sync_playwright() as driver:
        chromium = launch_chromium(driver)
        remote: list[str] = []

        def context():
            ctx = chromium.new_context(viewport={"width": 1400, "height": 900})
            ctx.set_default_timeout(60_000)
            refuse_remote(ctx, remote)
            return ctx

        formgrader = "/services/mlsys/formgrader"
        # --- the instructor releases Lab 1 ---
        instructor = _login(context(), hub, "instructor", formgrader)
        with screens.step("release", instructor):
            row = instructor.get_by_role("row", name=re.compile(LAB))
            row.locator(".assign a").click()
            close_formgrader_modal(instructor, "generate", STEP_TIMEOUT_S)
            row.locator(".release a").click()
            close_formgrader_modal(instructor, "release", STEP_TIMEOUT_S)
            csp = instructor.request.get(f"{hub.url}{formgrader}").headers.get("content-security-policy", "")
        # --- the students: Ada on time, Bob late ---
        ada, bob = _login(context(), hub, "ada", "/hub/spawn"), _login(context(), hub, "bob", "/hub/spawn")
        with screens.step("ada-submits", ada):
            ada_validated = _fetch_validate_submit(ada, hub, "ada", lambda page: _answer_all(hub, "ada"))
        time.sleep(1.5)
        due = datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0)
        time.sleep(1.5)
        with screens.step("deadline", instructor):
            instructor.goto(f"{hub.url}{formgrader}")
            instructor.get_by_role("row", name=re.compile(LAB)).locator(".edit a").click()
            instructor.locator("input.modal-duedate").fill(due.strftime("%Y-%m-%dT%H:%M:%S"))
            instructor.locator("input.modal-timezone").fill("UTC")
            instructor.locator(".modal-footer button", has_text="Save").click()
            instructor.locator(".modal").wait_for(state="detached")
        with Gradebook(f"sqlite:///{hub.classroom.course_dir / 'gradebook.db'}") as gradebook:
            stored_due = gradebook.find_assignment(LAB).duedate
        with screens.step("bob-submits", bob):
            bob_validated = _fetch_validate_submit(bob, hub, "bob",
                                                   lambda page: _answer_first_typed(page, hub, "bob"))
        # --- the TA collects, autogrades, grades by hand, releases feedback ---
        ta = _login(context(), hub, "ta", formgrader)
        with screens.step("collect", ta):
            row = ta.get_by_role("row", name=re.compile(LAB))
            row.locator(".collect a").click()
            close_formgrader_modal(ta, "collect", STEP_TIMEOUT_S)
            row.locator(".num-submissions a").click()
        shown = {}
        for who in ("ada", "bob"):
            with screens.step(f"autograde-{who}", ta):
                student = ta.locator("tbody tr").filter(
                    has=ta.locator(".student-id", has_text=re.compile(f"^{hub.names[who]}$")))
                student.locator(".autograde a").click()
                close_formgrader_modal(ta, f"autograde {who}", STEP_TIMEOUT_S)
                student.locator(".status", has_text=re.compile("^graded$")).wait_for()
                shown[who] = student.locator(".score").inner_text()
        with screens.step("manual-grade", ta):
            ta.locator("tbody tr").filter(has=ta.locator(".student-id", has_text=re.compile(f"^{hub.names['ada']}$"))) \
                .locator(".student-name a").click()
            ta.locator("tbody").get_by_role("link", name=LAB).click()
            # the page shows the autograded score as the input's placeholder once it has loaded the
            # grades; typed before that, the score is overwritten by the loaded (empty) hand score
            score = ta.locator(f"input#{OVERRIDE[0]}[placeholder]")
            score.wait_for(timeout=STEP_TIMEOUT_S * 1000)
            autograded = float(score.get_attribute("placeholder"))
            score.fill(f"{OVERRIDE[1]:g}")
            with ta.expect_response(lambda r: r.request.method == "PUT" and "/api/grade/" in r.url) as saved:
                score.press("Escape")  # Formgrader's key to leave the input and save it
            assert saved.value.status == 200, f"saving the hand grade: HTTP {saved.value.status}"
        with screens.step("feedback", ta):
            ta.goto(f"{hub.url}{formgrader}")
            row = ta.get_by_role("row", name=re.compile(LAB))
            row.locator(".generate-feedback a").click()
            close_formgrader_modal(ta, "generate feedback", STEP_TIMEOUT_S)
            row.locator(".release-feedback a").click()
            close_formgrader_modal(ta, "release feedback", STEP_TIMEOUT_S)
        # --- each student fetches feedback ---
        feedback = {}
        for who, page in (("ada", ada), ("bob", bob)):
            with screens.step(f"feedback-{who}", page):
                page.goto(f"{hub.url}/user/{hub.names[who]}/lab")
                _assignments_tab(page)
                page.locator("#submitted_assignments_list .list_item", has_text=LAB).first \
                    .locator("button", has_text="Fetch Feedback").click()
                page.locator("#submitted_assignments_list a", has_text="view feedback").first.wait_for()
                feedback[who] = {str(p.relative_to(hub.home(who))): p.read_text()
                                 for p in (hub.home(who) / "mlsys" / LAB / "feedback").rglob("*.html")}
        # --- what a student cannot open ---
        with screens.step("student-refused", ada):
            refused_page = ada.goto(f"{hub.url}{formgrader}").status
        probe = ("import os, sys\n"
                 "for p in sys.argv[1:]:\n"
                 "    try: os.listdir(p) if os.path.isdir(p) else open(p).read(1); print('OPENED', p)\n"
                 "    except PermissionError: print('refused', p)\n")
        course = hub.classroom.course_dir
        targets = [course, course / "gradebook.db", hub.home("bob")]
        probed = subprocess.run(["runuser", "-u", hub.names["ada"], "--", "python3", "-c", probe, *map(str, targets)],
                                capture_output=True, text=True, timeout=30).stdout
        with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gradebook:
            recorded = {who: (gradebook.find_submission(LAB, hub.names[who]).score,
                              gradebook.find_submission(LAB, hub.names[who]).late_submission_penalty)
                        for who in ("ada", "bob")}
        elapsed = time.monotonic() - started
    print(f"the term took {elapsed:.0f} s")

    points = _points()
    total = sum(points.values())
    bob_score = sum(points[gid] for gid in points if gid.startswith("test_compact_strides"))
    ada_score = total - points[OVERRIDE[0]] + OVERRIDE[1]
    assert "frame-ancestors 'none'" in csp, "Formgrader is a page of its own, never framed"
    assert "Success" in ada_validated and "Success" not in bob_validated, (ada_validated, bob_validated)
    assert stored_due == due.replace(tzinfo=None), "the due date the instructor typed is the gradebook's"
    assert shown == {"ada": f"{total:g} / {total:g}", "bob": f"{bob_score:g} / {total:g}"}, "before the hand grade"
    assert autograded == points[OVERRIDE[0]], "the grading page shows the test's autograded score"
    # Ada on time: full marks but the TA's override; Bob late: his first exercise's points, all taken back
    assert recorded == {"ada": (ada_score, 0.0), "bob": (bob_score, bob_score)}
    assert len(feedback["ada"]) == 1 and len(feedback["bob"]) == 1, feedback.keys()
    (ada_page,), (bob_page,) = feedback["ada"].values(), feedback["bob"].values()
    # each page lists the student's own cell scores: Ada's with the TA's override, Bob's first exercise only
    assert _feedback_scores(ada_page) == {**points, OVERRIDE[0]: OVERRIDE[1]}
    assert _feedback_scores(bob_page) == {gid: p if gid.startswith("test_compact_strides") else 0.0
                                          for gid, p in points.items()}
    assert f"(Score: {ada_score:.1f} / {total:.1f})" in ada_page and "Late submission penalty" not in ada_page
    assert f"(Score: 0.0 / {total:.1f})" in bob_page
    assert f"Late submission penalty (Score: -{bob_score:.1f})" in bob_page
    assert refused_page == 403
    assert probed.split() == [w for t in targets for w in ("refused", str(t))], probed
    assert remote == []
    assert hub.leftovers == [], "the hub stopped everything it started"
    assert not any(map(provision.user_exists, [*hub.names.values(), hub.classroom.grader])), "accounts removed"

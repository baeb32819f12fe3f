"""nbgrader's own commands work on this course as the instructor guide says, verbatim
(docs/instructor/running-a-class.md).

The exchange round trip (release, fetch, submit by two students, one of them late, collect, grade,
feedback, release and fetch of feedback) runs the guide's commands line by line, from a folder that
is not the repository (the venv's settings file finds the course's). Then Formgrader's view of the
class (nbgrader's own "autograded" test) and `mlsys course grade` must agree whoever graded last.
"""

from __future__ import annotations

import csv
import datetime as dt
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from nbgrader.api import Gradebook
from nbgrader.utils import parse_utc

from autograder.cells import fill, solution_cells
from autograder.config import CONFIG_FILE, GRADING_KERNEL, install_into_environment
from autograder.paths import REPO
from autograder.run.batch import graded_in_place

LAB = "lab04_memory"
BIN = Path(sys.executable).parent
MARKER = "<!-- exchange round trip: run verbatim by tests/test_nbgrader_native.py -->"


def readme_commands() -> list[str]:
    """The command lines of the instructor guide's exchange round trip, comments kept (they mark students)."""
    text = (REPO / "docs" / "instructor" / "running-a-class.md").read_text()
    block = text[text.index(MARKER):].split("```bash\n", 1)[1].split("```", 1)[0]
    return [line for line in block.splitlines() if line.strip()]


def test_the_readme_block_is_a_whole_round_trip():
    steps = [shlex.split(line, comments=True)[:2] for line in readme_commands()]
    for step in (["mlsys", "course"], ["nbgrader", "release_assignment"], ["nbgrader", "fetch_assignment"],
                 ["nbgrader", "submit"], ["nbgrader", "collect"], ["nbgrader", "release_feedback"],
                 ["nbgrader", "fetch_feedback"]):
        assert step in steps, step
    students = {shlex.split(line, comments=True)[1] for line in readme_commands() if line.endswith("# student")}
    assert students == {"fetch_assignment", "submit", "fetch_feedback"}


def test_make_installs_the_settings_and_the_kernel_into_the_environment(tmp_path):
    """What `make` runs (`python -m autograder.config install`), into a scratch prefix: nbgrader finds
    the course's settings and the grading kernel there, and the kernel imports the tool from anywhere."""
    kernel, settings = install_into_environment(tmp_path)
    assert settings == tmp_path / "etc" / "jupyter" / "nbgrader_config.py"
    assert str(CONFIG_FILE) in settings.read_text()
    spec = json.loads(kernel.read_text())
    assert kernel.parent.name == GRADING_KERNEL and spec["argv"][:3] == [sys.executable, "-m", "autograder.sandbox"]
    done = subprocess.run([sys.executable, "-c", "import autograder.sandbox.sandbox"], cwd=tmp_path, capture_output=True,
                          env={**_clean_env(), **spec["env"]})
    assert done.returncode == 0, done.stderr.decode()


def test_the_course_venv_holds_them():
    installed = Path(sys.prefix) / "etc" / "jupyter" / "nbgrader_config.py"
    assert installed.is_file() and str(CONFIG_FILE) in installed.read_text(), \
        "run `make setup`: the venv has no settings file of this checkout"
    spec = json.loads((Path(sys.prefix) / "share" / "jupyter" / "kernels" / GRADING_KERNEL / "kernel.json").read_text())
    assert spec["env"]["PYTHONPATH"] == str(REPO)


def _clean_env() -> dict[str, str]:
    """The environment of a fresh shell: none of this test process's course or Jupyter settings."""
    return {k: v for k, v in os.environ.items()
            if not k.startswith(("MLSYS_", "JUPYTER", "NBGRADER", "PYTHONPATH"))}


class Class:
    """An instructor folder and two students' folders, each command run there as in a shell."""

    def __init__(self, tmp: Path):
        self.instructor = tmp / "instructor"
        self.course = self.instructor / ".course"
        self.course.mkdir(parents=True)
        prefix = tmp / "venv-jupyter"  # what `make` installs into the venv, here in a scratch prefix
        install_into_environment(prefix)
        self.env = {**_clean_env(), "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}",
                    "PYTHONPATH": str(REPO),  # `mlsys` of this checkout, whichever the venv was made from
                    "MLSYS_COURSE_DIR": str(self.course),
                    "JUPYTER_CONFIG_PATH": str(prefix / "etc" / "jupyter"),
                    "JUPYTER_PATH": str(prefix / "share" / "jupyter")}
        self.homes = {name: tmp / name for name in ("alice", "bob")}
        for home in self.homes.values():
            home.mkdir()

    def run(self, line: str, student: str | None = None) -> str:
        """Run ``line`` as the instructor, or as ``student`` in their folder (all students share this
        machine's user, so nbgrader is told who they are with ``--student``, as on a shared account)."""
        env = dict(self.env, HOME=str(self.homes[student])) if student else self.env
        line = f"{line} --student {student}" if student else line
        done = subprocess.run(["bash", "-c", line], cwd=self.homes[student] if student else self.instructor,
                              env=env, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, f"{line!r} as {student or 'instructor'} failed:\n{done.stdout}\n{done.stderr}"
        return done.stdout + done.stderr

    def score(self, student: str) -> tuple[float, float]:
        with Gradebook(f"sqlite:///{self.course / 'gradebook.db'}") as gradebook:
            submission = gradebook.find_submission(LAB, student)
            return submission.score, submission.late_submission_penalty


def work_on(notebook: Path, peek: str) -> None:
    """The student's work: the solution's answers in the fetched notebook, and a line that shows what
    the grading kernel can see of the grader's machine."""
    fetched = fill(nbformat.read(notebook, as_version=4), solution_cells(LAB))
    first = next(c for c in fetched.cells if c.get("metadata", {}).get("nbgrader", {}).get("solution"))
    first.source += f"\nimport os\nprint('PEEK', os.path.exists({peek!r}), os.path.exists({str(REPO / 'solutions')!r}))\n"
    nbformat.write(fetched, notebook)


def peek_output(notebook: Path) -> str:
    outputs = [o.get("text", "") for c in nbformat.read(notebook, as_version=4).cells if c.cell_type == "code"
               for o in c.get("outputs", [])]
    return next(line for text in outputs for line in text.splitlines() if line.startswith("PEEK"))


@pytest.fixture(scope="module")
def round_trip(tmp_path_factory):
    """The guide's round trip, alice on time and bob late (his submission's timestamp, as the exchange
    recorded it, a day after the due date), late work scoring zero."""
    tmp = tmp_path_factory.mktemp("exchange")
    course = Class(tmp)
    (course.course / "nbgrader_config.py").write_text(
        "c = get_config()\nc.LateSubmissionPlugin.penalty_method = 'zero'\n")
    logs = {}
    for line in readme_commands():
        command = line.split("#")[0].strip()
        verb = shlex.split(command)[1]
        if not line.endswith("# student"):
            if verb == "collect":  # bob submitted after the due date
                due = re.search(r'--duedate "([^"]+)"', "\n".join(readme_commands()))[1]
                (inbound,) = (course.course / "exchange" / "mlsys" / "inbound").glob(f"bob+{LAB}+*")
                late = parse_utc(due).replace(tzinfo=None) + dt.timedelta(days=1)
                (inbound / "timestamp.txt").write_text(late.strftime("%Y-%m-%d %H:%M:%S.%f UTC"))
            logs[verb] = course.run(command)
            continue
        for student in ("alice", "bob"):
            if verb == "submit":
                work_on(course.homes[student] / LAB / f"{LAB}.ipynb", str(course.course))
            logs[f"{verb} {student}"] = course.run(command, student)
    return course, logs


@pytest.mark.slow
def test_exchange_round_trip_keeps_timestamps_secrets_and_late_penalties(round_trip):
    course, _ = round_trip
    for student in ("alice", "bob"):
        submitted = course.course / "submitted" / student / LAB
        assert (submitted / "submission_secret.txt").read_text().strip(), student
        assert (course.course / "feedback" / student / LAB / f"{LAB}.html").is_file()
    due = parse_utc(re.search(r'--duedate "([^"]+)"', "\n".join(readme_commands()))[1])
    stamps = {s: parse_utc((course.course / "submitted" / s / LAB / "timestamp.txt").read_text().strip())
              for s in ("alice", "bob")}
    assert stamps["alice"] < due < stamps["bob"]
    alice_score, alice_penalty = course.score("alice")
    bob_score, bob_penalty = course.score("bob")
    assert alice_score == 15 and alice_penalty == 0
    assert bob_score == 15 and bob_penalty == 15  # graded in full, then the late penalty of "zero"
    grades = {row["student_id"]: row for row in csv.DictReader((course.course / "grades.csv").open())}
    assert float(grades["alice"]["score"]) == 15 and float(grades["bob"]["score"]) == 0
    assert "late" in grades["bob"]["status"] and "late" not in grades["alice"]["status"]


@pytest.mark.slow
def test_students_fetch_their_feedback(round_trip):
    course, _ = round_trip
    for student, home in course.homes.items():
        pages = list((home / LAB / "feedback").glob(f"*/{LAB}.html"))
        assert len(pages) == 1, student
        page = pages[0].read_text()
        assert "BEGIN HIDDEN TESTS" not in page and "Score" in page


@pytest.mark.slow
def test_graded_kernels_see_neither_the_course_nor_the_solutions(round_trip):
    course, _ = round_trip
    for student in ("alice", "bob"):
        assert peek_output(course.course / "autograded" / student / LAB / f"{LAB}.ipynb") == "PEEK False False"


@pytest.mark.slow
def test_plain_nbgrader_and_the_course_tool_share_one_truth(round_trip):
    """Graded by plain nbgrader (as Formgrader's button does) the tool sees the class as graded; an
    autograded copy gone (Formgrader deletes it before it regrades) makes the tool grade that one again;
    another lab's folder beside it is not graded as this lab."""
    course, _ = round_trip
    everyone = {"alice", "bob"}
    course.run(f"nbgrader autograde {LAB} --force && nbgrader generate_feedback {LAB} --force")
    assert graded_in_place(course.course, LAB, everyone) == everyone
    assert peek_output(course.course / "autograded" / "alice" / LAB / f"{LAB}.ipynb") == "PEEK False False"
    assert course.score("bob")[1] == 15

    other = course.course / "submitted" / "alice" / "lab05_precision"
    other.mkdir()
    shutil.copyfile(REPO / "labs" / "lab05_precision" / "lab05_precision.ipynb", other / "lab05_precision.ipynb")
    output = course.run(f"mlsys course grade {LAB} .course/submitted")
    assert "2 submission(s) unchanged since last graded: skipped" in output, output

    shutil.rmtree(course.course / "autograded" / "alice" / LAB)
    assert graded_in_place(course.course, LAB, everyone) == {"bob"}
    bobs = (course.course / "autograded" / "bob" / LAB / f"{LAB}.ipynb").stat().st_mtime_ns
    output = course.run(f"mlsys course grade {LAB} .course/submitted")
    assert "1 submission(s) unchanged since last graded: skipped" in output, output
    assert (course.course / "autograded" / "bob" / LAB / f"{LAB}.ipynb").stat().st_mtime_ns == bobs
    assert graded_in_place(course.course, LAB, everyone) == everyone
    assert course.score("alice") == (15, 0) and course.score("bob") == (15, 15)
    assert not (course.course / "autograded" / "alice" / "lab05_precision").exists()

"""LMS downloads (Moodle, Canvas, Blackboard, Gradescope) and nbgrader's own layout: whose notebook is
which, the mapping file, and the grade files Canvas and Moodle import.

The file names are the LMSes' own (see autograder/intake/lms.py for where each format comes from)."""

import csv
import datetime as dt
import re
import os
import shlex
import shutil
import sys
import zipfile
from pathlib import Path

import pytest
from nbgrader.api import Gradebook

from autograder import course
from autograder.cli import main
from autograder.intake.lms import Person, StudentMap, remember_people
from autograder.intake.submissions import find_submissions
from autograder.paths import REPO
from autograder.report.export import CANVAS_COLUMNS, MOODLE_COLUMNS, export_grades
from autograder.run.batch import BatchResult

LAB = "lab01_tensors"
pytestmark = pytest.mark.filterwarnings("ignore::sqlalchemy.exc.SAWarning")  # nbgrader's autoflush noise


def _zip(path: Path, members: dict[str, str]) -> Path:
    with zipfile.ZipFile(path, "w") as archive:
        for name, text in members.items():
            archive.writestr(name, text)
    return path


def _found(tmp_path, members, **options):
    found = find_submissions(_zip(tmp_path / "download.zip", members), LAB, tmp_path / "unpack", **options)
    return found, {student: path.relative_to(found.root).as_posix() for student, path in found.notebooks.items()}


def test_moodle_flat_download_keeps_each_participant(tmp_path):
    found, notebooks = _found(tmp_path, {
        "Jane Doe_123456_assignsubmission_file_lab01_tensors.ipynb": "{}",
        "John Doe_123457_assignsubmission_file_lab01_tensors.ipynb": "{}",
        "John Doe_123458_assignsubmission_file_Lab 1 final.ipynb": "{}",  # the other John Doe
        "José Müller_123459_assignsubmission_file_lab01_tensors.ipynb": "{}",
        "Jane Doe_123456_assignsubmission_onlinetext_onlinetext.html": "<p>hi</p>",
    })
    assert notebooks == {
        "jane-doe-123456": "Jane Doe_123456_assignsubmission_file_lab01_tensors.ipynb",
        "john-doe-123457": "John Doe_123457_assignsubmission_file_lab01_tensors.ipynb",
        "john-doe-123458": "John Doe_123458_assignsubmission_file_Lab 1 final.ipynb",
        "jose-muller-123459": "José Müller_123459_assignsubmission_file_lab01_tensors.ipynb",
    }
    assert found.problems == {}
    assert found.people["john-doe-123458"] == Person("moodle", "123458", "John Doe")
    assert found.people["jose-muller-123459"].name == "José Müller"


def test_moodle_download_in_folders(tmp_path):
    found, notebooks = _found(tmp_path, {
        "Jane Doe_123456_assignsubmission_file_/lab01_tensors.ipynb": "{}",
        "John Doe_123457_assignsubmission_file/lab01_tensors.ipynb": "{}",  # no trailing _
        "John Doe_123457_assignsubmission_file/scratch.ipynb": "{}",
        "John Doe_123458_assignsubmission_file_/work/lab01_tensors (2).ipynb": "{}",
    })
    assert notebooks == {
        "jane-doe-123456": "Jane Doe_123456_assignsubmission_file_/lab01_tensors.ipynb",
        "john-doe-123457": "John Doe_123457_assignsubmission_file/lab01_tensors.ipynb",
        "john-doe-123458": "John Doe_123458_assignsubmission_file_/work/lab01_tensors (2).ipynb",
    }
    assert found.problems == {} and found.people["john-doe-123457"].lms_id == "123457"


def test_canvas_download_two_namesakes_late_and_resubmitted(tmp_path):
    found, notebooks = _found(tmp_path, {
        "doejohn_20001_9001_lab01_tensors.ipynb": "{}",
        "doejohn_late_20002_9002_lab01_tensors-1.ipynb": "{}",  # late, a resubmission
        "smithmary_20003_9003_lab01_tensors.ipynb": "{}",
        "smithmary_20003_9004_scratch.ipynb": "{}",  # two files in one submission
        "müllerjosé_20004_9005_Lab1.ipynb": "{}",
    })
    assert notebooks == {
        "doejohn-20001": "doejohn_20001_9001_lab01_tensors.ipynb",
        "doejohn-20002": "doejohn_late_20002_9002_lab01_tensors-1.ipynb",
        "smithmary-20003": "smithmary_20003_9003_lab01_tensors.ipynb",
        "mullerjose-20004": "müllerjosé_20004_9005_Lab1.ipynb",
    }
    assert found.problems == {}
    assert found.people["doejohn-20002"] == Person("canvas", "20002", "doejohn", late=True)
    assert not found.people["doejohn-20001"].late
    assert found.notes == {"doejohn-20002": "the LMS marked the submission late"}


def test_blackboard_latest_attempt_counts_and_the_receipt_names_the_user(tmp_path):
    found, notebooks = _found(tmp_path, {
        "Lab 1_jdoe_attempt_2024-03-01-10-15-02_lab01_tensors.ipynb": "{}",
        "Lab 1_jdoe_attempt_2024-03-01-10-15-02.txt": "Name: John Doe (jdoe)\nAssignment: Lab 1\n",
        "Lab 1_jdoe_attempt_2024-03-02-09-00-00_lab01_tensors.ipynb": "{}",
        "Lab 1_jdoe_attempt_2024-03-02-09-00-00.txt": "Name: John Doe (jdoe)\nAssignment: Lab 1\n",
        "Lab 1_mary_smith_attempt_2024-03-01-11-00-00_lab01_tensors.ipynb": "{}",
        "Lab 1_mary_smith_attempt_2024-03-01-11-00-00.txt":
            "Name: Mary Smith (mary_smith)\nComments:\nName: Eve (jdoe)\n",
        "Lab 1_bob_attempt_2024-03-01-12-00-00_lab01_tensors.ipynb": "{}",  # no receipt
    })
    assert notebooks == {
        "jdoe": "Lab 1_jdoe_attempt_2024-03-02-09-00-00_lab01_tensors.ipynb",
        "mary_smith": "Lab 1_mary_smith_attempt_2024-03-01-11-00-00_lab01_tensors.ipynb",
        "bob": "Lab 1_bob_attempt_2024-03-01-12-00-00_lab01_tensors.ipynb",
    }
    assert found.problems == {}
    assert found.notes == {"jdoe": "2 attempts in the download: graded the latest, 2024-03-02-09-00-00"}
    assert found.people["mary_smith"] == Person("blackboard", "mary_smith", "Mary Smith")
    assert found.people["bob"] == Person("blackboard", "bob")


GRADESCOPE_METADATA = """\
submission_1001:
  :submitters:
  - :name: Ann Lee
    :sid: '3001'
    :email: ann@uni.edu
  :created_at: 2024-03-01 10:00:00.000000000 -08:00
  :score: 10.0
submission_1002:
  :submitters:
  - :name: Bo Li
    :sid: ''
    :email: bo.li@uni.edu
  - :name: Cy Wu
    :sid: '3003'
    :email: cy@uni.edu
  :created_at: 2024-03-01 11:00:00.000000000 -08:00
  :score: 7.0
submission_1003:
  :submitters:
  - :name: Dee Ray
    :sid: '3004'
    :email: dee@uni.edu
  - :name: Ann Lee
    :sid: '3001'
    :email: ann@uni.edu
  :created_at: 2024-03-01 12:00:00.000000000 -08:00
"""


def test_gradescope_export_groups_and_repeated_submitters(tmp_path):
    found, notebooks = _found(tmp_path, {
        "assignment_4242_export/submission_metadata.yml": GRADESCOPE_METADATA,
        "assignment_4242_export/submission_1001/lab01_tensors.ipynb": "{}",
        "assignment_4242_export/submission_1002/lab01_tensors.ipynb": "{}",
        "assignment_4242_export/submission_1003/lab01_tensors.ipynb": "{}",
        "assignment_4242_export/submission_1004/lab01_tensors.ipynb": "{}",
    })
    assert notebooks == {  # a group's notebook counts for each member; no SID: the e-mail's local part
        "bo.li": "submission_1002/lab01_tensors.ipynb",
        "3003": "submission_1002/lab01_tensors.ipynb",
        "3004": "submission_1003/lab01_tensors.ipynb",
    }
    assert sorted(found.problems) == ["3001", "submission_1004"]
    assert "several submissions of one submitter (submission_1001, submission_1003)" in found.problems["3001"]
    assert "submission_metadata.yml lists" in found.problems["submission_1004"]
    assert found.people["bo.li"] == Person("gradescope", "bo.li@uni.edu", "Bo Li", "bo.li@uni.edu")


def _nbgrader_submitted(folder: Path) -> None:
    """nbgrader's <course>/submitted after `nbgrader collect` of two labs."""
    for student, lab, companions in [("alice", LAB, True), ("alice", "lab02_autodiff", True),
                                     ("bob", "lab02_autodiff", True), ("carol", LAB, False)]:
        (folder / student / lab).mkdir(parents=True)
        (folder / student / lab / f"{lab}.ipynb").write_text("{}")
        if companions:
            (folder / student / lab / "timestamp.txt").write_text("2024-03-01 10:00:00.000000 UTC")
            (folder / student / lab / "submission_secret.txt").write_text("c2VjcmV0")


def test_nbgrader_layout_takes_only_this_lab_and_reports_the_companions(tmp_path):
    submitted = tmp_path / "course" / "submitted"
    _nbgrader_submitted(submitted)
    (submitted / "mallory").mkdir()
    (submitted / "mallory" / LAB).symlink_to(submitted / "alice" / LAB)  # someone else's folder
    found = find_submissions(submitted, LAB, tmp_path / "unpack")
    assert found.notebooks == {"alice": submitted / "alice" / LAB / f"{LAB}.ipynb",
                               "carol": submitted / "carol" / LAB / f"{LAB}.ipynb"}
    assert found.problems == {"mallory": f"mallory/{LAB} is a symbolic link: not followed, not graded"}
    assert found.companions == {"alice": {"timestamp.txt": submitted / "alice" / LAB / "timestamp.txt",
                                          "submission_secret.txt": submitted / "alice" / LAB / "submission_secret.txt"}}


def test_zipped_nbgrader_layout_of_one_student_is_not_mistaken_for_a_wrapper(tmp_path):
    found, notebooks = _found(tmp_path, {
        f"submitted/alice/{LAB}/{LAB}.ipynb": "{}",
        f"submitted/alice/{LAB}/timestamp.txt": "2024-03-01 10:00:00.000000 UTC",
        "submitted/alice/lab02_autodiff/lab02_autodiff.ipynb": "{}",
    })
    assert notebooks == {"alice": f"alice/{LAB}/{LAB}.ipynb"}
    assert found.companions == {"alice": {"timestamp.txt": found.root / "alice" / LAB / "timestamp.txt"}}


def test_unreadable_names_and_collisions_are_reported_not_guessed(tmp_path):
    found, notebooks = _found(tmp_path, {
        "mary_smith_lab01.ipynb": "{}",  # not '<student>_<lab>.ipynb': mary? mary_smith?
        "doejohn_20001_9001_lab01_tensors.ipynb": "{}",
        f"doejohn-20001/{LAB}.ipynb": "{}",  # a folder of someone else with the same id
        f"eve_{LAB}.ipynb": "{}",
    })
    assert notebooks == {"eve": f"eve_{LAB}.ipynb"}
    assert sorted(found.problems) == ["doejohn-20001", "mary_smith_lab01.ipynb"]
    assert "2 different submitters claim the student id doejohn-20001" in found.problems["doejohn-20001"]
    why = found.problems["mary_smith_lab01.ipynb"]
    assert "Moodle" in why and "Canvas" in why and "Blackboard" in why and "Gradescope" in why
    assert "--students" in why


MAPPING = """\
prefix,lms_id,student_id,comment
mary_smith,,msmith,flat file with no LMS naming
mary,,mary1,a shorter prefix
,20001,jdoe,Canvas user id
Jane Doe_123456,,jane,a Moodle name
"""


def test_mapping_file_names_the_students(tmp_path):
    (tmp_path / "map.csv").write_text(MAPPING)
    found, notebooks = _found(tmp_path, {
        "mary_smith_lab01.ipynb": "{}",
        "mary_lab01.ipynb": "{}",
        "doejohn_20001_9001_lab01_tensors.ipynb": "{}",
        "Jane Doe_123456_assignsubmission_file_lab01_tensors.ipynb": "{}",
        "smithmary_20003_9003_lab01_tensors.ipynb": "{}",
    }, students=tmp_path / "map.csv")
    assert notebooks == {"msmith": "mary_smith_lab01.ipynb", "mary1": "mary_lab01.ipynb",
                         "jdoe": "doejohn_20001_9001_lab01_tensors.ipynb",
                         "jane": "Jane Doe_123456_assignsubmission_file_lab01_tensors.ipynb"}
    assert list(found.problems) == ["smithmary_20003_9003_lab01_tensors.ipynb"]
    assert "no row of the mapping file" in found.problems["smithmary_20003_9003_lab01_tensors.ipynb"]
    assert found.people["jdoe"] == Person("canvas", "20001", "doejohn")  # the LMS's identity stays
    assert "msmith" not in found.people


def test_mapping_file_written_by_excel_with_a_byte_order_mark(tmp_path):
    (tmp_path / "map.csv").write_bytes("\ufeffPrefix,Student_ID\r\nalice,a1\r\n".encode())
    assert StudentMap.load(tmp_path / "map.csv").prefixes == {"alice": "a1"}


@pytest.mark.parametrize("text, error", [
    ("student_id\nalice\n", r"map.csv line 1: the header must name the columns student_id and prefix"),
    ("prefix,student_id\nalice,alice\nbob,-rf\n", r"map.csv line 3: student_id '-rf' is not a valid id"),
    ("prefix,student_id\nalice,a1\n\nalice,a2\n", r"map.csv line 4: prefix 'alice' is mapped to a1 on line 2"),
    ("prefix,lms_id,student_id\n,,bob\n", r"map.csv line 2: neither prefix nor lms_id is given"),
    (b"prefix,student_id\n\xff\xfe,x\n", r"map.csv: not UTF-8 text"),
])
def test_malformed_mapping_files_are_refused_with_the_line(tmp_path, text, error):
    path = tmp_path / "map.csv"
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    with pytest.raises(ValueError, match=error):
        find_submissions(tmp_path, LAB, tmp_path / "unpack", students=path)


@pytest.fixture(scope="module")
def empty_gradebook(tmp_path_factory):
    """A gradebook holding lab01 and lab02, each with one graded cell worth 10 points (made once:
    nbgrader runs this environment's ``alembic`` to create one, which the grader puts on PATH)."""
    path = tmp_path_factory.mktemp("template") / "gradebook.db"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PATH", os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]))
        with Gradebook(f"sqlite:///{path}") as gradebook:
            for lab in (LAB, "lab02_autodiff"):
                gradebook.update_or_create_assignment(lab)
                gradebook.add_notebook(lab, lab)
                gradebook.add_grade_cell("exercise", lab, lab, max_score=10, cell_type="code")
    return path


def _gradebook(root: Path, empty: Path) -> None:
    """The course gradebook under ``root``, a copy of ``empty`` if there is none yet."""
    root.mkdir(parents=True, exist_ok=True)
    if not (root / "gradebook.db").exists():
        shutil.copy(empty, root / "gradebook.db")


def _record_scores(root: Path, lab: str, scores: dict[str, float]) -> None:
    with Gradebook(f"sqlite:///{root / 'gradebook.db'}") as gradebook:
        for student, score in scores.items():
            gradebook.update_or_create_student(student)
            gradebook.add_submission(lab, student)
            gradebook.find_grade("exercise", lab, lab, student).auto_score = score
        gradebook.db.commit()


def _rows(path: Path) -> list[list[str]]:
    with open(path, newline="", encoding="utf-8") as handle:
        return list(csv.reader(handle))


@pytest.fixture
def graded(tmp_path, empty_gradebook):
    """A course where jane (Moodle), jdoe (Canvas) and alice (a plain folder) were graded."""
    root = tmp_path / "course"
    _gradebook(root, empty_gradebook)
    _record_scores(root, LAB, {"jane-doe-123456": 7, "doejohn-20001": 9.5, "alice": 10})
    remember_people(root, LAB, {"jane-doe-123456": Person("moodle", "123456", "Jane Doe", "jane@uni.edu"),
                                "doejohn-20001": Person("canvas", "20001", "doejohn", late=True)})
    return root


def test_remember_people_fills_the_gradebook(graded):
    with Gradebook(f"sqlite:///{graded / 'gradebook.db'}") as gradebook:
        jane, john = gradebook.find_student("jane-doe-123456"), gradebook.find_student("doejohn-20001")
        assert (jane.first_name, jane.last_name, jane.email) == ("Jane", "Doe", "jane@uni.edu")
        assert jane.lms_user_id is None  # Moodle's participant number changes with the assignment
        assert (john.last_name, john.lms_user_id) == ("doejohn", "20001")


def test_canvas_export_is_canvas_gradebook_csv(graded, tmp_path):
    done = export_grades(LAB, "canvas", tmp_path / "canvas.csv", root=graded, column="Lab 1 (4321)")
    rows = _rows(tmp_path / "canvas.csv")
    assert rows[0] == CANVAS_COLUMNS + ["Lab 1 (4321)"] == ["Student", "ID", "SIS User ID", "SIS Login ID",
                                                            "Section", "Lab 1 (4321)"]
    assert rows[1] == ["    Points Possible", "", "", "", "", "10"]
    assert rows[2:] == [["doejohn", "20001", "", "", "", "9.5"]]
    assert done.rows == 1
    assert sorted(done.left_out) == ["alice", "jane-doe-123456"]
    assert "named by moodle '123456', not by canvas" in done.left_out["jane-doe-123456"]


def test_moodle_export_is_moodle_grading_worksheet(graded, tmp_path):
    before = dt.datetime.now().replace(microsecond=0)
    done = export_grades(LAB, "moodle", tmp_path / "moodle.csv", root=graded, points=100)
    rows = _rows(tmp_path / "moodle.csv")
    assert rows[0] == MOODLE_COLUMNS == ["Identifier", "Full name", "Email address", "Status", "Grade",
                                         "Maximum Grade", "Grade can be changed", "Last modified (submission)",
                                         "Last modified (grade)"]
    (row,) = rows[1:]
    assert row[:8] == ["Participant 123456", "Jane Doe", "jane@uni.edu", "graded", "70", "100", "Yes", "-"]
    assert before <= dt.datetime.strptime(row[8], "%Y-%m-%d %H:%M:%S") <= dt.datetime.now()
    assert sorted(done.left_out) == ["alice", "doejohn-20001"]


def test_export_refuses_a_course_with_nothing_graded(tmp_path):
    with pytest.raises(ValueError, match="no gradebook"):
        export_grades(LAB, "canvas", root=tmp_path)


def _readme_walk() -> tuple[list[str], str]:
    """The commands of the instructor guide's "From an LMS download" walk, and its mapping file."""
    text = (REPO / "docs" / "instructor" / "running-a-class.md").read_text()
    section = text[text.index("From an LMS download\n"):]
    section = section[:next((m.start() for m in re.finditer(r"^#+ ", section, re.MULTILINE)), len(section))]
    commands = re.findall(r"^\$ (mlsys course .+)$", section, re.MULTILINE)
    mapping = re.search(r"```csv\n(.*?)```", section, re.DOTALL)[1]
    return commands, mapping


def test_readme_lms_walk_runs_as_written(tmp_path, monkeypatch, capsys, empty_gradebook):
    """Every command of the instructor guide's LMS walk, run as written; nbgrader's part of grading (tested
    in test_grading_batch.py) is replaced by a grader that reads each notebook's score off it."""
    root = tmp_path / "course"
    monkeypatch.setenv("MLSYS_COURSE_DIR", str(root))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(course, "prepare_gradebook", lambda lab, where: _gradebook(where, empty_gradebook))
    monkeypatch.setattr(course, "build_edition", lambda lab, dest: dest)
    monkeypatch.setattr(course, "sandbox_settings", lambda *args: {})
    monkeypatch.setattr(course, "probe", lambda settings: None)

    def grade_batch(lab, notebooks, where, **_):
        scores = {s: float(re.search(r'"score": (\d+)', p.read_text())[1]) for s, p in notebooks.items()}
        _record_scores(where, lab, scores)
        return BatchResult(graded=set(notebooks))

    monkeypatch.setattr(course, "grade_batch", grade_batch)
    _zip(tmp_path / "canvas.zip", {
        "doejohn_20001_9001_lab01_tensors.ipynb": '{"score": 9}',
        "doejohn_late_20002_9002_lab01_tensors-1.ipynb": '{"score": 4}',
        "mary_smith_lab01.ipynb": '{"score": 8}',
    })
    _zip(tmp_path / "moodle.zip", {"Jane Doe_123456_assignsubmission_file_/lab02_autodiff.ipynb": '{"score": 6}'})
    commands, mapping = _readme_walk()
    (tmp_path / "students.csv").write_text(mapping)
    outputs = []
    for command in commands:
        assert main(shlex.split(command)[2:]) == 0, command
        outputs.append(capsys.readouterr())
    assert len(commands) == 6
    assert "not graded: mary_smith_lab01.ipynb: whose submission" in outputs[0].out
    assert "mary_smith_lab01.ipynb" in outputs[1].out and "not graded" not in outputs[1].out
    canvas = {row[1]: row for row in _rows(tmp_path / "canvas_grades.csv")[2:]}
    assert {student_id: row[5] for student_id, row in canvas.items()} == {"20001": "9", "20002": "4"}
    assert "not exported: msmith: the LMS did not name this student" in outputs[3].err
    assert _rows(tmp_path / "moodle_grades.csv")[1][:5] == ["Participant 123456", "Jane Doe", "", "graded", "6"]

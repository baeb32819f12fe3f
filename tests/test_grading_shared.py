"""A class past one grader on one machine: the gradebook on a PostgreSQL server the teaching team shares,
and grading on a Dask cluster (``mlsys course grade --cluster``). The servers are real and local
(tests/services.py: a PostgreSQL cluster run by an unprivileged user, a ``dask scheduler`` and ``dask
worker`` processes), started and stopped here.

The oracle is the course's default: the same submissions graded once, for the whole module, by a local
process into the course folder's SQLite gradebook. Every other way must leave the same gradebook rows,
cell for cell. Lab 4 is graded, its notebook being the quickest to grade; its solution, one wrong answer
and its blank with a cell of the student's own that sleeps 6 s (handed in by student ``zero``, last in
the order of grading): three submissions, so that on two Dask workers one grades a second chunk, the blank, and is
killed in it.
"""

import os
import re
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import nbformat
import pytest
from nbgrader.api import Gradebook
from nbgrader.apps.api import NbGraderAPI
from nbgrader.coursedir import CourseDirectory

from autograder import course
from autograder.authoring import samples
from autograder.config import load_config, sandbox_settings
from autograder.paths import REPO
from autograder.run import cluster as cluster_module
from autograder.run.cluster import ClusterPool
from services import dask_cluster, free_port, postgres

pytestmark = pytest.mark.slow

LAB = "lab04_memory"


def quiet(message):
    pass


def gradebook_rows(url: str) -> dict[str, dict]:
    """student -> what the gradebook at ``url`` holds of their submission of the lab: timestamp, late
    penalty, each cell's scores, comments and flags (no database ids, no times of grading)."""
    with Gradebook(url) as gradebook:
        rows = {}
        for submission in gradebook.find_assignment(LAB).submissions:
            rows[submission.student.id] = {
                "timestamp": submission.timestamp, "penalty": submission.late_submission_penalty,
                "grades": sorted((g.notebook.name, g.name, g.auto_score, g.manual_score, g.extra_credit,
                                  g.needs_manual_grade) for nb in submission.notebooks for g in nb.grades),
                "comments": sorted((c.notebook.name, c.name, c.auto_comment, c.manual_comment)
                                   for nb in submission.notebooks for c in nb.comments),
                "flagged": sorted((nb.name, nb.flagged) for nb in submission.notebooks)}
    return rows


def sqlite(root: Path) -> str:
    return f"sqlite:///{root / 'gradebook.db'}"


@pytest.fixture(scope="module")
def local_run(tmp_path_factory):
    """The oracle: the submissions (``<folder>/subs``) graded by a local process, and the rows they left."""
    folder = tmp_path_factory.mktemp("shared")
    wrong = next(student for student, answer in samples.build_samples(LAB, folder / "subs", wrong=1).items()
                 if answer is not None)
    (folder / "subs" / "blank").rename(folder / "subs" / "zero")  # graded after the others (sorted by name)
    # a slow blank: a cell of the student's own that sleeps, so that the worker grading it is seen mid-chunk
    # (the untouched blank graded in about a second, between two looks of the Dask test's killer)
    zero = folder / "subs" / "zero" / f"{LAB}.ipynb"
    notebook = nbformat.read(zero, as_version=4)
    notebook.cells.append(nbformat.v4.new_code_cell("import time\ntime.sleep(6)"))
    nbformat.write(notebook, zero)
    results = course.grade(LAB, folder / "subs", root=folder / "local", workers=1, chunk_size=3, log=quiet)
    assert {r.student: r.status for r in results} == dict.fromkeys(["solution", wrong, "zero"], "graded")
    scores = {r.student: r.score for r in results}
    assert scores["solution"] == results[0].max_score > scores[wrong] > scores["zero"] == 0
    return folder, gradebook_rows(sqlite(folder / "local"))


# --- the shared gradebook ---------------------------------------------------------------------------


def course_folder(folder: Path, name: str, url: str) -> Path:
    """A grader's own course folder whose settings name the shared gradebook (as on their machine)."""
    root = folder / name
    root.mkdir()
    (root / "nbgrader_config.py").write_text(f"c.CourseDirectory.db_url = {url!r}\n")
    return root


def test_two_tas_grading_at_once_share_one_postgresql_gradebook(local_run):
    folder, oracle = local_run
    with postgres() as url:
        course.prepare_gradebook(LAB, course_folder(folder, "instructor", url))  # the instructor's release
        shares = {"ta1": ["solution"], "ta2": sorted(set(oracle) - {"solution"})}  # about as long each
        graders = []
        for ta, students in shares.items():
            for student in students:
                shutil.copytree(folder / "subs" / student, folder / f"{ta}-subs" / student)
            root = course_folder(folder, ta, url)
            graders.append(subprocess.Popen(  # `mlsys course grade` as a TA runs it, unchanged
                [sys.executable, "-m", "mlsys_lib.cli", "course", "grade", LAB, str(folder / f"{ta}-subs"),
                 "--course-dir", str(root), "--workers", "1"], cwd=REPO, stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT, text=True))
        for grader in graders:
            output = grader.communicate(timeout=600)[0]
            assert grader.returncode == 0, output
        assert gradebook_rows(url) == oracle
        assert not any((folder / ta / "gradebook.db").exists() for ta in shares)

        # Formgrader's API, on the instructor's course folder, reads what the two graders wrote
        coursedir = CourseDirectory(config=load_config(folder / "instructor"))
        api = NbGraderAPI(coursedir=coursedir, config=load_config(folder / "instructor"))
        listed = {s["student"]: s for s in api.get_submissions(LAB)}
        assert set(listed) == set(oracle)
        for student, row in oracle.items():
            assert listed[student]["score"] == pytest.approx(sum(g[2] or 0 for g in row["grades"]))
            assert listed[student]["max_score"] == api.get_assignment(LAB)["max_score"] > 0


# --- grading on a Dask cluster --------------------------------------------------------------------


@pytest.fixture
def cluster(tmp_path):
    with dask_cluster(tmp_path) as started:
        yield started


def kernel_started_by(pid: int) -> bool:
    """Whether a grading kernel's launcher runs in the session of process ``pid`` (its chunk is mid-grading)."""
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and os.getsid(int(entry.name)) == pid and \
                    b"autograder.sandbox" in (entry / "cmdline").read_bytes():
                return True
        except (OSError, ProcessLookupError):
            continue
    return False


#: A progress line of a student graded on a Dask worker: ``... [2/3] solution: graded (Dask worker w1)``.
GRADED_ON = re.compile(r"\] (?P<student>\S+): graded \(Dask worker (?P<worker>[^)]+)\)$")


def test_two_workers_one_killed_mid_chunk_grade_as_the_local_run(local_run, cluster):
    """Chunks of one student over two workers. The first worker seen grading a second chunk, after its
    first was merged, is killed with everything it started; Dask runs that chunk again on the other.
    Both workers' chunks are merged, each student once, into the rows the local run left."""
    folder, oracle = local_run
    cluster.add_worker("w1")
    cluster.add_worker("w2")
    graded_on: list[tuple[str, str]] = []  # (student, worker), in the order merged
    finished, killed = threading.Event(), []

    def log(line: str) -> None:
        if match := GRADED_ON.search(line):
            graded_on.append((match["student"], match["worker"]))

    def kill_a_worker_in_its_second_chunk():
        deadline = time.monotonic() + 300
        while not finished.is_set() and time.monotonic() < deadline:
            for name in dict.fromkeys(worker for _, worker in graded_on):
                if kernel_started_by(cluster.workers[name].pid):
                    cluster.kill(name)
                    killed.append((name, len(graded_on)))
                    return
            time.sleep(0.05)

    killer = threading.Thread(target=kill_a_worker_in_its_second_chunk)
    killer.start()
    try:
        results = course.grade(LAB, folder / "subs", root=folder / "on-dask", chunk_size=1,
                               cluster=cluster.address, log=log)
    finally:
        finished.set()
        killer.join()
    assert killed, f"no worker was seen grading after a chunk of its own was merged: {graded_on}"
    (victim, merged_before), = killed
    survivor = ({"w1", "w2"} - {victim}).pop()
    assert sorted(student for student, _ in graded_on) == sorted(oracle)  # each student merged once
    assert {worker for _, worker in graded_on} == {"w1", "w2"}  # the victim's first chunk was kept
    # the chunk it was killed in, and any after, graded by the other
    assert merged_before < len(oracle)
    assert [worker for _, worker in graded_on[merged_before:]] == [survivor] * (len(oracle) - merged_before)
    assert {r.student: r.status for r in results} == dict.fromkeys(oracle, "graded")
    assert gradebook_rows(sqlite(folder / "on-dask")) == oracle  # bit for bit as graded locally
    for student in oracle:
        assert (folder / "on-dask" / "feedback" / student / LAB / f"{LAB}.html").is_file()
    assert not (folder / "on-dask" / "work").exists()


def lab_sandbox() -> dict:
    return sandbox_settings(load_config(), LAB)


def test_a_worker_without_bubblewrap_refuses_to_grade(cluster):
    cluster.add_worker("no-bwrap", env={"PATH": str(Path(sys.executable).parent)})  # bwrap is in /usr/bin
    heard = []
    with pytest.raises(RuntimeError, match="no Dask worker .* may grade") as error:
        ClusterPool(cluster.address, LAB, lab_sandbox(), log=heard.append)
    assert "nothing was graded" in str(error.value)
    assert any("no-bwrap" in line and "bubblewrap (bwrap) is not installed" in line for line in heard), heard


def test_an_unreachable_scheduler_is_a_clear_error_not_a_hang(monkeypatch):
    monkeypatch.setattr(cluster_module, "CONNECT_TIMEOUT_S", 3)
    address = f"tcp://127.0.0.1:{free_port()}"
    start = time.monotonic()
    with pytest.raises(RuntimeError, match=f"cannot reach the Dask scheduler at '{address}' within 3 s"):
        ClusterPool(address, LAB, lab_sandbox())
    assert time.monotonic() - start < 15


def test_a_cluster_left_without_workers_fails_the_chunk_not_hangs(cluster, monkeypatch, tmp_path):
    """The one worker dies before its chunk runs: the chunk fails with the reason once no worker has
    been back for WORKERLESS_TIMEOUT_S, instead of Dask keeping it waiting for a worker for ever."""
    monkeypatch.setattr(cluster_module, "WORKERLESS_TIMEOUT_S", 3)
    cluster.add_worker("only")
    pool = ClusterPool(cluster.address, LAB, lab_sandbox(), log=quiet)
    try:
        cluster.kill("only")
        (tmp_path / "template").mkdir()
        (tmp_path / "incoming" / "s1").mkdir(parents=True)
        (tmp_path / "incoming" / "s1" / f"{LAB}.ipynb").write_text("{}")
        start = time.monotonic()
        chunk = pool.submit(len, LAB, {"s1": tmp_path / "incoming" / "s1" / f"{LAB}.ipynb"},
                            tmp_path / "template", tmp_path / "work", lab_sandbox())
        with pytest.raises(RuntimeError, match=f"no Dask worker that may grade {LAB} has been in the cluster for 3 s"):
            chunk.result(timeout=60)
        assert time.monotonic() - start < 30
    finally:
        pool.shutdown()

"""Grading survives a hostile class: the adversarial corpus, graded in one batch with honest students.

Slow: every submission runs in a real sandboxed kernel. Besides each attack's own outcome, the batch
must leave every file outside the course's output unchanged (hashed before and after), keep the
gradebook's definition of the lab intact, and no page or notebook it writes may show a hidden test,
a secret of the grading machine, or live script.
"""

import copy
import hashlib
import html.parser
import json
import shutil
import socket
import sqlite3
import sysconfig
import threading
from pathlib import Path

import nbformat
import pytest

from adversarial_corpus import (CASES, CELL_TIMEOUT_S, HONEST, LAB, MEMORY_MB, SECRET, WALL_SECONDS, Context,
                                stopped_tests, write_case)
from autograder import course
from autograder.cells import fill, solution_cells
from autograder.paths import LABS, REPO, SOLUTIONS
from feedback_check import leaked_lines

pytestmark = pytest.mark.slow

SANDBOX = shutil.which("bwrap") is not None
#: The test course: low limits (see adversarial_corpus), output waited for 10 s after a cell's reply
#: (a cell that ignores the interrupt costs the cell timeout plus this). Processes and threads at the
#: defaults (c.Sandbox.processes, c.Sandbox.threads), as a class is graded.
SETTINGS = f"""
c = get_config()
c.merge(__import__("autograder.config").config.course_config())
c.Execute.timeout = {CELL_TIMEOUT_S}
c.Execute.iopub_timeout = 10
c.Sandbox.memory_mb = {MEMORY_MB}
c.Sandbox.cpu_seconds = 120
c.Sandbox.wall_seconds = {WALL_SECONDS}
c.Sandbox.disk_mb = 64
c.Sandbox.output_kb = 2048
"""
#: An honest notebook doing ordinary things the kernel guard must not flag.
HONEST_EXTRAS = [
    ("markdown", "My notes: $a < b$ and `x -> y`, <b>bold</b>, a [link](https://example.org)."),
    ("code", "import warnings, inspect, dataclasses, functools, collections\nimport matplotlib.pyplot as plt\n"
             "from numba import njit\n@njit\ndef twice(x):\n    return 2 * x\n"
             "@dataclasses.dataclass\nclass Point:\n    x: int\n    y: int\n"
             "Pair = collections.namedtuple('Pair', 'a b')\n@functools.lru_cache\ndef fib(n):\n"
             "    return n if n < 2 else fib(n - 1) + fib(n - 2)\n"
             "warnings.warn('just a warning')\nprint(twice(21), Point(1, 2), Pair(1, 2), fib(20), inspect.signature(fib))\n"
             "plt.plot([1, 2, 3])\nplt.show()\ntry:\n    1 / 0\nexcept ZeroDivisionError as error:\n    print('caught', error)\n"),
]


@pytest.fixture(scope="module")
def loopback_port():
    """A server on 127.0.0.1 that a sandboxed kernel must not be able to reach."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    thread = threading.Thread(target=lambda: [server.accept()[0].close() for _ in iter(int, 1)], daemon=True)
    thread.start()
    yield server.getsockname()[1]
    server.close()


def _digest_tree(folder: Path, content: bool = True) -> dict[str, str]:
    """path -> digest of every file below ``folder`` (content, or size and mtime for big trees)."""
    digests = {}
    for path in sorted(folder.rglob("*")):
        if path.is_symlink() or not path.is_file() or "__pycache__" in path.parts:
            continue
        if content:
            digests[str(path)] = hashlib.sha256(path.read_bytes()).hexdigest()
        else:
            status = path.stat()
            digests[str(path)] = f"{status.st_size}:{status.st_mtime_ns}"
    return digests


def protected_state(*extra: Path) -> dict[str, str]:
    """What no submission may change: the repository's code and labs, the environment, the honeypots."""
    state = {}
    for part in ("mlsys_lib", "autograder", "solutions", "labs", "tests"):
        state |= _digest_tree(REPO / part)
    state |= _digest_tree(Path(sysconfig.get_paths()["purelib"]), content=False)
    for path in extra:
        state |= _digest_tree(path) if path.is_dir() else {str(path): hashlib.sha256(path.read_bytes()).hexdigest()}
    return state


def lab_definition(gradebook: Path) -> list:
    """The gradebook's record of the lab (cells, points, sources, checksums), not of any submission."""
    with sqlite3.connect(gradebook) as db:
        assert db.execute("pragma integrity_check").fetchone() == ("ok",)
        rows = []
        for table in ("assignment", "notebook", "grade_cells", "solution_cells", "source_cells", "task_cells", "base_cells"):
            try:
                rows.append(sorted(map(repr, db.execute(f"select * from {table}").fetchall())))
            except sqlite3.OperationalError:
                continue
    return rows


@pytest.fixture(scope="module")
def graded(tmp_path_factory, loopback_port):
    tmp = tmp_path_factory.mktemp("adversarial")
    settings = tmp / "settings.py"
    settings.write_text(SETTINGS)
    root, folder = tmp / "course", tmp / "submissions"
    home = tmp / "home"
    home.mkdir()
    (home / ".secret").write_text(SECRET)
    (home / ".secret").chmod(0o600)
    stale = tmp / "repository" / ".course"
    solved = fill(nbformat.read(LABS / LAB / f"{LAB}.ipynb", as_version=4), solution_cells(LAB))
    (stale / "submitted" / "victim" / LAB).mkdir(parents=True)
    nbformat.write(solved, stale / "submitted" / "victim" / LAB / f"{LAB}.ipynb")
    ctx = Context(solutions=str(SOLUTIONS), course_root=str(root), loopback_port=loopback_port,
                  submissions=str(folder), library=str(REPO / "mlsys_lib"), home_secret=str(home / ".secret"),
                  stale_course=str(stale))

    honest = copy.deepcopy(solved)
    for kind, source in HONEST_EXTRAS:
        honest.cells.append(nbformat.v4.new_markdown_cell(source) if kind == "markdown"
                            else nbformat.v4.new_code_cell(source))
    for student, notebook in zip(HONEST, [honest, solved], strict=True):
        _path(folder, student).parent.mkdir(parents=True)
        nbformat.write(notebook, _path(folder, student))
    blank = nbformat.read(LABS / LAB / f"{LAB}.ipynb", as_version=4)
    _path(folder, "blank").parent.mkdir(parents=True)
    nbformat.write(blank, _path(folder, "blank"))
    for case in CASES:
        write_case(case, solved, ctx, _path(folder, case.name))

    course.prepare_gradebook(LAB, root)
    definition = lab_definition(root / "gradebook.db")
    before = protected_state(home / ".secret", stale)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("MLSYS_CONFIG", str(settings))
        patch.setenv("HOME", str(home))
        patch.setenv(ctx.secret_env, SECRET)
        results = course.grade(LAB, folder, root=root, log=lambda message: None)
    return {"results": {r.student: r for r in results}, "root": root, "solved": solved,
            "before": before, "after": protected_state(home / ".secret", stale), "definition": definition}


class _ActiveContent(html.parser.HTMLParser):
    """Collects what would run in a browser: event handlers, script URLs, scripts of the payloads."""

    DANGEROUS_TAGS = {"iframe", "object", "embed", "base", "form"}

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.found, self.in_script = [], False

    def handle_starttag(self, tag, attrs):
        if tag in self.DANGEROUS_TAGS or (tag == "meta" and any(k == "http-equiv" for k, _ in attrs)):
            self.found.append(f"<{tag}>")
        for name, value in attrs:
            squeezed = "".join((value or "").split()).lower()
            if name.startswith("on") or squeezed.startswith(("javascript:", "vbscript:", "data:text/html")):
                self.found.append(f"<{tag} {name}={value!r}>")
        self.in_script = tag == "script"

    def handle_data(self, data):
        if self.in_script and "alert(" in data:
            self.found.append(f"<script>{data[:60]}")

    def handle_endtag(self, tag):
        self.in_script = False


def active_content(text: str) -> list[str]:
    """Script a browser would run in ``text`` (an HTML page, or a notebook's JSON: its HTML and
    Markdown are checked, and any JavaScript or SVG output counts)."""
    if text.lstrip().startswith("{"):
        notebook = json.loads(text)
        found = []
        for cell in notebook["cells"]:
            sources = ["".join(cell["source"])] if cell["cell_type"] == "markdown" else []
            for output in cell.get("outputs", []):
                data = output.get("data", {})
                found += [f"{kind} output" for kind in ("application/javascript", "image/svg+xml") if kind in data]
                sources.append("".join(data.get("text/html", "")))
            for source in sources:
                found += active_content(source)
        return found
    parser = _ActiveContent()
    parser.feed(text)
    return parser.found


def _path(folder, student):
    return folder / student / f"{LAB}.ipynb"


def test_honest_students_score_full_marks_unflagged(graded):
    results = graded["results"]
    for student in HONEST:
        result = results[student]
        assert result.score == result.max_score > 0 and result.status == "graded", (student, result.status)
    assert results["blank"].score == 0 and results["blank"].status == "graded"


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_each_attack_gets_its_outcome(case, graded):
    if case.needs_sandbox and not SANDBOX:
        pytest.skip("bubblewrap is not installed: files and network are not isolated")
    result = graded["results"][case.name]
    lost = {name for name, (score, maximum) in result.exercises.items() if score < maximum}
    if case.zero_because:
        assert result.score == 0 and case.zero_because in result.status, result
        return
    expected_lost = set(case.loses) | set(stopped_tests(case.loses_from, graded["solved"]) if case.loses_from else [])
    if case.full:
        assert result.score == result.max_score, (result.status, sorted(lost))
    if case.shows:
        autograded = graded["root"] / "autograded" / case.name / LAB / f"{LAB}.ipynb"
        assert case.shows in autograded.read_text(), f"the autograded notebook does not say {case.shows!r}"
    if expected_lost:
        assert lost == expected_lost, (result.status, sorted(lost))
    if case.flagged:
        assert result.status.startswith("flagged") and case.flagged in result.status, result.status
    elif case.flag_optional and result.status.startswith("flagged"):
        assert "stopped the kernel" in result.status, result.status
    else:
        assert result.status == "graded", result.status


def test_nothing_outside_the_course_output_changed(graded):
    before, after = graded["before"], graded["after"]
    changed = sorted(path for path in before.keys() | after.keys() if before.get(path) != after.get(path))
    assert changed == [], f"files changed by grading: {changed[:10]}"


def test_gradebook_keeps_the_lab_and_every_score(graded):
    root, results = graded["root"], graded["results"]
    assert lab_definition(root / "gradebook.db") == graded["definition"]
    with sqlite3.connect(root / "gradebook.db") as db:
        top = db.execute("select max(auto_score) from grade").fetchone()[0]
    assert top <= 2, "a score above any test's points was written into the gradebook"
    assert all(r.score <= r.max_score for r in results.values())


def test_course_folder_holds_only_bounded_output(graded):
    root = graded["root"]
    total = sum(p.stat().st_size for p in root.rglob("*") if p.is_file() and not p.is_symlink())
    assert total < 150 * 2**20, f"the course folder holds {total / 2**20:.0f} MiB after the batch"
    assert not [p for p in root.rglob("*") if p.is_symlink()], "links in the course folder"


def test_feedback_and_autograded_notebooks_are_safe_to_open(graded):
    root, results = graded["root"], graded["results"]
    for student, result in results.items():
        page = root / "feedback" / student / LAB / f"{LAB}.html"
        graded_copy = root / "autograded" / student / LAB / f"{LAB}.ipynb"
        if not page.exists():
            assert result.status != "graded", f"{student} was graded but has no feedback"
            continue
        text = page.read_text()
        assert page.stat().st_size < 5_000_000, f"feedback of {student} is {page.stat().st_size} bytes"
        assert not leaked_lines(text, LAB), f"feedback of {student} shows hidden tests"
        assert SECRET not in text, f"feedback of {student} shows a secret of the grading machine"
        assert not active_content(text), f"feedback of {student} runs script: {active_content(text)[:3]}"
        notebook = graded_copy.read_text()
        assert SECRET not in notebook, f"the autograded notebook of {student} holds a secret"
        assert not active_content(notebook), f"the autograded notebook of {student} holds script"


def test_no_secret_anywhere_in_the_course_folder(graded):
    for path in graded["root"].rglob("*"):
        if path.is_file() and not path.is_symlink():
            assert SECRET.encode() not in path.read_bytes(), f"{path} holds a secret of the grading machine"

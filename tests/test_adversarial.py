"""Grading survives real students: the adversarial corpus, graded in one batch with honest students.

Slow: every submission runs in a real sandboxed kernel.
"""

import shutil
import socket
import threading

import nbformat
import pytest

from adversarial_corpus import CASES, LAB, Context, write_case
from autograder import course, samples
from autograder.paths import LABS, SOLUTIONS
from feedback_check import leaked_lines

pytestmark = pytest.mark.slow

SANDBOX = shutil.which("bwrap") is not None
SETTINGS = """
c = get_config()
c.merge(__import__("autograder.config").config.course_config())
c.Execute.timeout = 20
c.Sandbox.memory_mb = 3072
c.Sandbox.cpu_seconds = 120
"""


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


@pytest.fixture(scope="module")
def graded(tmp_path_factory, loopback_port):
    tmp = tmp_path_factory.mktemp("adversarial")
    settings = tmp / "settings.py"
    settings.write_text(SETTINGS)
    root, folder = tmp / "course", tmp / "submissions"
    ctx = Context(solutions=str(SOLUTIONS), course_root=str(root), loopback_port=loopback_port)
    solved = samples.fill(nbformat.read(LABS / LAB / f"{LAB}.ipynb", as_version=4), samples.solution_cells(LAB))
    nbformat.write(solved, _path(folder, "solution"))
    nbformat.write(nbformat.read(LABS / LAB / f"{LAB}.ipynb", as_version=4), _path(folder, "blank"))
    for case in CASES:
        write_case(case, solved, ctx, _path(folder, case.name))
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("MLSYS_CONFIG", str(settings))
        results = course.grade(LAB, folder, root=root, log=lambda message: None)
    return {r.student: r for r in results}, root


def _path(folder, student):
    (folder / student).mkdir(parents=True, exist_ok=True)
    return folder / student / f"{LAB}.ipynb"


def test_honest_students_are_untouched(graded):
    results, _ = graded
    assert results["solution"].score == results["solution"].max_score > 0 and results["solution"].status == "graded"
    assert results["blank"].score == 0 and results["blank"].status == "graded"


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_each_attack_gets_its_outcome(case, graded):
    if case.needs_sandbox and not SANDBOX:
        pytest.skip("bubblewrap is not installed: files and network are not isolated")
    results, _ = graded
    result = results[case.name]
    lost = {name for name, (score, maximum) in result.exercises.items() if score < maximum}
    if case.zero_because:
        assert result.score == 0 and case.zero_because in result.status, result
        return
    if case.full:
        assert result.score == result.max_score, (result.status, sorted(lost))
    if case.loses:
        assert lost == set(case.loses), (result.status, sorted(lost))
    if case.flagged:
        assert result.status.startswith("flagged") and case.flagged in result.status, result.status
    elif case.flag_optional and result.status.startswith("flagged"):
        assert "stopped the kernel" in result.status, result.status
    else:
        assert result.status == "graded", result.status


def test_feedback_never_shows_hidden_tests(graded):
    results, root = graded
    for student, result in results.items():
        page = root / "feedback" / student / LAB / f"{LAB}.html"
        if not page.exists():
            assert result.status != "graded", f"{student} was graded but has no feedback"
            continue
        assert page.stat().st_size < 5_000_000, f"feedback of {student} is {page.stat().st_size} bytes"
        assert not leaked_lines(page.read_text(), LAB), f"feedback of {student} shows hidden tests"

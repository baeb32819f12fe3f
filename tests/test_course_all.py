"""``mlsys course all`` (``make course``): its summary waits on each lab's fixtures without holding up the grading."""

from concurrent.futures import Future

from autograder.cli import LabLines


def _done(verdicts, seconds=1.0) -> Future:
    future = Future()
    future.set_result((verdicts, seconds))
    return future


def test_lab_lines_keep_lab_order_and_print_a_lab_only_once_its_fixtures_are_checked(capsys):
    slow, fast = Future(), _done([("off_by_one", [])])
    lines = LabLines({"lab01": slow, "lab02": fast})
    lines.graded("lab01", [(True, "  ok   solution"), (True, "  ok   blank")], "2 through nbgrader 5 s")
    lines.print_ready()
    lines.graded("lab02", [(True, "  ok   solution")], "1 through nbgrader 4 s")
    lines.print_ready()
    assert capsys.readouterr().out == "", "lab01's fixtures are still being checked: nothing may be printed yet"
    slow.set_result(([("wrong_stride", ["lost nothing, must lose test_a"]), ("swapped", [])], 7.0))
    lines.print_ready()
    out = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in out if line.startswith("lab")] == ["lab01", "lab02"]
    assert "3/4 samples scored as they must, 1 FAIL" in out[0], out
    assert "2 by forking 7 s" in out[0]
    assert any("FAIL wrong_wrong_stride" in line and "must lose test_a" in line for line in out), out
    assert not any("swapped" in line for line in out), "a passing sample's line is shown only with -v"
    assert "2/2 samples scored as they must (1 through nbgrader 4 s, 1 by forking 1 s)" in out[-1]
    assert lines.ok is False


def test_lab_lines_wait_for_the_last_fixtures_and_a_lab_without_fixtures_needs_none(capsys):
    pending = Future()
    lines = LabLines({"lab01": pending}, verbose=True)
    lines.graded("lab00", [(True, "  ok   solution")], "1 through nbgrader 3 s")
    lines.graded("lab01", [(True, "  ok   solution")], "1 through nbgrader 3 s")
    lines.print_ready()
    assert capsys.readouterr().out.startswith("lab00"), "lab00 checks no fixtures: printed at once"
    pending.set_result(([("late", [])], 2.0))
    lines.print_ready(wait=True)
    out = capsys.readouterr().out
    assert "lab01" in out and "ok   wrong_late" in out and lines.ok is True and not lines.waiting

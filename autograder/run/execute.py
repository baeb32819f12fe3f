"""nbgrader's Execute step as the course grades: bounded in time and output, and reporting what it saw.

:class:`SandboxedExecute` replaces nbgrader's ``Execute`` in the Autograde preprocessors. Over
nbgrader's own it

* gives the whole notebook a wall-clock budget (``c.Sandbox.wall_seconds``, kernel start included,
  shared by all of one student's grading attempts: the grader passes what earlier attempts left as
  ``wall_left``): each cell may run at most what is left, and once nothing is left the remaining
  code cells are not sent to the kernel but fail with ``NotebookTimeout`` (their tests score 0), so
  a notebook that sleeps cannot hold a worker; the seconds each attempt took are noted for the grader;
* when a limit stops the kernel (its CPU time, the supervisor's wall-clock backstop, or the sandbox's
  process budget: a fork bomb), fails that cell with the limit's reason and does not run the cells after
  it, rather than failing the whole notebook: the notebook is graded once, as far as it got, and not
  graded again (running it again would hit the limit again);
* keeps at most ``c.Sandbox.output_kb`` of output per notebook (errors are always kept, their
  tracebacks shortened), so printing cannot exhaust the grader's memory or the feedback's size;
* gives no partial credit from a graded test cell's ``execute_result`` (nbgrader would read a number
  shown there as the cell's score, and code the test calls can show one), and takes no point for
  what a test cell wrote to stderr (nbgrader would score it 0: a warning of the answer's numpy or
  Numba, or a stack it printed, is not a failed test; the text stays, as stdout);
* when a cell does not stop at the grader's interrupt (it ignores ``KeyboardInterrupt``), fails it
  and does not run the cells after it, rather than failing the whole notebook;
* when a cell kills the kernel otherwise, writes that cell's index to ``$MLSYS_KILLER_CELL`` so the
  grader can skip the cell and grade again (see :func:`autograder.run.batch.grade_one`);
* after the notebook, reads what the kernel guard and the sandbox supervisor reported (see
  :mod:`autograder.sandbox.kernel` and :mod:`autograder.sandbox.sandbox`) and writes the reasons to
  look at the submission again to ``$MLSYS_GRADING_NOTES/<student>.json`` (and to nbgrader's log).

The course tool passes the sandbox settings in ``$MLSYS_SANDBOX``. When nbgrader runs on its own
(``nbgrader autograde``, Formgrader's *Autograde* button) nobody does, so this step makes them for
the lab being graded (:func:`plain_settings`): every autograde runs on the sandboxed kernel, with
the lab's grading edition, whoever starts it.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import signal
import time
from pathlib import Path
from typing import Iterator

from nbclient.exceptions import CellTimeoutError, DeadKernelError
from nbformat import NotebookNode
from nbgrader.preprocessors import Execute

from ..config import cell_digest, sandbox_settings
from ..edition.edition import build_edition
from ..paths import course_dir
from ..sandbox.sandbox import SETTINGS_ENV, console_path, report_path

KILLER_ENV = "MLSYS_KILLER_CELL"
NOTES_ENV = "MLSYS_GRADING_NOTES"
#: Lines and characters per line kept of an error's traceback.
TRACEBACK_LINES, LINE_CHARS = 60, 2000


def is_test_cell(cell) -> bool:
    """A graded cell that is not an answer: nbgrader scores it by whether it raised."""
    meta = cell.get("metadata", {}).get("nbgrader", {})
    return cell.cell_type == "code" and bool(meta.get("grade")) and not meta.get("solution")


def _error(ename: str, evalue: str) -> NotebookNode:
    return NotebookNode(output_type="error", ename=ename, evalue=evalue, traceback=[f"{ename}: {evalue}"])


@functools.lru_cache(maxsize=None)
def _plain_settings(root: str, lab: str, config_json: str) -> str:
    from traitlets.config import Config

    edition = build_edition(lab, Path(root) / "editions" / lab)
    return json.dumps(sandbox_settings(Config(json.loads(config_json)), lab, edition))


def plain_settings(config, lab: str) -> str:
    """The sandbox settings (JSON) for grading ``lab`` under ``config`` when nbgrader runs on its own:
    its ``c.Sandbox`` limits and the lab's grading edition, built under the course root."""
    root = str(Path(config.CourseDirectory.root or course_dir()).resolve())
    sandbox = {"Sandbox": dict(config.Sandbox)} if "Sandbox" in config else {}
    return _plain_settings(root, lab, json.dumps(sandbox, sort_keys=True))


@contextlib.contextmanager
def _environment(name: str, value: str) -> Iterator[None]:
    saved = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = saved


class SandboxedExecute(Execute):
    """nbgrader's Execute with a notebook time budget, an output budget and the kernel's reports."""

    def preprocess(self, nb, resources=None, km=None):
        if os.environ.get(SETTINGS_ENV):
            return self._preprocess(nb, resources, km)
        lab = (resources or {}).get("nbgrader", {}).get("assignment")
        if not lab:
            raise ValueError("SandboxedExecute grades an assignment: nbgrader gave no assignment id")
        with _environment(SETTINGS_ENV, plain_settings(self.config, lab)):
            return self._preprocess(nb, resources, km)

    def _preprocess(self, nb, resources, km):
        settings = json.loads(os.environ.get(SETTINGS_ENV) or "{}")
        budget = settings.get("wall_seconds")
        started = time.monotonic()
        self._deadline = started + settings.get("wall_left", budget) if budget else None
        self._budget = budget
        self._settings = settings
        self._output_left = settings.get("output_kb", 0) * 1024 or None
        self._dropped: set[int] = set()
        self._connection_file: str | None = None
        self._stopped: NotebookNode | None = None  # the error of the cells not run: the kernel is busy or gone
        self._notes = {"flags": []}
        student = (resources or {}).get("nbgrader", {}).get("student")
        try:
            return super().preprocess(nb, resources, km)
        finally:
            if self._connection_file and settings:
                report = report_path(Path(self._connection_file))
                self._notes["flags"] += kernel_flags(report, self.nb)
                for left in (report, console_path(Path(self._connection_file))):  # beside the connection
                    left.unlink(missing_ok=True)  # file, in the system's temporary folder
            self._notes["seconds"] = time.monotonic() - started
            if student and os.environ.get(NOTES_ENV):
                write_notes(Path(os.environ[NOTES_ENV]), student, self._notes)
            for flag in self._notes["flags"]:
                self.log.warning("look again at %s's submission: %s", student, flag)

    def preprocess_cell(self, cell, resources, index):
        if self._connection_file is None and self.km is not None:
            self._connection_file = self.km.connection_file
        if cell.cell_type != "code" or not cell.source.strip():
            return super().preprocess_cell(cell, resources, index)
        if self._stopped is not None:
            cell.outputs = [self._stopped]
            return cell, resources
        if self._deadline is not None and time.monotonic() >= self._deadline:
            cell.outputs = [_error("NotebookTimeout", f"not run: the notebook used all of its {self._budget} s "
                                                      "(all its grading attempts together)")]
            if not any("wall-clock" in flag for flag in self._notes["flags"]):
                self._notes["flags"].append(f"cell {index} and those after it were not run: the notebook "
                                            f"used all of its {self._budget} s of wall-clock time")
            return cell, resources
        try:
            cell, resources = super().preprocess_cell(cell, resources, index)
        except DeadKernelError:
            limit = self._limit_reached()
            if limit:
                cell.outputs.append(_error("LimitExceeded", f"the grader stopped the kernel: {limit}"))
                self._stopped = _error("NotebookTimeout",
                                       f"not run: the grader stopped the kernel in cell {index}: {limit}")
                self._notes["flags"].append(f"cell {index} was stopped by {limit}: the cells after it were not "
                                            "run, and the notebook was not graded again")
                return cell, resources
            if os.environ.get(KILLER_ENV):
                Path(os.environ[KILLER_ENV]).write_text(str(index))
            raise
        except CellTimeoutError:  # interrupted at its timeout, and still busy afterwards
            self._stopped = _error("NotebookTimeout", f"not run: cell {index} did not stop when interrupted")
            cell.outputs.append(_error("CellTimeoutError", "the cell did not stop when the grader interrupted it"))
            self._notes["flags"].append(f"cell {index} ignored the grader's interrupt: the cells after it were not run")
            return cell, resources
        if is_test_cell(cell):
            kept = [o for o in cell.outputs if o.get("output_type") != "execute_result"]
            for output in kept:
                if output.get("output_type") == "stream" and output.get("name") == "stderr":
                    output["name"] = "stdout"
            cell.outputs = kept
        return cell, resources

    def _limit_reached(self) -> str | None:
        """What stopped the kernel, from its supervisor's report: a limit it reported (a fork bomb), the
        wall clock, or the CPU time (a kernel over its CPU seconds gets SIGXCPU, see
        :mod:`autograder.sandbox.kernel.start`, which bubblewrap reports as exit status 128 + SIGXCPU);
        None if nothing says one did (a cell that killed the kernel itself)."""
        if not self._connection_file:
            return None
        for event in _events(report_path(Path(self._connection_file))):
            if event.get("event") == "limit" and event.get("by") == "supervisor":
                return str(event.get("what", "a limit"))[:200]
            if event.get("event") == "wall_clock" and event.get("by") == "supervisor":
                return f"the notebook's wall-clock limit ({self._budget} s)"
            if event.get("event") == "exit" and event.get("status") in (128 + signal.SIGXCPU, -signal.SIGXCPU):
                return f"the notebook's CPU-time limit ({self._settings.get('cpu_seconds')} s)"
        return None

    def _get_timeout(self, cell):
        timeout = super()._get_timeout(cell)
        if self._deadline is None:
            return timeout
        left = max(1, int(self._deadline - time.monotonic()))
        return min(timeout, left) if timeout else left

    def output(self, outs, msg, display_id, cell_index):
        if msg["msg_type"] == "error":
            content = msg["content"]
            content["evalue"] = str(content.get("evalue", ""))[:LINE_CHARS]
            content["traceback"] = [line[:LINE_CHARS] for line in content.get("traceback", [])[-TRACEBACK_LINES:]]
            return super().output(outs, msg, display_id, cell_index)
        if self._output_left is None:
            return super().output(outs, msg, display_id, cell_index)
        size = len(json.dumps(msg["content"]))
        if size > self._output_left:
            if cell_index not in self._dropped:
                self._dropped.add(cell_index)
                outs.append(NotebookNode(output_type="stream", name="stdout",
                                         text="[output dropped by the grader: the notebook's output limit was reached]\n"))
            return None
        self._output_left -= size
        return super().output(outs, msg, display_id, cell_index)


def write_notes(folder: Path, student: str, notes: dict) -> None:
    """Add ``notes`` (``flags``, and the ``seconds`` a grading attempt took) to what the grader noted
    about ``student`` in ``folder`` (one JSON file each): flags once each, seconds summed."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{student}.json"
    old = json.loads(path.read_text()) if path.exists() else {"flags": []}
    path.write_text(json.dumps({"flags": old["flags"] + [f for f in notes["flags"] if f not in old["flags"]],
                                "seconds": old.get("seconds", 0) + notes.get("seconds", 0)}))


def read_notes(folder: Path, student: str) -> list[str]:
    """The reasons to look again at ``student``'s submission that :class:`SandboxedExecute` noted."""
    path = folder / f"{student}.json"
    return json.loads(path.read_text())["flags"] if path.exists() else []


def spent_seconds(folder: Path, student: str) -> float:
    """Wall-clock seconds :class:`SandboxedExecute` noted for ``student``'s grading attempts in ``folder``."""
    path = folder / f"{student}.json"
    return json.loads(path.read_text()).get("seconds", 0) if path.exists() else 0


def _events(report: Path) -> list[dict]:
    events = []
    for line in report.read_text(errors="replace").splitlines() if report.exists() else []:
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if isinstance(event, dict):
            events.append(event)
    return events


def kernel_flags(report: Path, nb) -> list[str]:
    """Reasons to look again, from the kernel guard's and the supervisor's reports on ``nb``'s run.

    Besides what the guard flagged, a graded test cell that the kernel answered without compiling
    it (the shell was tampered with) is flagged, and so is a report channel closed by the notebook.
    """
    events = _events(report)
    cell_of = {cell.get("execution_count"): index for index, cell in enumerate(nb.cells)
               if cell.cell_type == "code" and cell.get("execution_count")}
    flags = []

    def where(event):
        index = cell_of.get(event.get("count"))
        place = f"cell {index}" if index is not None else "the notebook"
        return place + (f" line {event['line']}" if isinstance(event.get("line"), int) else "")

    by_guard = [e for e in events if e.get("by") != "supervisor"]
    if not any(e.get("event") == "ready" for e in by_guard):
        flags.append("the grader's kernel guard did not report: the kernel's integrity is unknown")
    for event in events:
        kind = event.get("event")
        if kind == "flag":
            flags.append(f"{where(event)}: {str(event.get('what', ''))[:200]}")
        elif kind == "closed":
            flags.append("the notebook closed the grader's report channel")
        elif kind == "wall_clock":
            flags.append("the kernel was killed at the notebook's wall-clock limit")
        elif kind == "limit":
            flags.append(f"the grader stopped the kernel: {str(event.get('what', ''))[:200]}")
        elif kind == "truncated":
            flags.append("the kernel reported more than the grader keeps (report truncated)")
    if not any(e.get("event") == "exit" for e in events):
        flags.append("the kernel did not end cleanly (its supervisor reported no exit)")
    compiled = {e.get("sha") for e in by_guard if e.get("event") == "cell" and e.get("test")}
    complete = any(e.get("event") == "exit" for e in events) and not any(
        e.get("event") in ("closed", "truncated", "wall_clock", "limit") for e in events)
    if complete:
        for index, cell in enumerate(nb.cells):
            ran = cell.get("execution_count") and not any(o.get("ename") == "NotebookTimeout" for o in cell.get("outputs", []))
            if is_test_cell(cell) and ran and cell_digest(cell.source) not in compiled:
                flags.append(f"cell {index}: the test cell was answered without being run (the kernel was tampered with)")
    return list(dict.fromkeys(flags))

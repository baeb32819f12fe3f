"""The instructor's workflow: release, check, grade (collect, autograde, feedback, report)."""

from __future__ import annotations

import datetime as dt
import json
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import nbformat
from nbgrader.converters import Autograde, GenerateAssignment, GenerateFeedback

from . import samples
from .nbgrader_run import require_success, run_converter, validate
from .paths import LABS, SOLUTIONS, check_lab, course_dir, lab_names
from .report import StudentResult, read_results, write_reports
from .sanitize import UnreadableSubmission, demote_duplicate_cells, read_submission
from .submissions import find_submissions

SECRET_MARKERS = ("BEGIN SOLUTION", "END SOLUTION", "BEGIN HIDDEN TESTS", "END HIDDEN TESTS")


def release(labs: list[str] | None = None, *, release_dir: Path = LABS, root: Path | None = None) -> list[Path]:
    """Regenerate the student release of ``labs`` (default: all) from ``solutions/``.

    Returns the released notebooks. Raises if nbgrader fails or if secret text survived.
    """
    root = Path(root or course_dir())
    released = []
    for lab in labs or lab_names():
        check_lab(lab)
        require_success(run_converter(GenerateAssignment, lab, ".", root=root, release_dir=release_dir),
                        f"nbgrader generate_assignment {lab}")
        for notebook in sorted((Path(release_dir) / lab).glob("*.ipynb")):
            leaked = [m for m in SECRET_MARKERS if m in notebook.read_text()]
            if leaked:
                raise RuntimeError(f"{notebook} still contains {', '.join(leaked)}")
            released.append(notebook)
    return released


@dataclass
class CheckResult:
    """Outcome of :func:`check` for one notebook."""

    notebook: Path
    ok: bool
    detail: str


def check(labs: list[str] | None = None, *, root: Path | None = None) -> list[CheckResult]:
    """Every solution notebook passes all its tests; no graded test passes on the released one.

    The release is checked as the autograder sees it: with its hidden tests put back.
    """
    root = Path(root or course_dir())
    results = []
    for lab in labs or lab_names():
        check_lab(lab)
        for source in sorted((SOLUTIONS / lab).glob("*.ipynb")):
            outcome = validate(source, root=root)
            failed = [cell["raw_error"].strip().splitlines()[-1:] for cell in outcome.get("failed", [])]
            results.append(CheckResult(source, not outcome, f"failing cells: {failed}" if outcome else "all tests pass"))
            released = LABS / lab / source.name
            if not released.exists():
                results.append(CheckResult(released, False, "not released: run `mlsys course release`"))
                continue
            with tempfile.TemporaryDirectory() as tmp:
                graded_blank = Path(tmp) / released.name
                release_nb = nbformat.read(released, as_version=4)
                nbformat.write(samples.fill(release_nb, samples.grade_cells(lab)), graded_blank)
                outcome = validate(graded_blank, root=root, invert=True)
            passing = len(outcome.get("passed", []))
            detail = f"{passing} graded test cell(s) pass on the blank release" if outcome else "every graded test fails"
            results.append(CheckResult(released, not outcome, detail))
    return results


def collect(lab: str, student: str, notebook: Path, root: Path) -> None:
    """Put one submission where nbgrader expects it, repaired, with its timestamp (file mtime, UTC).

    Raises :class:`UnreadableSubmission` if the file is not a notebook.
    """
    submitted = read_submission(notebook)
    demote_duplicate_cells(submitted)
    dest = root / "submitted" / student / lab
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    nbformat.write(submitted, dest / f"{lab}.ipynb")
    stamp = dt.datetime.fromtimestamp(notebook.stat().st_mtime, tz=dt.timezone.utc)
    (dest / "timestamp.txt").write_text(stamp.strftime("%Y-%m-%d %H:%M:%S.%f %Z"))


def prepare_gradebook(lab: str, root: Path) -> None:
    """Record the lab's source cells and points in the gradebook (a private release copy)."""
    require_success(run_converter(GenerateAssignment, lab, ".", root=root, release_dir=root / "release"),
                    f"nbgrader generate_assignment {lab}")


def grade(lab: str, submissions: Path, *, root: Path | None = None, log=print) -> list[StudentResult]:
    """Collect, autograde and give feedback on every submission of ``lab``; write the reports.

    One student's broken submission never stops the batch: it gets 0 with the reason recorded.
    Returns one :class:`StudentResult` per student found.
    """
    check_lab(lab)
    root = Path(root or course_dir())
    root.mkdir(parents=True, exist_ok=True)
    prepare_gradebook(lab, root)
    with tempfile.TemporaryDirectory() as unpack:
        found = find_submissions(Path(submissions), lab, Path(unpack))
        problems = dict(found.problems)
        for student, notebook in found.notebooks.items():
            try:
                collect(lab, student, notebook, root)
            except UnreadableSubmission as error:
                problems[student] = str(error)
                continue
            log(f"grading {student} ...")
            result = run_converter(Autograde, lab, student, root=root)
            if not result["success"]:
                problems[student] = "autograde failed: " + _last_line(result)
                continue
            result = run_converter(GenerateFeedback, lab, student, root=root)
            if not result["success"]:
                problems[student] = "feedback failed: " + _last_line(result)
    _record_problems(root, lab, problems, graded=set(found.notebooks) - set(problems))
    write_reports(root, {name: _load_problems(root, name) for name in lab_names()})
    wanted = set(found.notebooks) | set(problems)
    return [r for r in read_results(root, lab, _load_problems(root, lab)) if r.student in wanted]


def _last_line(result: dict) -> str:
    lines = (result.get("error") or result.get("log") or "no log").strip().splitlines()
    return lines[-1][:200] if lines else "no log"


def _problems_file(root: Path) -> Path:
    return root / "grading_problems.json"


def _load_problems(root: Path, lab: str) -> dict[str, str]:
    path = _problems_file(root)
    return json.loads(path.read_text()).get(lab, {}) if path.exists() else {}


def _record_problems(root: Path, lab: str, problems: dict[str, str], graded: set[str]) -> None:
    """Keep the last reason each student of ``lab`` could not be graded (cleared once graded)."""
    path = _problems_file(root)
    everything = json.loads(path.read_text()) if path.exists() else {}
    kept = {s: why for s, why in everything.get(lab, {}).items() if s not in graded}
    everything[lab] = {**kept, **problems}
    path.write_text(json.dumps(everything, indent=1, sort_keys=True))

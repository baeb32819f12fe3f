"""The instructor's workflow: release, check, grade (collect, autograde, feedback, report)."""

from __future__ import annotations

import ast
import shutil
import tempfile
from concurrent.futures import Executor
from dataclasses import dataclass
from pathlib import Path

import nbformat
from IPython.core.inputtransformer2 import TransformerManager
from nbgrader.converters import GenerateAssignment

from .cells import SECRET_MARKERS, fill, grade_cells, source_fingerprint
from .config import Sandbox, gradebook_file, gradebook_url, install_mathjax, load_config, sandbox_settings
from .edition.edition import build_edition
from .edition.release_guard import ReleaseRecord, ReleaseRefused, back_up, default_backups, install, plan_lab, refusal
from .intake.lms import remember_people
from .intake.submissions import find_submissions
from .paths import LABS, SOLUTIONS, check_lab, course_dir, lab_names
from .report.report import StudentResult, load_notes, read_results, record_notes, write_reports, write_summary
from .run.batch import grade_batch
from .run.merge import holds_lab, open_gradebook
from .run.nbgrader_run import require_success, run_converter, validate
from .sandbox.sandbox import probe


def release(labs: list[str] | None = None, *, release_dir: Path = LABS, root: Path | None = None,
            force: bool = False, backups: Path | None = None, log=print) -> list[Path]:
    """Regenerate the student release of ``labs`` (default: all) from ``solutions/`` into ``release_dir``.

    The labs are generated into a temporary folder first; then, if a file the release would
    overwrite was edited by someone (see :mod:`autograder.edition.release_guard`), nothing is written and
    :class:`~autograder.edition.release_guard.ReleaseRefused` names the files, unless ``force``: then they
    are moved under ``backups`` (default ``work/release-backups/<UTC time>/`` beside
    ``release_dir``, said through ``log``) first. Returns the released notebooks. Raises if
    nbgrader fails or if secret text survived.
    """
    root = Path(root or course_dir())
    labs = [check_lab(lab) for lab in labs or lab_names()]
    record = ReleaseRecord(root)
    with tempfile.TemporaryDirectory() as tmp:
        for lab in labs:
            require_success(run_converter(GenerateAssignment, lab, ".", root=root, release_dir=Path(tmp)),
                            f"nbgrader generate_assignment {lab}")
            for notebook in sorted((Path(tmp) / lab).glob("*.ipynb")):
                leaked = [m for m in SECRET_MARKERS if m in notebook.read_text()]
                if leaked:
                    raise RuntimeError(f"{notebook.name} of {lab} still contains {', '.join(leaked)}")
        plans = [plan_lab(Path(tmp) / lab, Path(release_dir) / lab, record) for lab in labs]
    edited = [path for plan in plans for path in plan.edited]
    backups = Path(backups or default_backups(Path(release_dir)))
    if edited and not force:
        raise ReleaseRefused(refusal(edited, Path(release_dir)))
    if edited:
        back_up(edited, Path(release_dir), backups)
        log(f"moved {len(edited)} edited file(s) to {backups}")
    for plan in plans:
        install(plan)
        record.update(plan)
    open_exchange(root)
    return sorted(path for plan in plans for path in plan.writes if path.suffix == ".ipynb")


def open_exchange(root: Path) -> None:
    """Create nbgrader's exchange folder of the course (``c.Exchange.root``) as nbgrader does,
    writable by all: Formgrader offers *Release* and *Collect* only once it exists."""
    exchange = Path(load_config(root).Exchange.root)
    if not exchange.is_dir():
        exchange.mkdir(parents=True)
        exchange.chmod(0o777)


@dataclass
class CheckResult:
    """Outcome of :func:`check` for one notebook."""

    notebook: Path
    ok: bool
    detail: str


#: Calls that may end a test cell: they display nothing (they return None).
SILENT_CALLS = {"print", "display"}


def trailing_expression_cells(notebook: Path) -> list[str]:
    """The graded test cells of ``notebook`` whose last statement is an expression (other than a call of
    :data:`SILENT_CALLS`). Plain nbgrader reads the value such a cell displays as its partial credit: a
    check helper that returns 0.155 scores a passing cell 0.155 points wherever the course is graded
    without this course's kernel."""
    transform = TransformerManager().transform_cell
    found = []
    for cell in nbformat.read(notebook, as_version=4).cells:
        nbgrader = cell.metadata.get("nbgrader", {})
        if cell.cell_type != "code" or not nbgrader.get("grade") or nbgrader.get("solution"):
            continue
        body = ast.parse(transform(cell.source)).body
        last = body[-1] if body else None
        if isinstance(last, ast.Expr) and not (isinstance(last.value, ast.Call)
                                              and ast.unparse(last.value.func) in SILENT_CALLS):
            found.append(nbgrader.get("grade_id", "?"))
    return found


def check(labs: list[str] | None = None, *, root: Path | None = None) -> list[CheckResult]:
    """Every solution notebook passes all its tests; no graded test passes on the released one; no
    test cell ends in an expression (:func:`trailing_expression_cells`).

    The release is checked as the autograder sees it: with its hidden tests put back.
    """
    root = Path(root or course_dir())
    results = []
    for lab in labs or lab_names():
        check_lab(lab)
        for source in sorted((SOLUTIONS / lab).glob("*.ipynb")):
            trailing = trailing_expression_cells(source)
            if trailing:
                results.append(CheckResult(source, False, "test cells end in an expression, which plain nbgrader "
                                           f"reads as partial credit (assign or assert it): {', '.join(trailing)}"))
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
                nbformat.write(fill(release_nb, grade_cells(lab)), graded_blank)
                outcome = validate(graded_blank, root=root, invert=True)
            passing = len(outcome.get("passed", []))
            detail = f"{passing} graded test cell(s) pass on the blank release" if outcome else "every graded test fails"
            results.append(CheckResult(released, not outcome, detail))
    return results


def prepare_gradebook(lab: str, root: Path) -> None:
    """Record the lab's source cells and points in the gradebook (a private release copy).

    Skipped when the gradebook already holds the lab as its source now stands; a gradebook on a
    server the teaching team shares (``c.CourseDirectory.db_url``) is left as it is once it holds the
    lab: the first to grade writes it, and nbgrader's generate_assignment cannot rewrite a lab there
    (PostgreSQL refuses its deletions that leave rows pointing nowhere, which SQLite lets pass).
    """
    stamp = root / "release" / lab / "source.sha256"
    digest = source_fingerprint(lab)
    url = gradebook_url(root)
    current = stamp.exists() and stamp.read_text() == digest
    if (current or gradebook_file(url) is None) and holds_lab(url, lab):
        return
    file = gradebook_file(url)
    if file is not None:  # a SQLite file, whose folder (the course root, say) may not exist yet
        file.parent.mkdir(parents=True, exist_ok=True)
    open_gradebook(url).close()  # made here if new: nbgrader would ask an `alembic heads` subprocess (~4 s)
    require_success(run_converter(GenerateAssignment, lab, ".", root=root, release_dir=root / "release"),
                    f"nbgrader generate_assignment {lab}")
    stamp.write_text(digest)


def grade(lab: str, submissions: Path, *, root: Path | None = None, workers: int | None = None,
          chunk_size: int | None = None, force: bool = False, students: Path | None = None,
          cluster: str | None = None, pool: Executor | None = None, log=print) -> list[StudentResult]:
    """Collect, autograde and give feedback on every submission of ``lab``; write the reports.

    ``students`` names a mapping file (LMS name or id -> student id, see :mod:`autograder.intake.lms`).

    Submissions are graded in parallel, each in its own sandbox (see :mod:`autograder.run.batch`): by
    local processes, or by the workers of the Dask scheduler at ``cluster`` (default ``c.Sandbox.cluster``;
    :mod:`autograder.run.cluster`), which check their own sandboxes; ``pool``: local grading processes
    to use and leave open (:func:`~autograder.run.batch.grading_pool`; ``workers`` says how many).
    One student's broken submission never stops the batch: it gets 0 with the reason recorded.
    Returns one :class:`StudentResult` per student found.
    """
    check_lab(lab)
    root = Path(root or course_dir())
    root.mkdir(parents=True, exist_ok=True)
    prepare_gradebook(lab, root)
    config = load_config(root)
    settings = Sandbox(config=config)
    sandbox = sandbox_settings(config, lab, build_edition(lab, root / "editions" / lab))
    cluster = settings.cluster if cluster is None else cluster
    if not cluster:
        if settings.bubblewrap and not shutil.which("bwrap"):
            log("warning: bubblewrap (bwrap) is not installed: notebooks run with resource limits only, "
                "able to read this machine's files and use the network")
        probe(sandbox)
    with tempfile.TemporaryDirectory() as unpack:
        limit = settings.notebook_mb * 2**20
        found = find_submissions(Path(submissions), lab, Path(unpack), limit=limit, students=students)
        remember_people(root, lab, found.people)
        for student, note in found.notes.items():
            log(f"{student}: {note}")
        batch = grade_batch(lab, found.notebooks, root, source=found.root, sandbox=sandbox, limit=limit,
                            force=force, companions=found.companions, progress=log, cluster=cluster or None,
                            pool=None if cluster else pool,
                            workers=settings.workers if workers is None else workers,
                            chunk_size=settings.chunk_size if chunk_size is None else chunk_size)
    problems = {**batch.problems, **found.problems}
    record_notes(root, "problems", lab, problems, replaced=batch.graded)
    record_notes(root, "flags", lab, batch.flags, replaced=batch.graded | set(batch.problems))
    notes = {name: (load_notes(root, "problems", name), load_notes(root, "flags", name)) for name in lab_names()}
    write_reports(root, notes)
    everyone = read_results(root, lab, *notes[lab])
    write_summary(root, lab, everyone)
    install_mathjax(root)  # the feedback pages' MathJax, beside them
    wanted = set(found.notebooks) | set(problems)
    return [r for r in everyone if r.student in wanted]

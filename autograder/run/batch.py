"""Grade a class at once: chunks of submissions in worker processes, each kernel in its own sandbox.

The main process reads each submission once, safely (no link followed, regular files only, bounded:
:mod:`autograder.intake.safe_fs`), into a private copy under ``<course>/work/incoming/``; nothing after that
touches the instructor's download. A worker takes a chunk of students, copies the course gradebook
(which holds the lab's source cells and points) into a private root under ``<course>/work/``,
collects the chunk and runs nbgrader's autograde (each notebook in its own sandboxed kernel, which
sees none of the grader's files: :mod:`autograder.sandbox.sandbox`) and feedback once for the whole chunk:
nbgrader's start-up is paid per chunk, not per student. A student nbgrader could not grade in the
chunk (a cell that killed the kernel, say) is graded again alone, skipping the cells that killed the
kernel, within what is left of the notebook's wall-clock budget (``c.Sandbox.wall_seconds`` covers
all of one student's attempts together). A kernel stopped by a limit (its CPU time, the wall clock)
is not a cell that killed it: the notebook is graded as far as it got, once
(:class:`~autograder.run.execute.SandboxedExecute`). The main process, the only writer of the
course gradebook, checks each result's folders (regular files only, bounded) and merges it. A manifest of what was graded (the submission's and
the lab's fingerprints) makes a re-run skip the unchanged, so re-running after an interruption loses
nothing and repeats nothing. It skips only what nbgrader itself counts as graded (the autograded
copy and the gradebook's submission there, of the submission's timestamp) and has feedback: a
submission Formgrader regraded, or whose autograded copy went, is graded again.

A submission collected through nbgrader's exchange keeps its ``timestamp.txt`` (late penalties)
and ``submission_secret.txt`` (``nbgrader release_feedback`` needs it): :data:`COMPANIONS`.
"""

from __future__ import annotations

import concurrent.futures as futures
import contextlib
import datetime as dt
import hashlib
import json
import math
import multiprocessing
import os
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import nbformat
from nbgrader.api import Gradebook, MissingEntry
from nbgrader.converters import Autograde, GenerateFeedback
from nbgrader.utils import parse_utc

from ..cells import source_fingerprint
from ..config import gradebook_url
from ..intake.safe_fs import UnsafePath, check_tree, read_beneath
from ..intake.sanitize import UnreadableSubmission, demote_duplicate_cells, read_submission, tamper_flags
from ..intake.submissions import COMPANIONS
from ..sandbox.sandbox import remove_empty_cgroups
from .cluster import ClusterPool
from .execute import KILLER_ENV, NOTES_ENV, read_notes, spent_seconds
from .merge import copy_assignment, merge_submission
from .nbgrader_run import run_converter
from .outcome import STEPS, Outcome

@dataclass
class BatchResult:
    """Students graded in this run, why the others could not be, and why some need a second look."""

    graded: set[str] = field(default_factory=set)
    problems: dict[str, str] = field(default_factory=dict)
    flags: dict[str, str] = field(default_factory=dict)


#: Cells that kill the kernel skipped one by one before a submission is given up (0, with the reason).
MAX_KERNEL_DEATHS = 3
#: Most bytes and files of one student's graded folders (autograded notebook, feedback page).
MAX_RESULT_BYTES, MAX_RESULT_FILES = 64 * 2**20, 20
#: Most bytes of each companion file (intake's COMPANIONS) kept beside a collected notebook.
COMPANION_LIMIT = 4096
#: What a submission's private copy is called, in a folder of its own under ``<course>/work/incoming/``.
INCOMING = "submission.ipynb"


def _last_line(result: dict) -> str:
    """The most telling line of a failed nbgrader run's log (an exception, not the generic footer)."""
    lines = [line.strip() for line in (result.get("log", "") + "\n" + result.get("error", "")).splitlines()]
    telling = [line for line in lines if re.match(r"^[\w.]+(Error|Exception): ", line)
               and "NbGraderException" not in line]
    return (telling or [line for line in lines if line] or ["no log"])[-1][:200]


def skip_killer_cell(submitted: Path, index: int) -> str | None:
    """Replace the cell that killed the kernel by a comment, in the collected copy; return the flag.

    ``None`` if that cell is a test cell (nbgrader restores those, so it cannot be skipped).
    """
    notebook = nbformat.read(submitted, as_version=4)
    if notebook.cells[index].get("metadata", {}).get("nbgrader", {}).get("grade"):
        return None
    first = (notebook.cells[index].source.strip().splitlines() or [""])[0][:60]
    notebook.cells[index].source = f"# skipped by the grader: this cell stopped the kernel\n# {first}"
    nbformat.write(notebook, submitted)
    return f"cell {index} stopped the kernel and was skipped ({first})"


def collect(lab: str, student: str, notebook: Path, root: Path) -> list[str]:
    """Put one submission where nbgrader expects it, repaired, with its timestamp: the exchange's
    ``timestamp.txt`` beside ``notebook`` if there is one (and its ``submission_secret.txt``), else
    the file's modification time (UTC).

    Returns the reasons to flag it (see :func:`~autograder.intake.sanitize.tamper_flags`). Raises
    :class:`~autograder.intake.sanitize.UnreadableSubmission` if the file is not a notebook.
    """
    submitted = read_submission(notebook)
    demote_duplicate_cells(submitted)
    flags = tamper_flags(submitted)
    dest = root / "submitted" / student / lab
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    nbformat.write(submitted, dest / f"{lab}.ipynb")
    for name in COMPANIONS:
        if (notebook.parent / name).is_file():
            shutil.copyfile(notebook.parent / name, dest / name)
    if not (dest / "timestamp.txt").exists():
        stamp = dt.datetime.fromtimestamp(notebook.stat().st_mtime, tz=dt.timezone.utc)
        (dest / "timestamp.txt").write_text(stamp.strftime("%Y-%m-%d %H:%M:%S.%f %Z"))
    return flags


def grade_one(lab: str, student: str, notebook: Path, template: Path, work: Path, sandbox: dict,
              spent: float = 0) -> Outcome:
    """Worker: autograde and give feedback on one submission in the private course root ``work``
    (made from ``template``: :func:`private_root`), its kernel in the ``sandbox``.

    ``spent``: wall-clock seconds this student's notebook already took (in its chunk). All attempts
    together get ``sandbox['wall_seconds']``: each gets what the earlier ones left, and none starts
    once nothing is left.
    """
    private_root(template, work)
    try:
        flags = collect(lab, student, notebook, work)
    except UnreadableSubmission as error:
        return Outcome(student, str(error))
    killer = work / "killer_cell"
    os.environ[KILLER_ENV] = str(killer)
    os.environ[NOTES_ENV] = str(work / "notes")
    submitted = work / "submitted" / student / lab / f"{lab}.ipynb"
    budget = sandbox.get("wall_seconds")
    for attempt in range(MAX_KERNEL_DEATHS + 1):
        left = budget - spent - spent_seconds(work / "notes", student) if budget else None
        if left is not None and left < 1:
            return Outcome(student, f"autograde stopped: the notebook used all of its {budget} s of wall-clock time "
                                    f"over {attempt + (spent > 0)} attempt(s), each ended by a cell that killed "
                                    "the kernel", flags + read_notes(work / "notes", student))
        killer.unlink(missing_ok=True)
        result = run_converter(Autograde, lab, student, root=work,
                               sandbox=sandbox if left is None else {**sandbox, "wall_left": left})
        if result["success"] or not killer.exists():
            break
        skipped = skip_killer_cell(submitted, int(killer.read_text()))
        if skipped is None:  # a test cell died (memory held by earlier cells?): nothing to skip
            return Outcome(student, f"autograde failed: the kernel died in test cell {killer.read_text()} "
                                    "(memory or processes exhausted by the notebook?)", flags)
        flags.append(skipped)
    flags += read_notes(work / "notes", student)
    if not result["success"]:
        return Outcome(student, "autograde failed: " + _last_line(result), flags)
    result = run_converter(GenerateFeedback, lab, student, root=work)
    if not result["success"]:
        return Outcome(student, "feedback failed: " + _last_line(result), flags)
    return Outcome(student, None, flags, work)


#: Appended to the course folder's settings file in a private root: its gradebook is its own SQLite file,
#: whatever gradebook the course's settings name (only the main process writes the course's).
PRIVATE_GRADEBOOK = ("\n# a grading worker's private root: its own gradebook (autograder.run.batch.make_template)\n"
                     "import os as _os\n"
                     "c.CourseDirectory.db_url = 'sqlite:///' + _os.path.join(_os.path.dirname(__file__), 'gradebook.db')\n")


def make_template(root: Path, lab: str, template: Path) -> None:
    """What every private root of this batch starts from, in ``template``: a SQLite gradebook holding
    ``lab`` as the course gradebook defines it, and the course folder's own settings file (its late
    policy, say), if any, with :data:`PRIVATE_GRADEBOOK` added."""
    template.mkdir(parents=True)
    copy_assignment(gradebook_url(root), template / "gradebook.db", lab)
    own = root / "nbgrader_config.py"
    (template / "nbgrader_config.py").write_text((own.read_text() if own.is_file() else "") + PRIVATE_GRADEBOOK)


def private_root(template: Path, work: Path) -> None:
    """An empty course root at ``work`` with a copy of the gradebook and settings in ``template``
    (:func:`make_template`)."""
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    for name in ("gradebook.db", "nbgrader_config.py"):
        shutil.copyfile(template / name, work / name)


def grade_chunk(lab: str, notebooks: dict[str, Path], template: Path, work: Path, sandbox: dict) -> list[Outcome]:
    """Worker: autograde and give feedback on several submissions with one nbgrader run of each, in
    the private course root ``work`` made from ``template`` (:func:`private_root`).

    Every notebook still runs in its own sandboxed kernel (``sandbox``: the settings of
    :func:`~autograder.config.sandbox_settings`). Students nbgrader could not grade here are graded
    again alone by :func:`grade_one` (which can skip a cell that killed the kernel).
    """
    private_root(template, work)
    outcomes, collected = {}, {}
    for student, notebook in notebooks.items():
        try:
            collected[student] = collect(lab, student, notebook, work)
        except UnreadableSubmission as error:
            outcomes[student] = Outcome(student, str(error))
    if collected:
        os.environ.pop(KILLER_ENV, None)
        os.environ[NOTES_ENV] = str(work / "notes")
        run_converter(Autograde, lab, "*", root=work, sandbox=sandbox)
        run_converter(GenerateFeedback, lab, "*", root=work)
    for student, flags in collected.items():
        if (work / "feedback" / student / lab / f"{lab}.html").exists():
            outcomes[student] = Outcome(student, None, flags + read_notes(work / "notes", student), work)
        else:
            outcomes[student] = grade_one(lab, student, notebooks[student], template, work / "alone" / student,
                                          sandbox, spent_seconds(work / "notes", student))
    return [outcomes[student] for student in notebooks]


def chunks(students: list[str], workers: int, most: int) -> list[list[str]]:
    """``students`` in consecutive chunks of at most ``most`` that shrink toward the end (each takes
    a ``2 * workers``-th of those left, at least two), so that the workers finish together: big
    chunks pay nbgrader's start-up rarely, small last ones leave no worker idle for long."""
    parts, rest = [], list(students)
    while rest:
        size = min(most, max(2, math.ceil(len(rest) / (2 * workers))))
        parts.append(rest[:size])
        rest = rest[size:]
    return parts


def merge_outcome(lab: str, student: str, work: Path, root: Path, gradebook: str) -> None:
    """Move one graded submission's folders and gradebook rows from ``work`` into the course ``root``
    and its ``gradebook`` (a database URL).

    Raises :class:`~autograder.intake.safe_fs.UnsafePath` (nothing moved) if a folder holds anything but
    regular files or is too big.
    """
    for step in STEPS:
        problems = check_tree(work / step / student / lab, max_bytes=MAX_RESULT_BYTES, max_files=MAX_RESULT_FILES)
        if problems:
            raise UnsafePath(f"{step} folder refused: {'; '.join(problems)}")
    for step in STEPS:
        source, target = work / step / student / lab, root / step / student / lab
        shutil.rmtree(target, ignore_errors=True)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(str(source), str(target))
    merge_submission(work / "gradebook.db", gradebook, lab, student)


def progress_bar(done: int, total: int, width: int = 20) -> str:
    """``|#########-----------|`` for ``done`` of ``total``."""
    filled = round(width * done / total) if total else width
    return "|" + "#" * filled + "-" * (width - filled) + "|"


def fingerprint(lab: str, data: bytes) -> str:
    """Changes when the submission (its bytes) or the lab's source (its tests) changes."""
    return hashlib.sha256(data + source_fingerprint(lab).encode()).hexdigest()


class Manifest:
    """``<course>/graded.json``: lab -> student -> fingerprint of what was graded, written atomically."""

    def __init__(self, root: Path):
        self.path = root / "graded.json"
        self.data = json.loads(self.path.read_text()) if self.path.exists() else {}

    def get(self, lab: str, student: str) -> str | None:
        return self.data.get(lab, {}).get(student)

    def record(self, lab: str, student: str, value: str) -> None:
        self.data.setdefault(lab, {})[student] = value
        partial = self.path.with_suffix(".tmp")
        partial.write_text(json.dumps(self.data, indent=1, sort_keys=True))
        os.replace(partial, self.path)


def take_in(notebooks: dict[str, Path], source: Path, folder: Path, limit: int,
            companions: dict[str, dict[str, Path]] | None = None) -> tuple[dict, dict, dict]:
    """Read every submission under ``source`` safely into ``folder/<student>/`` (a private copy,
    modification time kept), with its exchange ``companions`` (name -> path under ``source``, names
    from :data:`COMPANIONS`). Returns (student -> notebook copy, student -> bytes read, notebook and
    companions, student -> why refused)."""
    copies, contents, refused = {}, {}, {}
    for student, path in notebooks.items():
        wanted = {INCOMING: (path, limit)}  # a name of the grader's, not the student's
        wanted.update({name: (extra, COMPANION_LIMIT) for name, extra in (companions or {}).get(student, {}).items()
                       if name in COMPANIONS})
        try:
            read = {name: read_beneath(source, where.relative_to(source), most) for name, (where, most) in wanted.items()}
        except UnsafePath as error:
            refused[student] = f"submission refused: {error}"
            continue
        own = folder / student
        own.mkdir(parents=True, exist_ok=True)
        for name, data in read.items():
            (own / name).write_bytes(data.data)
            os.utime(own / name, (data.mtime, data.mtime))
        copies[student] = own / INCOMING
        contents[student] = b"".join(read[name].data for name in sorted(read))
    return copies, contents, refused


def graded_in_place(root: Path, lab: str, students: set[str]) -> set[str]:
    """Those of ``students`` whose submission of ``lab`` counts as graded in the course ``root`` the
    way nbgrader counts it (Formgrader's "autograded"): an autograded copy, a gradebook submission
    with the timestamp of the submitted one, and the feedback page."""
    def stamp(student: str):
        path = root / "submitted" / student / lab / "timestamp.txt"
        return parse_utc(path.read_text().strip()) if path.is_file() else None

    done = set()
    with Gradebook(gradebook_url(root)) as gradebook:
        for student in students:
            try:
                recorded = gradebook.find_submission(lab, student).timestamp
            except MissingEntry:
                continue
            if ((root / "autograded" / student / lab / f"{lab}.ipynb").is_file()
                    and (root / "feedback" / student / lab / f"{lab}.html").is_file() and recorded == stamp(student)):
                done.add(student)
    return done


def worker_pool(workers: int, cluster: str | None, lab: str, sandbox: dict,
                progress: Callable[[str], None]) -> tuple[futures.Executor, int]:
    """Where chunks are graded, and how many at once: ``workers`` local processes (0: one per CPU core),
    or, with the address of a Dask scheduler in ``cluster``, its workers' threads (:class:`ClusterPool`)."""
    if cluster:
        pool = ClusterPool(cluster, lab, sandbox, log=progress)
        return pool, pool.workers
    workers = workers or os.cpu_count() or 1
    return grading_pool(workers), workers


def grading_pool(workers: int, niceness: int = 0) -> futures.ProcessPoolExecutor:
    """``workers`` local grading processes, spawned: no inherited threads or open gradebook sessions;
    ``niceness`` lowers their priority and their kernels' (``nice``). One pool may serve several batches
    (``grade_batch(pool=...)``): each process pays its imports (nbgrader, nbconvert, SQLAlchemy: about
    2 CPU-seconds) once."""
    return futures.ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn"),
                                       initializer=os.nice if niceness else None, initargs=(niceness,) if niceness else ())


def grade_batch(lab: str, notebooks: dict[str, Path], root: Path, *, source: Path, sandbox: dict,
                limit: int = 32 * 2**20, workers: int = 0, chunk_size: int = 1, force: bool = False,
                companions: dict[str, dict[str, Path]] | None = None, cluster: str | None = None,
                pool: futures.Executor | None = None, progress: Callable[[str], None] = print) -> BatchResult:
    """Grade every ``student -> notebook`` (a path under the folder ``source``) not graded before.

    ``workers`` processes at once (0: one per CPU core), or the workers of the Dask scheduler at
    ``cluster`` (``tcp://host:8786``), or those of ``pool`` (``workers`` of them, left open:
    :func:`grading_pool`), kernels in the ``sandbox`` (settings of
    :func:`~autograder.config.sandbox_settings`). Students whose submission and lab are unchanged
    since they were last graded, and still graded in the course (:func:`graded_in_place`), are
    skipped unless ``force``. ``companions``: the exchange's files beside each notebook, kept. A
    submission that is a link, not a regular file or over ``limit`` bytes is refused with the reason.
    """
    if workers < 0 or chunk_size < 1:
        raise ValueError(f"workers must be >= 0 and chunk_size >= 1, got {workers} and {chunk_size}")
    shutil.rmtree(root / "work", ignore_errors=True)  # leftovers of an interrupted run
    result = BatchResult()
    copies, contents, result.problems = take_in(notebooks, source, root / "work" / "incoming", limit, companions)
    manifest = Manifest(root)
    prints = {student: fingerprint(lab, data) for student, data in contents.items()}
    unchanged = {s for s in copies if manifest.get(lab, s) == prints[s]}
    kept = set() if force else graded_in_place(root, lab, unchanged)
    todo = {s: p for s, p in copies.items() if s not in kept}
    skipped = len(copies) - len(todo)
    if skipped:
        progress(f"{skipped} submission(s) unchanged since last graded: skipped (force to regrade)")
    gradebook, template = gradebook_url(root), root / "work" / "template"
    make_template(root, lab, template)
    if pool is None:
        pool, workers = worker_pool(workers, cluster, lab, sandbox, progress)
        owned = pool
    else:
        workers, owned = workers or os.cpu_count() or 1, contextlib.nullcontext()
    done = 0
    with owned:
        running = {pool.submit(grade_chunk, lab, {s: todo[s] for s in chunk}, template, root / "work" / f"chunk{i}",
                               sandbox): chunk
                   for i, chunk in enumerate(chunks(sorted(todo), workers, chunk_size))}
        for future in futures.as_completed(running):
            try:
                outcomes = future.result()
            except Exception as error:  # a crashed worker costs its students a reason, not the batch
                outcomes = [Outcome(s, f"grader error: {type(error).__name__}: {error}") for s in running[future]]
            for outcome in outcomes:
                student, done = outcome.student, done + 1
                if outcome.problem is None:
                    try:
                        merge_outcome(lab, student, outcome.work, root, gradebook)
                        result.graded.add(student)
                    except UnsafePath as error:
                        result.problems[student] = f"graded result refused: {error}"
                else:
                    result.problems[student] = outcome.problem
                if outcome.flags:
                    result.flags[student] = "; ".join(dict.fromkeys(outcome.flags))
                manifest.record(lab, student, prints[student])
                where = f" (Dask worker {outcome.worker})" if outcome.worker else ""
                progress(f"{progress_bar(done, len(todo))} [{done}/{len(todo)}] {student}: "
                         f"{outcome.problem or 'graded'}{where}")
    shutil.rmtree(root / "work", ignore_errors=True)
    remove_empty_cgroups()
    return result

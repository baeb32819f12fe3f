"""``mlsys course ...``: the instructor's commands (see docs/instructor/index.md)."""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing
import os
import sys
import tempfile
import time
import warnings
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from . import course
from .authoring import mutate, samples
from .authoring.lectures import render_lectures
from .edition import references
from .edition.bundle import bundle, default_kit_name, kit_lab
from .intake.submissions import find_submissions, format_found
from .paths import LECTURES, check_lab, course_dir, lab_names
from .report.console import Progress, children_to_log
from .report.export import LMSES, export_grades
from .report.report import format_table
from .run.batch import grading_pool, progress_bar


def _cmd_release(args) -> int:
    for notebook in course.release(args.labs or None, force=args.force):
        print(f"released {notebook}")
    return 0


def _cmd_check(args) -> int:
    results = course.check(args.labs or None)
    for r in results:
        print(f"{'ok  ' if r.ok else 'FAIL'} {r.notebook}: {r.detail}")
    return 0 if all(r.ok for r in results) else 1


def _cmd_grade(args) -> int:
    if args.dry_run:
        with tempfile.TemporaryDirectory() as unpack:
            print(format_found(find_submissions(Path(args.submissions), check_lab(args.lab), Path(unpack),
                                                students=args.students)))
        return 0
    progress = Progress(args.verbose)
    results = course.grade(args.lab, Path(args.submissions), root=args.course_dir, workers=args.workers,
                           chunk_size=args.chunk_size, force=args.force, students=args.students,
                           cluster=args.cluster, log=progress)
    progress.clear()
    root = Path(args.course_dir or course_dir())
    print(format_table(results))
    print(f"\ngrades: {root / 'grades.csv'}\nfeedback: {root / 'feedback'}\n"
          f"summary: {root / f'summary_{args.lab}.md'}")
    _say_log(args)
    return 0


def _cmd_export(args) -> int:
    done = export_grades(args.lab, args.lms, args.out, root=args.course_dir, column=args.column, points=args.points)
    print(f"{args.lms} grades of {done.rows} student(s): {done.path}")
    for student, why in done.left_out.items():
        print(f"not exported: {student}: {why}", file=sys.stderr)
    return 0


def _say_log(args) -> None:
    """Where the output of what the command ran went (see :data:`CHATTY`), if it wrote any."""
    if not args.verbose and args.log.stat().st_size:
        print(f"output of nbgrader and the kernels: {args.log}")


def _cmd_samples(args) -> int:
    for student in samples.build_samples(args.lab, Path(args.dest)):
        print(Path(args.dest) / student / f"{args.lab}.ipynb")
    return 0


def _cmd_references(args) -> int:
    changes = references.update_manifests(args.labs or None)
    for change in changes:
        print(change)
    return 0


def _cmd_bundle(args) -> int:
    lab = kit_lab(args.lab)
    kit = bundle(Path(args.out or course_dir() / default_kit_name(lab)), lab)
    print(f"student kit for {lab}: {kit.path}")
    print(f"  {len(kit.plan.removed)} functions of mlsys_lib are stubs (exercises of {lab} and later labs, "
          "and the helpers only they use)")
    if kit.plan.spared:
        print(f"  kept working, as {lab}'s released notebook runs them: {', '.join(kit.plan.spared)}")
    return 0


def _report_claims(rendered) -> None:
    """Print each lecture's measured claims; warn about those this machine contradicts."""
    for lecture, holds, line in rendered.claims:
        print(f"{lecture}: {line}")
    for lecture, _, line in rendered.contradicted:
        print(f"warning: {lecture}'s figure contradicts its text on this machine ({line[len('claim '):]})",
              file=sys.stderr)


def _cmd_figures(args) -> int:
    if args.gpu:
        return _gpu_figures()
    rendered = render_lectures(args.lectures or None)
    for figure in rendered.figures:
        print(f"figure {figure}")
    _report_claims(rendered)
    return 0


def _gpu_figures() -> int:
    """Time the course's kernels on this machine's GPU (figures next to the simulator's); one line without one."""
    import mlsys_lib  # noqa: F401 - chooses the backend before numba.cuda is imported
    from mlsys_lib.kernels import device_info, gpu_available
    from mlsys_lib.kernels.gpu.gpu_session import NO_GPU, gpu_figures

    if not gpu_available():
        print(NO_GPU.format(reason=device_info()["reason"]))
        return 0
    figures, _ = gpu_figures(LECTURES / "figures")  # prints the table and each claim
    for figure in figures:
        print(f"figure {figure}")
    return 0


def _cmd_mutate(args) -> int:
    report = mutate.mutate_lab(args.lab, library=args.library, timeout=args.timeout, jobs=args.jobs,
                               limit=args.limit, exercise=args.exercise, operators=args.operators,
                               log=lambda message: print(message, file=sys.stderr, flush=True))
    print(mutate.format_report(report, quiet=args.quiet))
    return 0 if report.passed(args.min_score) else 1


def fixture_verdicts(lab: str, jobs: int = 2) -> list[tuple[str, list[str]]]:
    """Run every wrong-answer fixture of ``lab`` by forking from its solution notebook
    (:func:`samples.check_wrong_answers`): for each, its name and what is wrong with it (nothing when it
    loses exactly its ``loses:`` tests, all of them the tests of the exercises it replaces)."""
    verdicts = []
    for check in samples.check_wrong_answers(lab, jobs=jobs):
        lost = check.problem or ", ".join(sorted(check.lost)) or "nothing"
        notes = [] if check.ok else [f"lost {lost}, must lose {', '.join(check.wrong.loses)}"]
        if check.cascades:
            notes.append(f"charges another exercise's tests too: {', '.join(sorted(check.cascades))}")
        verdicts.append((check.wrong.name, notes))
    return verdicts


def _cmd_fixtures(args) -> int:
    ok = True
    for lab in args.labs or lab_names():
        for name, notes in fixture_verdicts(lab, jobs=args.jobs):
            ok &= not notes
            print(f"{'FAIL' if notes else 'ok  '} {lab} {name}" + "".join(f"\n       {n}" for n in notes))
    return 0 if ok else 1


def grade_samples(lab: str, root: Path, *, wrong: int | None = None, pool=None,
                  log=lambda message: None) -> list[tuple[bool, str]]:
    """Grade the lab's sample submissions through nbgrader in the sandbox (progress through ``log``):
    its solution, its untouched release and the first ``wrong`` wrong-answer fixtures (None: all). For
    each, whether it scored as it must and a line that says so. ``pool``: grading processes to use and
    leave open (:func:`~autograder.run.batch.grading_pool`)."""
    with tempfile.TemporaryDirectory() as tmp:
        expected = samples.build_samples(lab, Path(tmp), wrong=wrong)
        results = course.grade(lab, Path(tmp), root=root, force=True, pool=pool, log=log)
    rows = []
    for r in results:
        wrong_answer = expected[r.student]
        if r.student == "solution":
            good, must = r.score == r.max_score > 0, "score full marks"
        elif r.student == "blank":
            good, must = r.score == 0, "score 0"
        else:
            lost = {name for name, (score, maximum) in r.exercises.items() if score < maximum}
            good, must = lost == set(wrong_answer.loses), f"lose exactly {', '.join(wrong_answer.loses)}"
        rows.append((good, f"  {'ok  ' if good else 'FAIL'} {r.student:<32} {r.score:>5g} / {r.max_score:<5g} "
                           f"must {must}"))
    return rows


def timed_fixture_verdicts(lab: str) -> tuple[list[tuple[str, list[str]]], float]:
    """:func:`fixture_verdicts` of ``lab`` and the seconds they took (run in a process of their own)."""
    start = time.monotonic()
    return fixture_verdicts(lab), time.monotonic() - start


#: Grading processes of ``mlsys course all``: a lab's solution and blank release make one chunk
#: (``c.Sandbox.chunk_size``), graded by one process with one nbgrader run while the fixtures are checked.
GRADING_WORKERS = 1
#: Processes of ``mlsys course all`` that check the fixtures (each forking two children at a time), beside
#: the one rendering the lectures and the grading: together they keep two cores busy while some wait.
FIXTURE_CHECKERS = 2
#: Priorities (``nice``) when the cores are busy: the lectures first (their claims are timed: a lecture
#: sharing a core measured 0.8x where it measures 2x alone), then the grading, then the fixtures.
GRADING_NICENESS, FIXTURE_NICENESS = 5, 10


class LabLines:
    """``mlsys course all``'s summary: a line per lab (and its samples' lines: every one if ``verbose``,
    else those that FAIL), printed in lab order once the lab is graded (:meth:`graded`) and its
    wrong-answer fixtures checked (``checking``: lab -> future of :func:`timed_fixture_verdicts`; a
    lab not in it has none to wait for), so that grading the next lab never waits on the fixtures."""

    def __init__(self, checking: dict, verbose: bool = False):
        self.checking, self.verbose = checking, verbose
        self.waiting: list[tuple[str, list[tuple[bool, str]], str]] = []
        self.ok = True

    def graded(self, lab: str, rows: list[tuple[bool, str]], how: str) -> None:
        """``lab`` is graded: ``rows`` (ok, line) of its samples, ``how`` says how long it took."""
        self.waiting.append((lab, rows, how))

    def print_ready(self, wait: bool = False) -> None:
        """Print the graded labs, in order, as far as their fixtures are checked (``wait``: every one,
        waiting for their fixtures)."""
        progress = Progress(self.verbose)
        while self.waiting:
            lab, rows, how = self.waiting[0]
            checked = self.checking.get(lab)
            if checked is not None and not (wait or checked.done()):
                return
            self.waiting.pop(0)
            if checked is not None:
                progress.show(f"{lab}: checking the wrong answers by forking ...")
                verdicts, seconds = checked.result()
                rows = rows + [(not notes, f"  {'FAIL' if notes else 'ok  '} wrong_{name:<26} by forking: "
                                           + ("; ".join(notes) or "lost exactly its tests")) for name, notes in verdicts]
                how += f", {len(verdicts)} by forking {seconds:.0f} s"
                progress.clear()
            good = sum(row_ok for row_ok, _ in rows)
            self.ok &= good == len(rows)
            print(f"{lab:<18} {progress_bar(good, len(rows))} {good}/{len(rows)} samples scored as they must"
                  + (f", {len(rows) - good} FAIL" if good < len(rows) else "") + f" ({how})")
            for row_ok, line in rows:
                if self.verbose or not row_ok:
                    print(line)


def _cmd_all(args) -> int:
    """``make course``: release every lab; grade each lab's solution and untouched release through nbgrader
    in the sandbox (the real path), while :data:`FIXTURE_CHECKERS` processes check every wrong-answer
    fixture by forking from the solution notebook (``--all-samples``: every fixture is graded through
    nbgrader instead, as ``make check-all`` does) and another renders the lectures (small sizes;
    ``--full-figures``: the full ones); then summarize: a line per lab (:class:`LabLines`).

    The grading waits on kernels much of the time, so they share the cores well: the labs are graded one
    after another by the same grading process (its imports paid once) without waiting for each lab's
    fixtures. The processes share this one's standard output and error (the course log's, unless -v)."""
    root, start = course_dir(), time.monotonic()
    released = course.release()
    print(f"released {len(released)} notebook(s) into labs/ ({time.monotonic() - start:.0f} s)")
    spawn = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(1, mp_context=spawn) as lecturer, \
            ProcessPoolExecutor(FIXTURE_CHECKERS, mp_context=spawn, initializer=os.nice,
                                initargs=(FIXTURE_NICENESS,)) as checkers, \
            grading_pool(os.cpu_count() or 1 if args.all_samples else GRADING_WORKERS,
                         niceness=GRADING_NICENESS) as graders:
        rendering = lecturer.submit(render_lectures, quick=not args.full_figures)
        # the last labs' fixtures take longest (Numba compiles, process groups, simulated GPUs): started
        # first, they do not run on alone at the end
        checking = {} if args.all_samples else {lab: checkers.submit(timed_fixture_verdicts, lab)
                                                for lab in reversed(lab_names())}
        lines = LabLines(checking, args.verbose)
        for lab in lab_names():
            start, progress = time.monotonic(), Progress(args.verbose, prefix=f"{lab:<18} ")
            rows = grade_samples(lab, root, wrong=None if args.all_samples else 0, pool=graders, log=progress)
            progress.clear()
            lines.graded(lab, rows, f"{len(rows)} through nbgrader {time.monotonic() - start:.0f} s")
            lines.print_ready()
        lines.print_ready(wait=True)
        progress, start = Progress(args.verbose), time.monotonic()
        progress.show("rendering the lecture notebooks ...")
        rendered = rendering.result()
        progress.clear()
    print(f"lecture figures: {len(rendered.figures)} written to lectures/figures/"
          + ("" if args.full_figures else " (small sizes; `make plots` draws the full ones)")
          + f" (waited {time.monotonic() - start:.0f} s for them after the grading)")
    _report_claims(rendered)
    print(f"grades: {root / 'grades.csv'}   feedback: {root / 'feedback'}")
    _say_log(args)
    print("course OK" if lines.ok else "course BROKEN: a sample scored as it must not")
    return 0 if lines.ok else 1


#: Commands that run nbgrader, kernels or grading workers: what those write goes to the course folder's
#: :data:`LOG` (Python warnings are ignored), unless -v.
CHATTY = ("release", "check", "grade", "figures", "references", "all")
LOG = "mlsys-course.log"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="mlsys course", description=__doc__)
    verbose_help = (f"show everything: each student's progress and each sample's line, and what nbgrader, the "
                    f"kernels and the libraries print (else in <course folder>/{LOG}), warnings included")
    parser.add_argument("-v", "--verbose", action="store_true", help=verbose_help)
    verbose = argparse.ArgumentParser(add_help=False)  # -v after the command too
    verbose.add_argument("-v", "--verbose", action="store_true", default=argparse.SUPPRESS, help=verbose_help)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("release", parents=[verbose], help="regenerate labs/ from solutions/ with nbgrader (refused "
                                                          "if it would overwrite a file edited by hand)")
    p.add_argument("labs", nargs="*")
    p.add_argument("--force", action="store_true",
                   help="release even over edited files, after moving them to work/release-backups/<UTC time>/")
    p.set_defaults(run=_cmd_release)
    p = sub.add_parser("check", parents=[verbose], help="solutions pass their tests; releases fail every graded test")
    p.add_argument("labs", nargs="*")
    p.set_defaults(run=_cmd_check)
    p = sub.add_parser("grade", parents=[verbose], help="collect, autograde, feedback and grades.csv for one lab")
    p.add_argument("lab")
    p.add_argument("submissions", help="folder of <student>/<lab>.ipynb, nbgrader's submitted/, or an LMS zip")
    p.add_argument("--course-dir", type=Path, default=None, help="live course folder (default .course/)")
    p.add_argument("--workers", type=int, default=None, help="notebooks graded at once (default: c.Sandbox.workers)")
    p.add_argument("--chunk-size", type=int, default=None,
                   help="students per nbgrader run of a worker (default: c.Sandbox.chunk_size)")
    p.add_argument("--cluster", default=None, metavar="ADDRESS",
                   help="grade on the workers of this Dask scheduler, e.g. tcp://host:8786 (default: "
                        "c.Sandbox.cluster; none: local processes)")
    p.add_argument("--force", action="store_true", help="regrade submissions graded before and unchanged since")
    p.add_argument("--students", type=Path, default=None, metavar="CSV",
                   help="mapping file: columns prefix and/or lms_id, and student_id "
                        "(see docs/instructor/running-a-class.md)")
    p.add_argument("--dry-run", action="store_true",
                   help="only list whose notebook is which, and what would not be graded and why")
    p.set_defaults(run=_cmd_grade)
    p = sub.add_parser("export", help="the lab's grades as a CSV the LMS imports (Canvas gradebook, "
                                      "Moodle grading worksheet)")
    p.add_argument("lab")
    p.add_argument("--lms", choices=LMSES, required=True)
    p.add_argument("--out", type=Path, default=None, help="the CSV to write (default .course/<lab>_<lms>.csv)")
    p.add_argument("--course-dir", type=Path, default=None, help="live course folder (default .course/)")
    p.add_argument("--column", default=None, help="Canvas: the assignment column's title, e.g. 'Lab 1 (4321)' "
                                                  "(default: the lab)")
    p.add_argument("--points", type=float, default=None, help="rescale scores to this maximum (the LMS's points)")
    p.set_defaults(run=_cmd_export)
    p = sub.add_parser("samples", help="write the lab's sample submissions into DEST")
    p.add_argument("lab")
    p.add_argument("dest")
    p.set_defaults(run=_cmd_samples)
    p = sub.add_parser("fixtures", help="run each wrong-answer fixture (fast, by forking): it must lose exactly "
                                        "its 'loses:' tests, all of the exercises it replaces")
    p.add_argument("labs", nargs="*")
    p.add_argument("--jobs", type=int, default=2, help="fixtures run at once (default 2)")
    p.set_defaults(run=_cmd_fixtures)
    p = sub.add_parser("references", parents=[verbose], help="record which library functions each lab's tests guard, "
                                          "into solutions/<lab>/references.txt")
    p.add_argument("labs", nargs="*")
    p.set_defaults(run=_cmd_references)
    p = sub.add_parser("bundle", help="the student kit for a lab: labs, environment.yml, the mlsys_lib wheel "
                                      "with that lab's and later labs' exercises stubbed")
    p.add_argument("--for", dest="lab", metavar="LAB", default=None,
                   help="the lab the students work on (default: the first lab, every exercise stubbed)")
    p.add_argument("--out", default=None, help="the zip to write (default: .course/mlsys-course-student-LAB.zip)")
    p.set_defaults(run=_cmd_bundle)
    p = sub.add_parser("figures", parents=[verbose], help="execute the lecture notebooks, writing lectures/figures/")
    p.add_argument("lectures", nargs="*")
    p.add_argument("--gpu", action="store_true",
                   help="instead, time the course's kernels on this machine's NVIDIA GPU against its peak "
                        "(figures *_gpu.png); without a GPU say so and exit 0")
    p.set_defaults(run=_cmd_figures)
    p = sub.add_parser("mutate", help="mutation testing: how many one-edit wrong answers the lab's tests catch")
    p.add_argument("lab")
    p.add_argument("--timeout", type=float, default=None,
                   help="seconds per mutant (default: 5 x the exercise's unmutated run, at least 10)")
    p.add_argument("--jobs", type=int, default=2, help="mutants run at once (default 2)")
    p.add_argument("--limit", type=int, default=None, help="at most N mutants per exercise, spread over the operators")
    p.add_argument("--exercise", default=None, metavar="GRADE_ID", help="only this exercise")
    p.add_argument("--operators", choices=["all", "ast", "semantic"], default="all",
                   help="the mutation operators: syntactic (ast), the mistakes students make (semantic), or all")
    p.add_argument("--library", action="store_true",
                   help="import the repository's mlsys_lib instead of the lab's grading edition")
    p.add_argument("--min-score", type=float, default=90.0, help="exit 1 below this total score, in %% (default 90)")
    p.add_argument("--quiet", action="store_true", help="only the table: no survivors and their diffs")
    p.set_defaults(run=_cmd_mutate)
    p = sub.add_parser("all", parents=[verbose], help="what `make course` runs")
    p.add_argument("--all-samples", action="store_true",
                   help="grade every wrong-answer fixture through nbgrader too (minutes per lab), not only the "
                        "solution and the blank, instead of checking the fixtures by forking (`make check-all`)")
    p.add_argument("--full-figures", action="store_true",
                   help="render the lectures at their full sizes (`make plots`), not the small ones")
    p.set_defaults(run=_cmd_all)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if not args.verbose:  # nbgrader's gradebook trips SQLAlchemy's autoflush warnings on every read
        warnings.filterwarnings("ignore", module="nbgrader")
    args.log = Path(getattr(args, "course_dir", None) or course_dir()) / LOG
    try:
        with children_to_log(args.log) if args.command in CHATTY and not args.verbose else contextlib.nullcontext():
            return args.run(args)
    except (ValueError, RuntimeError) as error:
        print(f"mlsys course {args.command}: {error}", file=sys.stderr)
        return 2

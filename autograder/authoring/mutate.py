"""``mlsys course mutate LAB``: how many small wrong answers do a lab's tests catch?

Mutation testing of the instructor's own exercises. An *exercise* is an nbgrader answer cell
(``solution: true, grade: false``); its own tests are the graded cells after it, up to the next
answer cell. The tool makes *mutants* of each reference answer, every one a single edit of its syntax
tree: syntactic ones (``+`` for ``-``, ``<`` for ``<=``, a constant off by one, a dropped statement) and
semantic ones, the mistakes students make (the caller's array updated in place, the global RNG for the
generator passed in, another rounding mode, a narrower dtype, ...; see :mod:`.mutation_operators`),
and runs the rest of the notebook with the mutant in place of the answer. A mutant is

* *killed* when some graded test cell after it, anywhere in the notebook, fails that passes with
  the reference answer (a process that dies counts as killed too),
* *timed out* when it runs past the time limit (a hanging answer scores nothing either),
* *survived* otherwise: a wrong answer that would score full marks, or an *equivalent* mutant, one
  that computes the same thing. The instructor lists those in ``equivalent_mutants.txt`` beside
  the notebook, one ``<mutant id>  # reason`` a line; they leave the score.

score = (killed + timed out) / (mutants - equivalent). A mutant's id, ``<grade_id>:<10 hex digits
of the SHA-256 of the mutated cell>``, stays the same while the answer cell does.

Only nbgrader's cell metadata is read, so any lab works. Execution is one process: it runs the
notebook's code cells once, in order, in one namespace; at each exercise it forks a child that runs
the unmutated answer and every cell after it (the *baseline*: all graded tests must pass), then a
child per mutant, which sends back through a pipe, as JSON, which graded test cells failed.
"""

from __future__ import annotations

import ast
import contextlib
import difflib
import faulthandler
import hashlib
import importlib
import itertools
import json
import linecache
import os
import select
import signal
import sys
import tempfile
import time
import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Iterator

import nbformat
from IPython.core.inputtransformer2 import TransformerManager

from ..edition.edition import build_edition
from ..paths import SOLUTIONS, check_lab
from .mutation_operators import FAMILIES

EQUIVALENTS_FILE = "equivalent_mutants.txt"
#: Set while a notebook runs: no plot windows, one BLAS thread per process (children are forked),
#: and nbgrader's marker, which the labs read to skip their timing demos while graded.
ENVIRONMENT = {"MPLBACKEND": "Agg", "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1",
               "NBGRADER_EXECUTION": "autograde"}
#: Default time limit of a mutant: this many times the baseline's run, but at least MIN_TIMEOUT s.
TIMEOUT_FACTOR, MIN_TIMEOUT = 5.0, 10.0
#: Time limit of the baseline run (the unmutated answer and the rest of the notebook), in seconds.
BASELINE_TIMEOUT = 600.0

#: mlsys_lib.compiler.codegen.CACHE_ENV (not imported here: the notebook imports the library it grades)
KERNEL_CACHE_ENV = "MLSYS_KERNEL_CACHE"

KILLED, TIMED_OUT, SURVIVED, EQUIVALENT = "killed", "timed out", "survived", "equivalent"


# ---- the notebook ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Cell:
    """A code cell of the notebook, as this tool runs it."""

    source: str            # Python: IPython syntax (magics) converted
    kind: str              # "answer" (an exercise), "test" (a graded test cell) or "code"
    grade_id: str | None
    number: int            # position among all the notebook's cells, markdown included

    @property
    def name(self) -> str:
        return self.grade_id or f"cell {self.number}"


@dataclass(frozen=True)
class Exercise:
    """An answer cell: ``cells[start]``; the cells up to ``cells[end]`` (the next answer) are its own."""

    grade_id: str
    start: int
    end: int

    def own_tests(self, cells: list[Cell]) -> tuple[str, ...]:
        """The graded test cells between this answer cell and the next."""
        return tuple(c.name for c in cells[self.start + 1:self.end] if c.kind == "test")


def _kind(metadata: dict) -> str:
    solution, grade = bool(metadata.get("solution")), bool(metadata.get("grade"))
    return "answer" if solution and not grade else "test" if grade and not solution else "code"


def read_cells(path: Path) -> list[Cell]:
    """The notebook's code cells, classified by their nbgrader metadata alone."""
    notebook = nbformat.read(path, as_version=4)
    transform = TransformerManager().transform_cell
    cells = []
    for number, cell in enumerate(notebook.cells):
        if cell.cell_type == "code":
            metadata = cell.metadata.get("nbgrader", {})
            cells.append(Cell(transform(cell.source), _kind(metadata), metadata.get("grade_id"), number))
    return cells


def find_exercises(cells: list[Cell]) -> list[Exercise]:
    """One exercise per answer cell, in notebook order."""
    starts = [i for i, cell in enumerate(cells) if cell.kind == "answer"]
    return [Exercise(cells[start].name, start, end) for start, end in zip(starts, starts[1:] + [len(cells)])]


def read_equivalents(path: Path) -> dict[str, str]:
    """Mutant id -> reason, from an equivalent-mutants file (``{}`` if there is none)."""
    if not path.exists():
        return {}
    listed = {}
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        mutant_id, _, reason = line.partition("#")
        mutant_id = mutant_id.strip()
        if mutant_id:
            if ":" not in mutant_id or " " in mutant_id:
                raise ValueError(f"{path}:{number}: expected '<grade_id>:<hash>  # reason', got {line!r}")
            listed[mutant_id] = reason.strip()
    return listed


# ---- mutants -------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Mutant:
    """One single-edit variant of an answer cell."""

    id: str
    operator: str
    line: int              # in the cell
    description: str
    source: str            # the whole mutated cell, as ast.unparse writes it


def _preorder(node: ast.AST) -> Iterator[ast.AST]:
    yield node
    for child in ast.iter_child_nodes(node):
        yield from _preorder(child)


def _is_text(node: ast.AST) -> bool:
    """A docstring (or any bare string statement) or an f-string: prose, not code to mutate."""
    return isinstance(node, ast.JoinedStr) or (
        isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str))


def _mutable_nodes(tree: ast.AST) -> Iterator[tuple[int, ast.AST]]:
    """(preorder index, node) of every node a mutant may edit: none inside docstrings and f-strings."""
    frozen: set[int] = set()
    for index, node in enumerate(_preorder(tree)):
        if id(node) in frozen:
            continue
        if _is_text(node):
            frozen.update(id(inner) for inner in ast.walk(node))
            continue
        yield index, node


class _Substitute(ast.NodeTransformer):
    def __init__(self, old: ast.AST, new: ast.AST):
        self.old, self.new = old, new

    def visit(self, node):
        return self.new if node is self.old else self.generic_visit(node)


def _snippets(before: str, after: str, width: int = 60) -> tuple[str, str]:
    """The first line of each, or of a node that spans lines (a function whose default or statement
    changed), the first line where they differ; cut to ``width``."""
    pairs = list(itertools.zip_longest(before.splitlines(), after.splitlines(), fillvalue=""))
    old, new = next(((a, b) for a, b in pairs if a != b), pairs[0])
    cut = lambda text: (text := text.strip()) if len(text) <= width else text[:width - 1] + "…"
    return cut(old), cut(new)


def _apply(source: str, index: int, edit: Callable[[ast.AST], ast.AST]) -> tuple[str, str, str]:
    """(mutated source, the node before, after) for ``edit`` of the ``index``-th node of ``source``."""
    tree = ast.parse(source)
    target = next(itertools.islice(_preorder(tree), index, None))
    before = ast.unparse(target)
    replacement = edit(target)
    tree = _Substitute(target, replacement).visit(tree)
    return (ast.unparse(ast.fix_missing_locations(tree)), *_snippets(before, ast.unparse(replacement)))


def _compiles(source: str) -> bool:
    try:
        compile(source, "<mutant>", "exec")
    except SyntaxError:
        return False
    return True


def mutant_id(grade_id: str, source: str) -> str:
    """``<grade_id>:<first 10 hex digits of the SHA-256 of the mutated cell>``."""
    return f"{grade_id}:{hashlib.sha256(source.encode()).hexdigest()[:10]}"


def operator_family(families: str) -> tuple:
    """The operators of ``families``: a family of :data:`.mutation_operators.FAMILIES` or ``"all"``."""
    if families == "all":
        return tuple(op for family in FAMILIES.values() for op in family)
    if families not in FAMILIES:
        raise ValueError(f"unknown operator family {families!r}: expected all, {', '.join(FAMILIES)}")
    return FAMILIES[families]


def generate_mutants(source: str, grade_id: str, families: str = "all") -> list[Mutant]:
    """Every single-edit mutant of ``source`` (an answer cell) that compiles, in source order.

    ``families``: the operators used, ``"ast"``, ``"semantic"`` (see :data:`.mutation_operators.FAMILIES`)
    or ``"all"``. Mutants whose unparsed source equals the original's or an earlier mutant's are left out.
    """
    operators = operator_family(families)
    tree = ast.parse(source)
    seen = {ast.unparse(tree)}
    mutants = []
    for index, node in _mutable_nodes(tree):
        for operator_edits in operators:
            for operator, edit in operator_edits(node):
                mutated, before, after = _apply(source, index, edit)
                if mutated in seen or not _compiles(mutated):
                    continue
                seen.add(mutated)
                line = getattr(node, "lineno", 0)
                mutants.append(Mutant(mutant_id(grade_id, mutated), operator, line,
                                      f"line {line}: {operator}: {before} → {after}", mutated))
    return mutants


def select_mutants(mutants: list[Mutant], limit: int | None) -> list[Mutant]:
    """At most ``limit`` of ``mutants``, spread over the operators: one of each operator in turn
    (operators by name, each one's mutants by id), returned in source order."""
    if limit is None or len(mutants) <= limit:
        return list(mutants)
    groups: dict[str, list[Mutant]] = {}
    for mutant in sorted(mutants, key=lambda m: m.id):
        groups.setdefault(mutant.operator, []).append(mutant)
    chosen: set[str] = set()
    for rank in range(max(len(group) for group in groups.values())):
        for operator in sorted(groups):
            if rank < len(groups[operator]) and len(chosen) < limit:
                chosen.add(groups[operator][rank].id)
    return [m for m in mutants if m.id in chosen]


# ---- forked children -------------------------------------------------------------------------------

@dataclass(frozen=True)
class ChildOutcome:
    """What a forked task came back with."""

    payload: dict | None   # what the task returned; None if it timed out or died
    seconds: float
    problem: str | None    # "timed out", "exit status 1", "killed by signal 11"; None if it returned


@dataclass
class _Child:
    key: str
    pid: int
    fd: int
    started: float
    data: bytes = b""


def _silence() -> None:
    """Point the (child) process's stdin, stdout and stderr at /dev/null, Python's streams too (they
    may write elsewhere than fd 1 and 2, as under pytest), and keep faulthandler from dumping."""
    faulthandler.disable()
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    os.close(null)
    sys.stdout = sys.stderr = open(os.devnull, "w")


def _forget_forkserver() -> None:
    """In a forked child: forget the parent's multiprocessing fork server, if the notebook started one
    (Lab 7's simulated ranks do), so that the child starts its own. Otherwise ``ensure_running``
    calls ``waitpid`` on a process that is not the child's and fails with ChildProcessError."""
    forkserver = sys.modules.get("multiprocessing.forkserver")
    server = getattr(forkserver, "_forkserver", None)
    if server is not None and getattr(server, "_forkserver_pid", None) is not None:
        server._forkserver_pid = server._forkserver_address = server._forkserver_alive_fd = None


def _fork(key: str, task: Callable[[], dict]) -> _Child:
    """Run ``task`` in a forked child, in a process group of its own, silenced; its JSON result comes
    back on one line of a pipe."""
    sys.stdout.flush()
    sys.stderr.flush()
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns
        status = 1
        try:
            os.setpgid(0, 0)
            os.close(read_fd)
            _silence()
            _forget_forkserver()
            message = memoryview((json.dumps(task()) + "\n").encode())
            while message:
                message = message[os.write(write_fd, message):]
            status = 0
        finally:
            os._exit(status)
    with contextlib.suppress(OSError):  # also here, so that killpg cannot come first; may have exited
        os.setpgid(pid, pid)
    os.close(write_fd)
    return _Child(key, pid, read_fd, time.monotonic())


def _finish(child: _Child, problem: str | None) -> ChildOutcome:
    """Kill what is left of the child's process group, reap the child, decode its result."""
    seconds = time.monotonic() - child.started
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(child.pid, signal.SIGKILL)
    os.close(child.fd)
    _, status = os.waitpid(child.pid, 0)
    if problem is None and child.data.endswith(b"\n"):
        return ChildOutcome(json.loads(child.data), seconds, None)
    if problem is None:
        problem = (f"killed by signal {os.WTERMSIG(status)}" if os.WIFSIGNALED(status)
                   else f"exit status {os.WEXITSTATUS(status)}")
    return ChildOutcome(None, seconds, problem)


def run_forked(tasks: dict[str, Callable[[], dict]], *, jobs: int, timeout: float) -> dict[str, ChildOutcome]:
    """Run each task in a forked child, at most ``jobs`` at once; one that runs longer than
    ``timeout`` seconds is killed with its process group. Returns key -> outcome."""
    queue = list(tasks.items())
    running: dict[int, _Child] = {}
    outcomes: dict[str, ChildOutcome] = {}
    try:
        while queue or running:
            while queue and len(running) < jobs:
                child = _fork(*queue.pop(0))
                running[child.fd] = child
            deadline = min(child.started for child in running.values()) + timeout
            ready, _, _ = select.select(list(running), [], [], max(0.0, deadline - time.monotonic()))
            for fd in ready:
                child = running[fd]
                chunk = os.read(fd, 1 << 16)
                child.data += chunk
                if chunk and not child.data.endswith(b"\n"):
                    continue
                outcomes[child.key] = _finish(running.pop(fd), None)
            now = time.monotonic()
            for fd, child in list(running.items()):
                if now - child.started >= timeout:
                    outcomes[child.key] = _finish(running.pop(fd), TIMED_OUT)
    finally:  # interrupted: leave no child behind
        for child in running.values():
            _finish(child, "interrupted")
    return outcomes


# ---- running the notebook -----------------------------------------------------------------------------

class _Shell:
    """What ``get_ipython()`` returns here: ``%matplotlib`` does nothing (the backend is Agg)."""

    def run_line_magic(self, name: str, line: str, *args) -> None:
        if name != "matplotlib":
            raise NotImplementedError(f"%{name} {line}: magics are not run by mlsys course mutate")


def _forget_library() -> None:
    for name in [name for name in sys.modules if name == "mlsys_lib" or name.startswith("mlsys_lib.")]:
        del sys.modules[name]


@contextlib.contextmanager
def _notebook_process(edition: str | None) -> Iterator[dict]:
    """This process made ready to run a notebook, yielding its namespace: the environment of
    :data:`ENVIRONMENT`, a fresh ``__main__`` module whose dict is the namespace (as in IPython), and
    for ``edition`` (a lab) that lab's grading edition of mlsys_lib, built into a temporary folder,
    first on ``sys.path``; kernels that Lab 9's schedules compile are kept in a folder of the run's
    (``$MLSYS_KERNEL_CACHE``), so that the forked children do not compile the same ones again. All of
    it undone on exit."""
    saved_environment = {name: os.environ.get(name) for name in [*ENVIRONMENT, KERNEL_CACHE_ENV]}
    saved_main, saved_path = sys.modules.get("__main__"), list(sys.path)
    main = types.ModuleType("__main__")
    main.get_ipython = _Shell  # get_ipython() makes one
    try:
        os.environ.update(ENVIRONMENT)
        with tempfile.TemporaryDirectory(prefix="mlsys-mutate-") as folder:
            (Path(folder) / "kernels").mkdir(mode=0o700)
            os.environ[KERNEL_CACHE_ENV] = str(Path(folder) / "kernels")
            if edition:
                sys.path.insert(0, str(build_edition(edition, Path(folder) / "edition").parent))
                _forget_library()
            sys.modules["__main__"] = main
            yield main.__dict__
    finally:
        for name, value in saved_environment.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        sys.path[:] = saved_path
        if saved_main is not None:
            sys.modules["__main__"] = saved_main
        if edition:
            _forget_library()


def _one_line(text: str, width: int = 200) -> str:
    line = next((line for line in text.splitlines() if line.strip()), "")
    return line if len(line) <= width else line[:width - 1] + "…"


def _execute(source: str, cell: Cell, namespace: dict) -> str | None:
    """Run one cell in ``namespace``: None if it ran, else what it raised, on one line. The cell's lines
    go into ``linecache``, as IPython puts them, for tracebacks and the checks that quote the line
    (``mlsys_lib.testing.frozen``)."""
    filename = f"<{cell.name}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(keepends=True), filename)
    try:
        exec(compile(source, filename, "exec"), namespace)
    except (Exception, SystemExit) as error:
        return _one_line(f"{type(error).__name__}: {error}")
    return None


def imported_modules(sources: Iterable[str]) -> list[str]:
    """The modules the top-level ``import`` statements of ``sources`` name, in order: ``import a.b`` and
    ``from a.b import c`` give ``a.b`` (and ``a.b.c``, which may be a submodule); relative imports and
    unparsable sources give none."""
    names: list[str] = []
    for source in sources:
        try:
            body = ast.parse(source).body
        except SyntaxError:
            continue
        for node in body:
            if isinstance(node, ast.Import):
                names += [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                names += [node.module, *(f"{node.module}.{alias.name}" for alias in node.names if alias.name != "*")]
    return list(dict.fromkeys(names))


def _preimport(sources: Iterable[str]) -> None:
    """Import, in this process, what the cells ``sources`` will import, so that the children forked next
    share it instead of each importing it again (Lab 10's tests import SciPy's statistics, half a second
    in each of its forty fixtures). A name that is not a module, or fails to import, is left to the cell."""
    with open(os.devnull, "w") as sink, contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
        for name in imported_modules(sources):
            if name in sys.modules:
                continue
            try:
                importlib.import_module(name)
            except Exception:  # noqa: BLE001 - not a module (a function of one), or the cell's own error
                pass


def _run_quietly(cells: list[Cell], namespace: dict) -> None:
    """Run ``cells`` in the parent, their output thrown away (their tests' results are the baseline's)."""
    with open(os.devnull, "w") as sink, contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
        for cell in cells:
            _execute(cell.source, cell, namespace)


def _killers(outcomes: dict[str, str | None], baseline: dict[str, str | None]) -> list[str]:
    """The test cells that failed in ``outcomes`` and passed in the baseline."""
    return [test for test, error in outcomes.items() if error is not None and baseline.get(test) is None]


_READS_ANYTHING = {"globals", "locals", "vars", "eval", "exec", "__import__"}


def _binds_and_reads(source: str) -> tuple[set[str], set[str] | None]:
    """The names a cell binds at top level, and every name it reads (None: it may read any, being
    unparsable or reaching names dynamically)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return set(), None
    binds: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            binds.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            binds |= {(alias.asname or alias.name).split(".")[0] for alias in node.names}
        else:
            binds |= {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    reads = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
    return binds, (None if reads & _READS_ANYTHING else reads)


def last_affected_test(cells: list[Cell], answers: dict[int, str]) -> int:
    """Index of the last cell that can see what ``answers`` (index -> source) change: a test cell that
    reads a name they bind, or one bound by a later cell that reads such a name, and so on. Test
    cells after it read nothing the answers touch, so they pass as with the reference answers."""
    touched: set[str] = set()
    last = min(answers)
    for index in range(min(answers), len(cells)):
        binds, reads = _binds_and_reads(answers.get(index, cells[index].source))
        if index in answers or reads is None or reads & touched:
            touched |= binds
            if cells[index].kind == "test" or reads is None:
                last = index
    return last


def _run_suffix(cells: list[Cell], start: int, answers: dict[int, str], namespace: dict,
                baseline: dict[str, str | None] | None = None, own_end: int = 0, stop: int | None = None) -> dict:
    """(In a child.) Run the cells from ``cells[start]`` to ``cells[stop]`` (default: the last),
    ``answers[i]`` in place of ``cells[i]``; return ``{"tests": {test grade_id: None or the error}}``.
    With a ``baseline``, stop once the answer is killed and the cells before ``cells[own_end]`` (the
    exercise's own tests) have run."""
    outcomes: dict[str, str | None] = {}
    for index in range(start, len(cells) if stop is None else stop + 1):
        cell = cells[index]
        error = _execute(answers.get(index, cell.source), cell, namespace)
        if cell.kind == "test":
            outcomes[cell.name] = error
        if baseline is not None and index >= own_end - 1 and _killers(outcomes, baseline):
            break
    return {"tests": outcomes}


# ---- results -----------------------------------------------------------------------------------------

@dataclass(frozen=True)
class MutantResult:
    """What became of one mutant."""

    mutant: Mutant
    status: str                      # KILLED, TIMED_OUT, SURVIVED or EQUIVALENT
    killed_by: tuple[str, ...] = ()  # the failing test cells, or how the process died


def _score(results: list[MutantResult]) -> float | None:
    counted = [r for r in results if r.status != EQUIVALENT]
    if not counted:
        return None
    return 100.0 * sum(r.status in (KILLED, TIMED_OUT) for r in counted) / len(counted)


@dataclass
class ExerciseResult:
    """The mutants of one exercise and what became of them."""

    grade_id: str
    original: str                            # the answer cell, as ast.unparse writes it
    own_tests: tuple[str, ...]
    results: list[MutantResult] = field(default_factory=list)
    baseline_failures: dict[str, str] = field(default_factory=dict)  # test -> error: not mutated

    def count(self, status: str) -> int:
        return sum(r.status == status for r in self.results)

    @property
    def score(self) -> float | None:
        return _score(self.results)


@dataclass
class Report:
    """The outcome of :func:`mutate_notebook`."""

    notebook: Path
    exercises: list[ExerciseResult]
    stale: list[str]                         # listed as equivalent, but no such mutant

    @property
    def score(self) -> float | None:
        return _score([r for e in self.exercises for r in e.results])

    def passed(self, min_score: float) -> bool:
        """No exercise failed its baseline and the total score is at least ``min_score`` (%)."""
        return (not any(e.baseline_failures for e in self.exercises)
                and (self.score is None or self.score >= min_score))


def _classify(mutant: Mutant, outcome: ChildOutcome, baseline: dict[str, str | None],
              equivalents: dict[str, str]) -> MutantResult:
    if outcome.problem == TIMED_OUT:
        return MutantResult(mutant, TIMED_OUT)
    if outcome.payload is None:
        return MutantResult(mutant, KILLED, (f"process died: {outcome.problem}",))
    killers = _killers(outcome.payload["tests"], baseline)
    if killers:
        return MutantResult(mutant, KILLED, tuple(killers))
    return MutantResult(mutant, EQUIVALENT if mutant.id in equivalents else SURVIVED)


def _mutate_exercise(cells: list[Cell], exercise: Exercise, mutants: list[Mutant], namespace: dict, *,
                     equivalents: dict[str, str], timeout: float | None, jobs: int,
                     log: Callable[[str], None]) -> ExerciseResult:
    """Baseline, then every mutant, each forked from the parent's state just before the exercise."""
    original = ast.unparse(ast.parse(cells[exercise.start].source))
    result = ExerciseResult(exercise.grade_id, original, exercise.own_tests(cells))

    def run(answer: str, baseline: dict | None = None) -> Callable[[], dict]:
        return lambda: _run_suffix(cells, exercise.start, {exercise.start: answer}, namespace, baseline, exercise.end)

    base = run_forked({"baseline": run(original)}, jobs=1, timeout=BASELINE_TIMEOUT)["baseline"]
    if base.payload is None:
        result.baseline_failures = {"(the notebook)": base.problem}
    else:
        result.baseline_failures = {t: error for t, error in base.payload["tests"].items() if error is not None}
    if result.baseline_failures:
        log(f"{exercise.grade_id}: not mutated, the unmutated notebook fails")
        return result
    baseline = base.payload["tests"]
    limit = timeout or max(MIN_TIMEOUT, TIMEOUT_FACTOR * base.seconds)
    log(f"{exercise.grade_id}: baseline {base.seconds:.1f} s; {len(mutants)} mutant(s), {limit:.0f} s each at most")
    outcomes = run_forked({m.id: run(m.source, baseline) for m in mutants}, jobs=jobs, timeout=limit)
    result.results = [_classify(m, outcomes[m.id], baseline, equivalents) for m in mutants]
    return result


def mutate_notebook(path: Path, *, edition: str | None = None, equivalents: Path | None = None,
                    timeout: float | None = None, jobs: int = 2, limit: int | None = None,
                    exercise: str | None = None, operators: str = "all",
                    log: Callable[[str], None] = lambda message: None) -> Report:
    """Mutation-test the exercises of the nbgrader source notebook ``path``.

    ``edition``: the lab whose grading edition of mlsys_lib the notebook imports (None: whatever
    ``mlsys_lib`` is importable). ``equivalents``: the equivalent-mutants file (default:
    ``equivalent_mutants.txt`` beside the notebook). ``timeout``: seconds per mutant (default:
    :data:`TIMEOUT_FACTOR` x the exercise's baseline run, at least :data:`MIN_TIMEOUT`). ``jobs``:
    mutants run at once. ``limit``: at most this many mutants per exercise (:func:`select_mutants`).
    ``exercise``: only the exercise with this grade_id. ``operators``: the operator family, ``"all"``,
    ``"ast"`` or ``"semantic"`` (:func:`generate_mutants`). ``log`` receives progress lines.
    """
    if jobs < 1 or (limit is not None and limit < 1) or (timeout is not None and timeout <= 0):
        raise ValueError(f"jobs and limit must be at least 1 and timeout positive, got {jobs}, {limit}, {timeout}")
    path = Path(path)
    cells = read_cells(path)
    exercises = find_exercises(cells)
    if exercise is not None and exercise not in [e.grade_id for e in exercises]:
        raise ValueError(f"{path.name} has no exercise {exercise!r}; its exercises are: "
                         f"{', '.join(e.grade_id for e in exercises) or '(none)'}")
    mutants = {e.grade_id: generate_mutants(cells[e.start].source, e.grade_id, operators) for e in exercises}
    listed = read_equivalents(Path(equivalents) if equivalents else path.with_name(EQUIVALENTS_FILE))
    known = {m.id for e in exercises for m in generate_mutants(cells[e.start].source, e.grade_id)}
    results = []
    with _notebook_process(edition) as namespace:
        done = 0  # the cells before cells[done] have run in the parent
        for e in exercises:
            _run_quietly(cells[done:e.start], namespace)
            done = e.start
            if exercise in (None, e.grade_id):
                results.append(_mutate_exercise(cells, e, select_mutants(mutants[e.grade_id], limit), namespace,
                                                equivalents=listed, timeout=timeout, jobs=jobs, log=log))
            if exercise == e.grade_id:
                break
    return Report(path, results, sorted(set(listed) - known))


def failing_tests(path: Path, variants: dict[str, dict[str, str]], *, edition: str | None = None,
                  timeout: float = BASELINE_TIMEOUT, jobs: int = 2) -> dict[str, set[str] | str]:
    """The graded test cells each variant of the notebook fails, found by forking (fast).

    A *variant* (a wrong-answer fixture) replaces some answer cells: ``{grade_id: source}``. Each runs
    in a child forked just before its first replaced cell, up to the last test that can see what it
    changes (:func:`last_affected_test`, which follows names through the notebook); the tests before
    and after those are taken to pass, as with the reference answers. Returns name -> the failing
    tests' grade_ids, or what went wrong ("timed out", "exit status 1") when the child gave no answer.
    """
    cells = read_cells(path)
    index = {cell.grade_id: i for i, cell in enumerate(cells) if cell.kind == "answer"}
    transform = TransformerManager().transform_cell
    runs: dict[int, dict[str, dict[int, str]]] = {}  # first replaced cell -> variant -> answers
    for name, answers in variants.items():
        unknown = sorted(set(answers) - set(index))
        if unknown or not answers:
            raise ValueError(f"variant {name!r} replaces no answer cell of {path.name}: {unknown or 'nothing'}")
        replaced = {index[grade_id]: transform(source) for grade_id, source in answers.items()}
        runs.setdefault(min(replaced), {})[name] = replaced

    def session() -> dict:
        results: dict[str, list[str] | str] = {}
        with _notebook_process(edition) as namespace:
            done = 0
            for start in sorted(runs):
                _run_quietly(cells[done:start], namespace)
                done = start
                _preimport(cell.source for cell in cells[start:])
                tasks = {name: (lambda start=start, answers=answers: _run_suffix(
                    cells, start, answers, namespace, stop=last_affected_test(cells, answers)))
                    for name, answers in runs[start].items()}
                for name, outcome in run_forked(tasks, jobs=jobs, timeout=timeout).items():
                    results[name] = (outcome.problem if outcome.payload is None else
                                     sorted(test for test, error in outcome.payload["tests"].items() if error is not None))
        return results

    # The notebook runs in a child of its own, so that what it leaves in this process (the grading
    # edition's modules, a multiprocessing fork server started on them, Numba's state) goes with it.
    whole = run_forked({"session": session}, jobs=1, timeout=timeout * (len(runs) + 1) + 60)["session"]
    if whole.payload is None:
        raise RuntimeError(f"running the variants of {path.name} failed: {whole.problem}")
    return {name: set(lost) if isinstance(lost, list) else lost for name, lost in whole.payload.items()}


def mutate_lab(lab: str, *, library: bool = False, **options) -> Report:
    """:func:`mutate_notebook` of ``solutions/<lab>/<lab>.ipynb``, with the lab's grading edition of
    mlsys_lib (``library``: the repository's library instead). ``options`` as for mutate_notebook."""
    check_lab(lab)
    notebook = SOLUTIONS / lab / f"{lab}.ipynb"
    if not notebook.exists():
        raise ValueError(f"{lab} has no source notebook {notebook}")
    return mutate_notebook(notebook, edition=None if library else lab, **options)


# ---- the report ----------------------------------------------------------------------------------------

def _percent(score: float | None) -> str:
    return "-" if score is None else f"{score:.1f}%"


def _table(rows: list[tuple]) -> list[str]:
    widths = [max(len(str(row[i])) for row in rows) for i in range(len(rows[0]))]
    return ["  ".join(str(cell).ljust(w) if i == 0 else str(cell).rjust(w) for i, (cell, w) in enumerate(zip(row, widths)))
            for row in rows]


def _diff(original: str, mutant: Mutant, grade_id: str) -> list[str]:
    return list(difflib.unified_diff(original.splitlines(), mutant.source.splitlines(),
                                     f"{grade_id} (reference)", mutant.id, n=2, lineterm=""))


def format_report(report: Report, *, quiet: bool = False) -> str:
    """The table (a row per exercise, then the total), problems, and unless ``quiet`` every survivor
    with its diff and every mutant only the tests of later exercises killed."""
    statuses = (KILLED, TIMED_OUT, SURVIVED, EQUIVALENT)
    rows = [("exercise", "mutants", *statuses, "score")]
    for e in report.exercises:
        rows.append((e.grade_id, len(e.results), *(e.count(s) for s in statuses), _percent(e.score)))
    every = [r for e in report.exercises for r in e.results]
    rows.append(("total", len(every), *(sum(r.status == s for r in every) for s in statuses), _percent(report.score)))
    lines = [f"mutation testing of {report.notebook}", *_table(rows)]
    for e in report.exercises:
        for test, error in e.baseline_failures.items():
            lines.append(f"{e.grade_id}: not mutated: the unmutated notebook fails {test}: {error}")
    for stale in report.stale:
        lines.append(f"stale in {EQUIVALENTS_FILE}: {stale} is no mutant of the current notebook")
    if quiet:
        return "\n".join(lines)
    for e in report.exercises:
        for r in e.results:
            if r.status == SURVIVED:
                lines += ["", f"survived {r.mutant.id}  {r.mutant.description}", *_diff(e.original, r.mutant, e.grade_id)]
    for e in report.exercises:
        for r in e.results:
            if r.status == KILLED and not set(r.killed_by) & set(e.own_tests):
                lines.append(f"\nkilled, but not by a test of {e.grade_id} ({', '.join(r.killed_by)}): "
                             f"{r.mutant.id}  {r.mutant.description}")
    return "\n".join(lines)

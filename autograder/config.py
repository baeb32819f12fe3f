"""The nbgrader configuration of the course, built in one place.

:func:`course_config` holds the course's defaults. ``nbgrader_config.py`` at the repository root
starts from them and is where an instructor changes settings (``c.Sandbox.memory_mb = 8192``,
``c.Execute.timeout = 300``); plain ``nbgrader`` commands and Formgrader read that file (from the
repository root, or anywhere through the copy :func:`install_into_environment` puts into the virtual
environment), and so does the course tool (:func:`load_config`), so they never disagree.
``$MLSYS_CONFIG`` names another such file.
"""

from __future__ import annotations

import ast
import atexit
import functools
import hashlib
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

from jupyter_server_mathjax.app import STATIC_ASSETS_PATH as MATHJAX
from traitlets import Bool, Int, List, Unicode
from traitlets.config import Config, Configurable
from traitlets.config.loader import PyFileConfigLoader

from .cells import grade_cells
from .paths import LABS, REPO, SOLUTIONS, course_dir

#: Name of the kernel every graded notebook runs on, whatever kernel the student's file names.
GRADING_KERNEL = "mlsys-grader"

#: Seconds one cell may run before nbgrader interrupts it (first Numba compiles take a few seconds).
CELL_TIMEOUT_S = 180

#: The settings file, where nbgrader looks for it in every course: the folder it runs in.
CONFIG_FILE = REPO / "nbgrader_config.py"

#: Environment variable naming the settings file to use instead of :data:`CONFIG_FILE`.
CONFIG_ENV = "MLSYS_CONFIG"

#: Set by the course tool, so the settings file skips what only plain nbgrader needs.
TOOL_ENV = "MLSYS_COURSE_TOOL"

#: The course's page templates: they override only nbgrader's MathJax macro, so that feedback pages and
#: Formgrader's manual-grading page load MathJax from a local copy (the jupyter-server-mathjax
#: package), never from a CDN; every other asset of those pages is local already (nbgrader's own).
#: :func:`install_grading_kernel` puts them where nbconvert finds them first, whatever template
#: settings Formgrader imposes.
TEMPLATES = Path(__file__).resolve().with_name("templates")
#: The course folder's copy of MathJax, which feedback pages load by a relative URL (templates/feedback/).
MATHJAX_COPY = "mathjax"


class Sandbox(Configurable):
    """How student notebooks run while graded; set in ``nbgrader_config.py`` as ``c.Sandbox.<name>``.

    What the sandbox shows and hides is in :mod:`autograder.sandbox.sandbox` and the instructor guide's
    page docs/instructor/grading-security.md.
    """

    bubblewrap = Bool(True, help="Run each kernel inside bubblewrap when the bwrap command exists.").tag(config=True)
    cpu_seconds = Int(600, help="CPU seconds one notebook's kernel may use in all. A kernel stopped at this "
                                "limit fails the cell it was running and the cells after it; the notebook is "
                                "graded so, once, not again.").tag(config=True)
    wall_seconds = Int(900, help="Wall-clock seconds for grading one student's notebook in all: kernel start "
                                 "included, and every attempt together (a notebook graded again after a cell "
                                 "killed its kernel gets what the earlier attempts left); cells after that are "
                                 "not run and fail, and no attempt starts once nothing is left.").tag(config=True)
    memory_mb = Int(4096, help="Address space of the kernel, MiB.").tag(config=True)
    processes = Int(256, help="Processes the kernel may have at once, its threads not counted (bubblewrap's "
                               "init and the kernel among them): the supervisor counts the sandbox's processes "
                               "every 30 ms and, past this many, stops the kernel as a fork bomb; that cell and "
                               "the cells after it fail with that reason (with bubblewrap only). Also part of "
                               "the task cap, see `threads`.").tag(config=True)
    threads = Int(1024, help="Room for threads in the task cap: Linux counts a thread like a process, and the "
                             "kernel's tasks (processes and threads together) are capped at processes + threads, "
                             "by a cgroup's pids.max where one can be made and always by RLIMIT_NPROC. 1024 "
                             "fits Numba's CUDA simulator, which runs one thread per GPU thread of a block (a "
                             "block holds at most 1024).").tag(config=True)
    cgroup = Bool(True, help="Cap the kernel's tasks with a pids cgroup of its own too, where one can be made "
                             "(grading as root, the pids controller mounted); RLIMIT_NPROC caps them in any "
                             "case.").tag(config=True)
    file_mb = Int(256, help="Largest file the kernel may write, MiB.").tag(config=True)
    disk_mb = Int(512, help="All the kernel may write, MiB: the size of its private /tmp (its working "
                            "folder) and of its /dev/shm, both in memory and gone when it ends.").tag(config=True)
    output_kb = Int(4096, help="Output a notebook may produce while graded, KiB; the rest is dropped.").tag(config=True)
    notebook_mb = Int(32, help="Largest submitted notebook accepted, MiB.").tag(config=True)
    workers = Int(0, help="Notebooks graded at once; 0 means one per CPU core.").tag(config=True)
    cluster = Unicode("", help="Address of a Dask scheduler (tcp://host:8786) whose workers grade the chunks "
                               "instead of local processes; each worker needs the course installed and "
                               "bubblewrap (see docs/instructor/shared-gradebook-and-cluster.md). Empty: "
                               "local processes.").tag(config=True)
    chunk_size = Int(8, help="Most students a worker grades with one nbgrader run (nbgrader's start-up is "
                             "paid per chunk); 1 grades each alone.").tag(config=True)
    uid = Int(200000, help="When grading as root, each kernel runs as its own unprivileged user id, "
                           "counted up from this one.").tag(config=True)
    extra_paths = List(Unicode(), help="More folders or files the kernel may read (shown read-only at the "
                                       "same path), e.g. a dataset.").tag(config=True)
    environment = List(Unicode(), help="Names of environment variables passed into the kernel besides the "
                                       "course's own (the kernel starts from an empty environment).").tag(config=True)


def sandbox_settings(config: Config, lab: str | None = None, edition: Path | None = None) -> dict:
    """The kernel launcher's settings (see :mod:`autograder.sandbox.sandbox`): the limits, and for ``lab`` the
    digests of its graded test cells and the modules they import (the kernel guard pins those before
    student code runs), and the grading edition of ``mlsys_lib`` to show instead of the repository's."""
    sandbox = Sandbox(config=config)
    tests = grade_cells(lab) if lab else {}
    return {
        "bubblewrap": sandbox.bubblewrap, "cpu_seconds": sandbox.cpu_seconds, "wall_seconds": sandbox.wall_seconds,
        "memory_mb": sandbox.memory_mb, "processes": sandbox.processes, "threads": sandbox.threads,
        "cgroup": sandbox.cgroup, "file_mb": sandbox.file_mb,
        "disk_mb": sandbox.disk_mb, "output_kb": sandbox.output_kb, "uid": sandbox.uid,
        "extra_paths": list(sandbox.extra_paths), "environment": list(sandbox.environment),
        "test_cells": sorted(cell_digest(source) for source in tests.values()),
        "pinned": sorted({name for source in tests.values() for name in imported_modules(source)}),
        "edition": str(edition) if edition else None,
    }


def cell_digest(source: str) -> str:
    """How the grader and its kernel guard name a cell's source without showing it."""
    return hashlib.sha256(source.strip().encode()).hexdigest()


def imported_modules(source: str) -> set[str]:
    """The modules a cell imports (``import a.b as c`` -> ``a.b``; ``from a.b import c`` -> ``a.b``)."""
    names = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module)
    return names


def paths_config(root: Path | None = None, release_dir: Path | None = None) -> Config:
    """Where nbgrader reads and writes: ``source`` is ``solutions/``, ``release`` is ``labs/`` (or
    ``release_dir``); submissions, autograded copies and feedback live under the absolute course root
    ``root`` (default :func:`course_dir`), and so does the gradebook unless the settings name another
    (:func:`gradebook_url`)."""
    root = Path(root or course_dir()).resolve()
    c = Config()
    c.CourseDirectory.course_id = "mlsys"
    c.CourseDirectory.root = str(root)
    c.CourseDirectory.source_directory = str(SOLUTIONS)
    c.CourseDirectory.release_directory = str(Path(release_dir or LABS).resolve())
    c.Exchange.root = str(root / "exchange")
    c.NbGrader.logfile = str(root / "nbgrader.log")
    return c


def course_config(root: Path | None = None, release_dir: Path | None = None) -> Config:
    """The course's default nbgrader configuration, with the paths of :func:`paths_config`."""
    c = paths_config(root, release_dir)
    # Everything a student needs is in the notebook; do not copy stray files of the source folder.
    c.CourseDirectory.ignore = [".ipynb_checkpoints", "*.pyc", "__pycache__", "feedback",
                                # the lab's guarded references (autograder/edition/references.py)
                                "references.txt",
                                # the instructor's mutation-testing notes (autograder/authoring/mutate.py)
                                "equivalent_mutants.txt"]
    c.ClearSolutions.code_stub = {"python": "# YOUR CODE HERE\nraise NotImplementedError()"}
    # nbgrader's list, with an Execute that reports kernel deaths, then the sanitizer that makes the
    # autograded copy (rendered by Formgrader and JupyterLab) run nothing a student's code printed.
    c.Autograde.autograde_preprocessors = [
        "autograder.run.execute.SandboxedExecute", "autograder.feedback.feedback.SanitizeNotebook",
        "nbgrader.preprocessors.IgnorePattern",
        "nbconvert.preprocessors.ClearMetadataPreprocessor", "nbgrader.preprocessors.LimitOutput",
        "nbgrader.preprocessors.SaveAutoGrades", "nbgrader.preprocessors.AssignLatePenalties",
        "nbgrader.preprocessors.CheckCellMetadata",
    ]
    c.Execute.kernel_name = GRADING_KERNEL
    c.Execute.timeout = CELL_TIMEOUT_S
    # nbclient waits this long for a cell's output after its reply; on a loaded grader 4 s (the default)
    # fails whole notebooks. The output must not be skipped: a test's failure arrives as output.
    c.Execute.iopub_timeout = 30
    # nbclient's cell timings would be metadata the sanitizer strips and reports for every notebook.
    c.Execute.record_timing = False
    c.KernelManager.transport = "ipc"  # Unix sockets: the sandboxed kernel has no network at all
    # A graded kernel that has not ended half this long after its shutdown request gets SIGTERM (the
    # sandbox supervisor passes it on and reports the exit), after the rest SIGKILL. A backstop: the
    # sandboxed kernel ends by itself a moment after answering (autograder/sandbox/kernel/shutdown.py,
    # which removed a race in ipykernel that left one kernel in three waiting for this SIGTERM); much
    # less than 3 s kills the supervisor of a sandbox whose private folders hold many files before it reports.
    c.KernelManager.shutdown_wait_time = 3.0
    # The feedback a student reads must not show hidden tests: neither their source (nbgrader
    # restores it into the autograded copy; ClearHiddenTests removes it) nor anything the hidden tests
    # made the student's code print, raise or keep (SafeFeedback: verdicts, redaction, sanitizing).
    c.GenerateFeedback.preprocessors = [
        "nbgrader.preprocessors.GetGrades",
        "autograder.feedback.feedback.SafeFeedback",
        "nbgrader.preprocessors.ClearHiddenTests",
        "nbconvert.preprocessors.CSSHTMLHeaderPreprocessor",
    ]
    # A second layer wherever nbconvert renders HTML (feedback, Formgrader): its templates clean
    # Markdown and HTML outputs and skip JavaScript and widgets. nbconvert's own cleaner (bleach)
    # would escape headings and paragraphs, so the templates use the course's allow-list instead.
    c.HTMLExporter.sanitize_html = True
    c.HTMLExporter.filters = {"clean_html": "autograder.feedback.safe_html.clean_html"}
    # MathJax from a local copy, for feedback and Formgrader alike: the course's templates (TEMPLATES)
    # lie in the course folder's Jupyter data folder, first on JUPYTER_PATH (install_grading_kernel),
    # where nbconvert looks before its own; Formgrader resets the template settings themselves.
    return c


def install_mathjax(root: Path | None = None) -> Path:
    """Copy MathJax into the course folder, where feedback pages find it (``<root>/mathjax/``, made
    again when the installed MathJax changed); returns the copy."""
    copy = Path(root or course_dir()).resolve() / MATHJAX_COPY
    current = copy / "MathJax.js"
    if not current.is_file() or current.read_bytes() != (MATHJAX / "MathJax.js").read_bytes():
        shutil.rmtree(copy, ignore_errors=True)
        shutil.copytree(MATHJAX, copy)
    return copy


def load_config(root: Path | None = None, release_dir: Path | None = None) -> Config:
    """The settings file's configuration (defaults plus the instructor's changes), then, as nbgrader
    does, the course root's own ``nbgrader_config.py`` if it has one, for ``root``."""
    path = Path(os.environ.get(CONFIG_ENV) or CONFIG_FILE).resolve()
    if not path.is_file():
        raise ValueError(f"{CONFIG_ENV}={path}: no such settings file")
    os.environ[TOOL_ENV] = "1"
    c = PyFileConfigLoader(path.name, path=str(path.parent)).load_config()
    local = Path(root or course_dir()).resolve() / "nbgrader_config.py"
    if local.is_file():
        c.merge(PyFileConfigLoader(local.name, path=str(local.parent)).load_config())
    c.merge(paths_config(root, release_dir))
    return c


def gradebook_url(root: Path | None = None) -> str:
    """The course gradebook's database URL (SQLAlchemy's form): nbgrader's ``c.CourseDirectory.db_url``
    where the settings give one (a PostgreSQL server the teaching team shares,
    ``postgresql://user@host/mlsys``), else nbgrader's default, ``sqlite:///<root>/gradebook.db``."""
    from nbgrader.coursedir import CourseDirectory

    return CourseDirectory(config=load_config(root)).db_url


def gradebook_file(url: str) -> Path | None:
    """The file of a SQLite gradebook ``url``; None for a database server."""
    return Path(url[len("sqlite:///"):]) if url.startswith("sqlite:///") else None


def kernel_spec() -> dict:
    """The grading kernelspec: this interpreter runs the launcher, which finds the repository's code
    from any working folder (the sandbox is applied when grading settings are given)."""
    return {
        "argv": [sys.executable, "-m", "autograder.sandbox", "{connection_file}"],
        "env": {"PYTHONPATH": str(REPO)},
        "display_name": "mlsys grader",
        "language": "python",
        "interrupt_mode": "message",  # a signal to the launcher would not reach a kernel in a PID namespace
    }


def write_kernel_spec(kernels: Path) -> Path:
    """Write the grading kernelspec into the Jupyter ``kernels`` folder; returns its folder."""
    spec_dir = Path(kernels) / GRADING_KERNEL
    write_if_changed(spec_dir / "kernel.json", json.dumps(kernel_spec(), indent=1).encode())
    return spec_dir


def write_if_changed(path: Path, data: bytes) -> None:
    """Make ``path`` hold ``data``, atomically (a new file renamed over it) and only if it does not
    already: processes that grade and render at once read these files while others write them."""
    if path.is_file() and path.read_bytes() == data:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    fresh = path.with_name(f".{path.name}.{os.getpid()}")
    fresh.write_bytes(data)
    os.replace(fresh, path)


def install_grading_kernel(root: Path | None = None) -> dict[str, str]:
    """Write the grading kernelspec and the course's nbconvert templates (:data:`TEMPLATES`: MathJax
    from a local copy) into the Jupyter data folder of the course root.

    Returns the environment variables under which Jupyter finds both first, whatever kernels and
    templates the user has installed elsewhere.
    """
    jupyter_path = Path(root or course_dir()).resolve() / "jupyter"
    write_kernel_spec(jupyter_path / "kernels")
    for template in TEMPLATES.glob("*/*.j2"):
        write_if_changed(jupyter_path / "nbconvert" / "templates" / template.relative_to(TEMPLATES),
                         template.read_bytes())
    return {"JUPYTER_PATH": first_on(os.environ.get("JUPYTER_PATH", ""), jupyter_path)}


def first_on(search_path: str, folder: Path) -> str:
    """``search_path`` (``PATH``-like) with ``folder`` first and only there: settings read again
    (Formgrader reads them on every request) leave it as it was."""
    others = [entry for entry in search_path.split(os.pathsep) if entry and entry != str(folder)]
    return os.pathsep.join([str(folder), *others])


#: What the virtual environment's copy of the settings file holds: it loads the repository's.
ENVIRONMENT_CONFIG = """# Installed by `make` (autograder.config.install_into_environment): nbgrader run from any folder
# with this environment reads the course's settings file.
load_subconfig({path!r})  # noqa: F821 (provided by traitlets)
"""


def install_into_environment(prefix: Path | None = None) -> list[Path]:
    """Install the grading kernelspec and a settings file that loads :data:`CONFIG_FILE` into the
    Jupyter folders of the environment at ``prefix`` (default: this interpreter's), so that nbgrader,
    Formgrader and JupyterLab of this environment find both from any folder. Returns what it wrote."""
    prefix = Path(prefix or sys.prefix)
    config = prefix / "etc" / "jupyter" / "nbgrader_config.py"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(ENVIRONMENT_CONFIG.format(path=str(CONFIG_FILE)))
    return [write_kernel_spec(prefix / "share" / "jupyter" / "kernels") / "kernel.json", config]


@functools.lru_cache(maxsize=None)
def socket_folder() -> Path:
    """A short private folder for the Unix sockets of the kernels this process starts (removed at
    exit); with several graded kernels under their own user ids (grading as root) any may add sockets."""
    folder = Path(tempfile.mkdtemp(prefix="mlsys-ipc-"))
    if os.geteuid() == 0:
        os.chmod(folder, 0o1777)
    atexit.register(shutil.rmtree, folder, True)
    return folder


def plain_nbgrader_setup(c: Config) -> None:
    """What plain nbgrader (and Formgrader) needs beyond :func:`course_config`; the course tool,
    which arranges both per run, skips it (``$MLSYS_COURSE_TOOL``).

    The grading kernelspec and the course's templates are made findable, this environment's commands
    too, the feedback pages' MathJax is copied into the course folder, and the kernels' sockets get
    an absolute path: with the ``ipc`` transport a relative one would be taken relative to the grader
    by the grader and to the notebook's folder by the kernel, which then never answer each other.
    """
    if os.environ.get(TOOL_ENV):
        return
    os.environ.update(install_grading_kernel())
    install_mathjax()
    # nbgrader runs this environment's `alembic` when it creates a gradebook, activated or not
    os.environ["PATH"] = first_on(os.environ.get("PATH", ""), Path(sys.executable).parent)
    c.KernelManager.ip = str(socket_folder() / "kernel")


def main(argv: list[str] | None = None) -> None:
    """``python -m autograder.config install``: what ``make`` runs after installing the package."""
    if (argv if argv is not None else sys.argv[1:]) != ["install"]:
        sys.exit("usage: python -m autograder.config install")
    for path in install_into_environment():
        print(f"installed {path}")


if __name__ == "__main__":
    main()

"""Grading a class: plain serial ``nbgrader autograde`` vs ``mlsys course grade`` (parallel, sandboxed).

    python benchmarks/grading.py [--students 40] [--lab lab01_tensors]
    python benchmarks/grading.py --cluster [--students 12] [--lab lab04_memory]

With ``--cluster`` it instead grades the class on a local Dask cluster (a ``dask scheduler`` and one,
then two, ``dask worker`` processes of one thread each, tests/services.py) and prints students per second
and seconds per notebook for each: the figures behind docs/instructor/shared-gradebook-and-cluster.md.

Makes N submissions of one lab (a mix of correct, wrong and adversarial ones, cycling through the
lab's samples and the attacks from tests/adversarial_corpus.py that plain nbgrader survives and that
do not wait on timeouts), grades them both ways on fresh course folders in this run, and prints both
times, the ratio and the seconds per submission. Left out of the mix: a copied test cell (plain
nbgrader stops the whole batch at it: "old version of the nbgrader metadata") and the memory bomb
(kept out so that the two mixes stay as they were measured before). Plain nbgrader runs the same notebooks with the course's settings (from
the repository root, where it finds ``nbgrader_config.py``), each in the same sandbox, one at a time
(``nbgrader autograde LAB``, then ``nbgrader generate_feedback LAB`` for the same work as
``mlsys course grade``, which also writes the reports). Run it on a quiet machine.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
# this folder's distributed.py (a benchmark) would hide Dask's `distributed` package
sys.path[:] = [str(REPO), str(REPO / "tests")] + [p for p in sys.path if Path(p or ".").resolve() != REPO / "benchmarks"]

import nbformat  # noqa: E402

from adversarial_corpus import CASES, Context, write_case  # noqa: E402
from autograder import course  # noqa: E402
from autograder.authoring import samples  # noqa: E402
from autograder.config import TOOL_ENV  # noqa: E402
from autograder.paths import SOLUTIONS  # noqa: E402

FAST_ATTACKS = ["wrong_kernel", "sys_exit", "enormous_output", "asks_input"]


def make_class(lab: str, students: int, folder: Path) -> list[str]:
    """Write ``students`` submissions into ``folder/<student>/<lab>.ipynb``; return their names."""
    pool = folder / "pool"
    kinds = list(samples.build_samples(lab, pool))
    solved = nbformat.read(pool / "solution" / f"{lab}.ipynb", as_version=4)
    ctx = Context(str(SOLUTIONS), str(folder / "course"), 9)
    for case in (c for c in CASES if c.name in FAST_ATTACKS and lab == "lab01_tensors"):
        write_case(case, solved, ctx, pool / case.name / f"{lab}.ipynb")
        kinds.append(case.name)
    names = []
    for i in range(students):
        kind = kinds[i % len(kinds)]
        name = f"s{i:03d}_{kind}"
        (folder / "class" / name).mkdir(parents=True)
        shutil.copyfile(pool / kind / f"{lab}.ipynb", folder / "class" / name / f"{lab}.ipynb")
        names.append(name)
    return names


def plain_nbgrader(lab: str, names: list[str], folder: Path) -> tuple[float, float]:
    """Seconds for ``nbgrader autograde``, then for ``nbgrader generate_feedback``, over the class,
    serially, on a fresh course folder."""
    root = folder / "plain"
    course.prepare_gradebook(lab, root)
    for name in names:
        dest = root / "submitted" / name / lab
        dest.mkdir(parents=True)
        shutil.copyfile(folder / "class" / name / f"{lab}.ipynb", dest / f"{lab}.ipynb")
    env = dict(os.environ, MLSYS_COURSE_DIR=str(root), PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}")
    env.pop(TOOL_ENV, None)  # set in this process by the course tool's gradebook step; nbgrader's own is measured
    seconds = []
    for step in ("autograde", "generate_feedback"):
        start = time.perf_counter()
        subprocess.run([str(Path(sys.executable).parent / "nbgrader"), step, lab, "--force"],
                       cwd=REPO, env=env, check=False, capture_output=True)
        seconds.append(time.perf_counter() - start)
    graded = len(list((root / "autograded").glob(f"*/{lab}/{lab}.ipynb")))
    if graded < len(names):
        print(f"warning: plain nbgrader autograded only {graded} of {len(names)} notebooks: the times do not compare")
    return seconds[0], seconds[1]


def course_grade(lab: str, folder: Path) -> float:
    """Seconds for ``mlsys course grade`` over the class (parallel, sandboxed, feedback, reports),
    the lab already in the gradebook as for plain nbgrader."""
    course.prepare_gradebook(lab, folder / "tool")
    start = time.perf_counter()
    course.grade(lab, folder / "class", root=folder / "tool", log=lambda message: None)
    return time.perf_counter() - start


def on_cluster(lab: str, folder: Path) -> list[tuple[int, float]]:
    """(workers, seconds) for ``mlsys course grade --cluster`` over the class on 1, then 2, local Dask workers."""
    from services import dask_cluster

    timings = []
    (folder / "dask").mkdir()
    with dask_cluster(folder / "dask") as cluster:
        for workers in (1, 2):
            cluster.add_worker(f"w{workers}")
            root = folder / f"cluster{workers}"
            course.prepare_gradebook(lab, root)
            start = time.perf_counter()
            course.grade(lab, folder / "class", root=root, cluster=cluster.address, log=lambda message: None)
            timings.append((workers, time.perf_counter() - start))
    return timings


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--students", type=int, default=40)
    parser.add_argument("--lab", default="lab01_tensors")
    parser.add_argument("--cluster", action="store_true", help="students per second on 1 and 2 local Dask workers")
    args = parser.parse_args()
    if args.cluster:
        with tempfile.TemporaryDirectory() as tmp:
            n = len(make_class(args.lab, args.students, Path(tmp)))
            for workers, seconds in on_cluster(args.lab, Path(tmp)):
                print(f"{n} submissions of {args.lab} on {workers} Dask worker(s) of one thread ({os.cpu_count()} cores): "
                      f"{seconds:6.1f} s, {n / seconds:5.2f} students/s, {seconds * workers / n:5.2f} worker-s/notebook")
        return
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        names = make_class(args.lab, args.students, folder)
        autograde, feedback = plain_nbgrader(args.lab, names, folder)
        tool = course_grade(args.lab, folder)
    n, plain = len(names), autograde + feedback
    print(f"{n} submissions of {args.lab} on {os.cpu_count()} cores")
    print(f"  nbgrader autograde (serial, sandboxed):         {autograde:7.1f} s  {autograde / n:5.2f} s/submission")
    print(f"  nbgrader autograde + generate_feedback:         {plain:7.1f} s  {plain / n:5.2f} s/submission")
    print(f"  mlsys course grade (parallel, sandboxed, both): {tool:7.1f} s  {tool / n:5.2f} s/submission")
    print(f"  speed-up vs autograde alone: {autograde / tool:.2f}x; vs the same work: {plain / tool:.2f}x "
          "(target >= 2.5x)")


if __name__ == "__main__":
    main()

"""Every lab's student kit runs top to bottom (issue #33): a student who gets the kit
(``mlsys course bundle --for LAB``) installs its wheel and opens the lab's notebook; with the
exercises written, every cell runs (demos call the student's own functions, never a reference the kit
stubs), and with the exercises blank only the exercises' own cells (answers, tests) and the demos that
say which exercise they need fail (every such demo does). Here the kit's wheel goes into a fresh
virtual environment of its own (the project's dependencies visible, the project's ``mlsys_lib`` not)
and the kit's copy of the notebook runs in a kernel of that environment.
"""

import re
import subprocess
import sys
import sysconfig
import time
import zipfile
from pathlib import Path

import nbformat
import pytest

from autograder.cells import fill, solution_cells
from autograder.edition.bundle import bundle
from autograder.edition.references import run_notebook
from autograder.paths import lab_names

#: The first line of a demo cell that calls an exercise's answer: "# Needs exercise 3 (`paged_attention`)."
NEEDS = re.compile(r"# Needs exercises? \d[^\n]*\(`[^`]+`[^\n]*\)\.")
STUB = "student kit of mlsys_lib"  # in the message of every stub of the kit (autograder.edition.kit)


def _fresh_venv(folder: Path, wheel: Path) -> Path:
    """A virtual environment in ``folder`` with ``wheel`` installed (no dependencies): the project's
    environment's packages are on its path through a .pth file, its editable ``mlsys_lib`` is not.
    Returns its python."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(folder)], check=True)
    python = folder / "bin" / "python"
    installed = subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps",
                                "--no-index", "-q", str(wheel)], capture_output=True, text=True)
    assert installed.returncode == 0, installed.stderr
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True).stdout.strip())
    project_site = Path(sysconfig.get_paths()["purelib"])
    # first (.pth files run in name order): the project's packages, then its .pth hooks (numba-cuda's
    # redirector) but not the editable install of mlsys_lib
    (site / "00-project-packages.pth").write_text(f"{project_site}\n")
    for pth in project_site.glob("*.pth"):
        if not pth.name.startswith("__editable__"):
            (site / pth.name).write_text(pth.read_text())
    return python


def _prelude(venv: Path) -> str:
    """Run before the notebook: demos on, as for a student, and the kit's mlsys_lib imported, nothing else."""
    return ("import os\nos.environ.pop('NBGRADER_EXECUTION', None)\nimport mlsys_lib\n"
            f"assert mlsys_lib.__file__.startswith({str(venv) + '/'!r}), "
            "f'the notebook imports {mlsys_lib.__file__}, not the kit'")


@pytest.mark.slow
@pytest.mark.parametrize("lab", lab_names())
def test_kit_runs_top_to_bottom(lab, tmp_path, monkeypatch):
    seconds, started = {}, time.perf_counter()
    monkeypatch.delenv("PYTHONPATH", raising=False)
    monkeypatch.setenv("MLSYS_QUICK", "1")  # the demos' smaller sizes
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path / "numba-cache"))
    kit = bundle(tmp_path / "kit.zip", lab)
    seconds["bundle"] = time.perf_counter() - started
    with zipfile.ZipFile(kit.path) as archive:
        archive.extractall(tmp_path / "kit")
    course = tmp_path / "kit" / "mlsys-course"
    (wheel,) = course.glob("mlsys_lib-*.whl")
    venv = tmp_path / "venv"
    python = _fresh_venv(venv, wheel)
    release = nbformat.read(course / "labs" / lab / f"{lab}.ipynb", as_version=4)
    seconds["install"] = time.perf_counter() - started - sum(seconds.values())

    filled = course / "labs" / lab / f"{lab}-filled.ipynb"
    nbformat.write(fill(release, solution_cells(lab)), filled)
    _, errors = run_notebook(filled, python=python, prelude=_prelude(venv))
    seconds["filled"] = time.perf_counter() - started - sum(seconds.values())
    assert errors == [], f"{lab}'s kit with the solutions filled in: " + "\n".join(
        f"{e}\n{e.traceback[-2000:]}" for e in errors)

    blank = course / "labs" / lab / f"{lab}.ipynb"
    executed, errors = run_notebook(blank, python=python, prelude=_prelude(venv))
    seconds["blank"] = time.perf_counter() - started - sum(seconds.values())
    assert -1 not in {e.index for e in errors}, [str(e) for e in errors]
    nbgrader = [cell.get("metadata", {}).get("nbgrader", {}) for cell in executed.cells]
    exercises = {i for i, meta in enumerate(nbgrader) if meta.get("grade") or meta.get("solution")}  # answers, tests
    demos = {i for i, cell in enumerate(executed.cells)
             if cell.cell_type == "code" and i not in exercises and NEEDS.match(cell.source)}
    failed = {e.index for e in errors}
    assert failed - exercises == demos, (
        f"{lab}'s blank release: demo cells {sorted(failed - exercises - demos)} fail without saying which exercise "
        f"they need, and {sorted(demos - failed)} say they need one but run: "
        + "\n".join(str(e) for e in errors if e.index not in exercises))
    assert not [str(e) for e in errors if STUB in e.error], "a cell of the blank release calls a stub of the kit"
    print(f"{lab}: " + ", ".join(f"{phase} {s:.0f} s" for phase, s in seconds.items()))

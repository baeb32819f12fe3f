"""What the student kit for a lab leaves out of ``mlsys_lib``, and the library it ships.

The kit for lab L is for students working on L: the labs before it are finished infrastructure
(lower layers stay), the exercises of L and of every later lab are theirs to write. So the kit's
library is built with the grading edition's machinery (:mod:`autograder.edition.edition`) from the union
of the manifests (``solutions/<lab>/references.txt``) of L and every later lab: each reference
guarded there gets a stub that raises ``NotImplementedError`` naming the lab whose exercise it is,
together with the private helpers only those used.

A manifest's ``keep`` references are the ones its tests need working. In the kit for L a reference
stays working exactly when **L's released notebook, run top to bottom as a student runs it (demo
cells included) with the solutions filled in, calls it** and L's grading edition keeps it too
(:func:`record_calls` finds those calls). So L's visible tests and demos run on the kit, while a
``keep`` that only hidden tests need, and every reference of a later lab, goes. L's own non-kept
references go even when a demo cell calls them (they are the answers): :attr:`KitPlan.demo_breaks`
lists them with the cells that call them, and :func:`autograder.edition.bundle.bundle` refuses such a kit
(those cells would raise the stub's message): a demo calls the student's own functions instead.
"""

from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

import nbformat

from ..cells import fill, solution_cells
from ..paths import LABS, check_lab, lab_names
from .edition import Removal, notebook_names, plan_removal, write_stubbed_package
from .references import PACKAGE, PackageSource, read_manifest, run_notebook

KIT_STUB_MESSAGE = ("{name} belongs to an exercise of {lab}, so this student kit of mlsys_lib leaves it out: "
                    "write it yourself in labs/{lab}/{lab}.ipynb")


@dataclass
class KitPlan:
    """What the kit for ``lab`` stubs, and why the references it spares stay."""

    lab: str
    removals: list[Removal]        # references and their helpers, each a stub
    owner: dict[str, str]          # key of every removal -> the lab whose exercise it belongs to
    spared: list[str]              # references of lab on that the released notebook calls: kept working
    demo_breaks: dict[str, list[int]]  # references the released notebook calls that are stubbed anyway -> the
                                       # indices of the cells calling them

    @property
    def removed(self) -> list[str]:
        """``module:qualname`` of every stub, sorted."""
        return sorted(r.key for r in self.removals)

    def message(self, removal: Removal) -> str:
        """The text a stub raises: whose exercise it is and the notebook to write it in."""
        definition = removal.definition
        return KIT_STUB_MESSAGE.format(name=f"{definition.module}.{definition.qualname}", lab=self.owner[removal.key])


def exercise_labs(lab: str) -> dict[str, str]:
    """``module:qualname`` of every reference guarded by ``lab`` or a later lab -> the first such lab."""
    labs = lab_names()
    owner: dict[str, str] = {}
    for later in labs[labs.index(check_lab(lab)):]:
        for key in read_manifest(later).guarded:
            owner.setdefault(key, later)
    return owner


def plan_kit(lab: str, source: PackageSource | None = None) -> KitPlan:
    """The kit for ``lab``: what it stubs and what it spares (rule in the module docstring).

    Runs ``lab``'s released notebook once (seconds; :func:`record_calls`).
    """
    source = source or PackageSource()
    owner = exercise_labs(lab)
    answers = set(read_manifest(lab).removed)  # what lab's grading edition removes
    called = record_calls(lab, owner, source)
    spared = sorted(set(called) - answers)
    removals = plan_removal(source, [key for key in owner if key not in spared], notebook_names(lab))
    for removal in removals:  # a helper's users are all planned before it
        if removal.key not in owner:
            owner[removal.key] = min((owner[user] for user in removal.users), key=lab_names().index)
    return KitPlan(lab, removals, {r.key: owner[r.key] for r in removals}, spared,
                   {key: cells for key, cells in sorted(called.items()) if key in answers})


def write_kit_package(plan: KitPlan, folder: Path, source: PackageSource | None = None) -> Path:
    """Write the kit's ``mlsys_lib`` (source only: no byte code, no Numba cache) into ``folder``."""
    return write_stubbed_package(source or PackageSource(), plan.removals, folder, lab=f"the kit for {plan.lab}",
                                 ignore=_source_only, message=plan.message)


def _source_only(folder: str, names: list[str]) -> set[str]:
    """For ``shutil.copytree``: leave out byte code and caches (they hold the references' code)."""
    return {n for n in names if n == "__pycache__" or n.endswith((".pyc", ".pyo", ".nbi", ".nbc"))}


# ---- which references the released notebook calls ---------------------------------------------------

_PROBE = '''"""Written by autograder/edition/kit.py while it records which references a notebook calls: every Python
process started with this folder on its path (the kernel, and the ranks it starts) logs the first
call of each target, found by its code's file and first line, in each cell (the number of the cell
run, from 0 after the prelude, which the prelude keeps in the environment variable MLSYS_KIT_CELL)."""
import json as _json
import os as _os
import sys as _sys
import threading as _threading


def _install(config_path):
    with open(config_path) as config_file:
        config = _json.load(config_file)
    targets = {(filename, line): key for filename, line, key in config["targets"]}
    log_path, seen = config["log"], set()

    def probe(frame, event, arg):
        key = targets.get((frame.f_code.co_filename, frame.f_code.co_firstlineno))
        if key is not None:
            call = (key, _os.environ.get("MLSYS_KIT_CELL", "prelude"))
            if call not in seen:
                seen.add(call)
                with open(log_path, "a") as log:
                    log.write("%s %s\\n" % call)

    _sys.settrace(probe)
    _threading.settrace(probe)


_install(_os.path.join(_os.path.dirname(__file__), "probe.json"))
del _install
'''

# Run first in the kernel: demo cells run as for a student, a kernel the probe missed stops here, and the
# number of each cell run next (0, 1, ...) goes to the environment (of the kernel and the ranks it starts) for
# the probe. (Counted here: IPython's execution_count at pre_run_cell differs by version.)
_PRELUDE = ('import itertools, os, sys\nos.environ.pop("NBGRADER_EXECUTION", None)\n'
            'assert sys.gettrace() is not None, "the call probe of autograder/edition/kit.py is not installed"\n'
            'get_ipython().events.register("pre_run_cell", lambda info, runs=itertools.count(): '
            'os.environ.__setitem__("MLSYS_KIT_CELL", str(next(runs))))')


def record_calls(lab: str, keys: Iterable[str], source: PackageSource | None = None) -> dict[str, list[int]]:
    """Which of ``keys`` (``module:qualname``) ``lab``'s released notebook calls when run top to
    bottom with the solutions filled in, demo cells included, on the repository's ``mlsys_lib``:
    each called key -> the indices of the cells (in the notebook) whose run called it.

    A call counts in any process the notebook starts, made directly or from library code; calls
    while a test's ``reference_guard`` has swapped the function out do not (nothing of it runs).
    ``RuntimeError`` if a cell fails: the record would be incomplete.
    """
    source = source or PackageSource()
    targets = []
    for key in keys:
        definition = source.find(key)
        filename = str(PACKAGE.parent / definition.path)
        targets += [(filename, line, key) for line in {definition.first_line, definition.node.lineno}]
    release = nbformat.read(LABS / check_lab(lab) / f"{lab}.ipynb", as_version=4)
    with tempfile.TemporaryDirectory(prefix="mlsys-kit-calls-") as tmp:
        probe, log, notebook = Path(tmp) / "probe", Path(tmp) / "calls.log", Path(tmp) / "run" / f"{lab}.ipynb"
        probe.mkdir()
        notebook.parent.mkdir()
        log.touch()
        (probe / "probe.json").write_text(json.dumps({"targets": targets, "log": str(log)}))
        (probe / "sitecustomize.py").write_text(_PROBE)
        nbformat.write(fill(release, solution_cells(lab)), notebook)
        executed, errors = run_notebook(notebook, pythonpath=[probe, PACKAGE.parent], prelude=_PRELUDE)
        if errors:
            raise RuntimeError(f"{lab}: the released notebook with its solutions failed while recording the "
                               "references it calls:\n" + "\n".join(f"  {e}" for e in errors))
        ran = [index for index, cell in enumerate(executed.cells)  # the cells run, in order
               if cell.cell_type == "code" and cell.execution_count is not None]
        called: dict[str, set[int]] = {}
        for line in log.read_text().splitlines():
            key, run = line.split()
            called.setdefault(key, set()).add(-1 if run == "prelude" else ran[int(run)])
        return {key: sorted(cells) for key, cells in called.items() if key in {k for _, _, k in targets}}

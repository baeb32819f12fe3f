"""The student kit for a lab: a zip with the released labs, the environment file, a README and a wheel
of ``mlsys_lib`` in which that lab's and every later lab's exercises are stubs
(:mod:`autograder.edition.kit`).

It must hold no solution, no hidden test, no part of the autograder and no body of a reference it
stubs; :func:`bundle` checks that (:func:`audit`) before it returns. And its lab's notebook must run
top to bottom for a student who wrote the exercises: :func:`bundle` refuses a kit in which a cell
would call a reference the kit stubs (:func:`demo_break_problem`).
"""

from __future__ import annotations

import ast
import io
import re
import shutil
import subprocess
import sys
import tempfile
import tomllib
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from ..cells import SECRET_MARKERS
from ..paths import LABS, REPO, check_lab, lab_names
from .kit import KitPlan, plan_kit, write_kit_package
from .references import PackageSource

STUDENT_README = Path(__file__).with_name("STUDENT_README.md")
BYTE_CODE = (".pyc", ".pyo")


@dataclass
class Kit:
    """A student kit written by :func:`bundle`: the zip, and what its library stubs."""

    path: Path
    plan: KitPlan


def kit_lab(lab: str | None) -> str:
    """The lab a kit is for: ``lab`` if it names one, the first lab (every exercise stubbed) if None."""
    return check_lab(lab) if lab is not None else lab_names()[0]


def default_kit_name(lab: str) -> str:
    """The kit's file name in the course folder: ``mlsys-course-student-<lab>.zip``."""
    return f"mlsys-course-student-{lab}.zip"


def _write_project(plan: KitPlan, project: Path, source: PackageSource) -> None:
    """A buildable copy of the project in ``project``: ``pyproject.toml`` (its version labelled with
    the lab, so that installing the next lab's kit replaces this one), ``README.md``, the kit's package."""
    project.mkdir(parents=True)
    pyproject = (REPO / "pyproject.toml").read_text(encoding="utf-8")
    version = tomllib.loads(pyproject)["project"]["version"]
    labelled, count = re.subn(rf'(?m)^version\s*=\s*"{re.escape(version)}"',
                              f'version = "{version}+{plan.lab.replace("_", ".")}"', pyproject)
    if count != 1:
        raise RuntimeError(f"pyproject.toml: expected one line 'version = \"{version}\"', found {count}")
    (project / "pyproject.toml").write_text(labelled, encoding="utf-8")
    shutil.copy2(REPO / "README.md", project / "README.md")
    write_kit_package(plan, project, source)


def build_wheel(project: Path, out_dir: Path) -> Path:
    """Build the wheel of the project in ``project`` (the library only) into ``out_dir``; return its path."""
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                            "-w", str(out_dir), str(project)], cwd=project, capture_output=True, text=True)
    if built.returncode != 0:
        raise RuntimeError(f"building the mlsys_lib wheel failed:\n{built.stdout[-4000:]}{built.stderr[-4000:]}")
    (wheel,) = out_dir.glob("mlsys_lib-*.whl")
    return wheel


def demo_break_problem(plan: KitPlan) -> str | None:
    """Why the kit of ``plan`` must not go out, or None: the cells of its lab's released notebook that
    call a reference the kit stubs (they would raise ``NotImplementedError`` for the student)."""
    if not plan.demo_breaks:
        return None
    calls = "; ".join(f"cell {cell} calls {key.replace(':', '.')}" for key, cells in plan.demo_breaks.items()
                      for cell in cells)
    return (f"student kit for {plan.lab} refused: labs/{plan.lab}/{plan.lab}.ipynb calls answers that the kit "
            f"stubs, so these cells would raise NotImplementedError for students: {calls}. Make them call the "
            "student's own functions (or the finished layers of earlier labs), then release the lab again")


def bundle(out: Path, lab: str | None = None) -> Kit:
    """Write the student kit for ``lab`` (:func:`kit_lab`) to ``out``; ``RuntimeError`` if a cell of the
    lab's notebook would call a stub (:func:`demo_break_problem`) or anything secret got in,
    ``ValueError`` for an unknown lab."""
    lab = kit_lab(lab)
    source = PackageSource()
    plan = plan_kit(lab, source)
    refused = demo_break_problem(plan)
    if refused:
        raise RuntimeError(refused)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="mlsys-kit-") as tmp:
        _write_project(plan, Path(tmp) / "project", source)
        wheel = build_wheel(Path(tmp) / "project", Path(tmp) / "dist")
        with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
            for path in sorted(LABS.rglob("*")):
                if path.is_file() and ".ipynb_checkpoints" not in path.parts:
                    archive.write(path, Path("mlsys-course") / path.relative_to(REPO))
            archive.write(REPO / "environment.yml", "mlsys-course/environment.yml")
            archive.writestr("mlsys-course/README.md", STUDENT_README.read_text(encoding="utf-8").replace("{lab}", lab))
            archive.write(wheel, f"mlsys-course/{wheel.name}")
    problems = audit(out, plan.removed, source)
    if problems:
        out.unlink()
        raise RuntimeError("student bundle rejected: " + "; ".join(problems))
    return Kit(out, plan)


# ---- the audit --------------------------------------------------------------------------------------

def _code_lines(text: str) -> list[str]:
    """``text``'s lines stripped, blank and comment-only lines left out: code compared as it reads."""
    return [s for s in (line.strip() for line in text.splitlines()) if s and not s.startswith("#")]


def reference_body(source: PackageSource, key: str) -> list[str]:
    """The code lines (:func:`_code_lines`) of the body of ``key``'s def after its docstring: what
    the kit's stub replaces."""
    definition = source.find(key)
    body = definition.node.body
    if ast.get_docstring(definition.node, clean=False) is not None:
        body = body[1:]
    if not body:
        return []
    lines = source.modules[definition.module].text.splitlines()
    return _code_lines("\n".join(lines[body[0].lineno - 1:definition.node.end_lineno]))


def audit(zip_path: Path, removed: Iterable[str] = (), source: PackageSource | None = None) -> list[str]:
    """What in the zip must not reach students: solution and hidden-test text, the autograder,
    ``solutions/``, byte code in the wheel, and in it the body of any reference in ``removed``
    (``module:qualname``; its code lines, in a row, in any file of the wheel)."""
    removed = sorted(removed)
    source = source or (PackageSource() if removed else None)
    bodies = {key: "\n".join(["", *lines, ""]) for key in removed if (lines := reference_body(source, key))}
    problems = []
    with zipfile.ZipFile(zip_path) as archive:
        for name in archive.namelist():
            parts = Path(name).parts
            if "solutions" in parts or "autograder" in parts:
                problems.append(f"{name} is instructor-only")
            data = archive.read(name)
            if name.endswith(".whl"):
                problems += [f"{name}: {problem}" for problem in _audit_wheel(data, bodies)]
                continue
            problems += [f"{name} contains '{m}'" for m in SECRET_MARKERS if m.encode() in data]
    return problems


def _audit_wheel(data: bytes, bodies: dict[str, str]) -> list[str]:
    problems = []
    with zipfile.ZipFile(io.BytesIO(data)) as wheel:
        for member in wheel.namelist():
            if member.startswith("autograder/"):
                problems.append(f"contains {member}")
            if member.endswith(BYTE_CODE) or "__pycache__" in member.split("/"):
                problems.append(f"contains byte code {member}")
            if member.endswith(".py"):
                text = "\n".join(["", *_code_lines(wheel.read(member).decode("utf-8", "replace")), ""])
                problems += [f"{member} holds the body of the removed reference {key}"
                             for key, body in bodies.items() if body in text]
    return problems

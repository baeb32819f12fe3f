"""The student kit: a zip with the released labs, the environment file, a wheel of mlsys_lib, a README.

It must hold no solution, no hidden test and no part of the autograder; :func:`bundle` checks that
before it returns.
"""

from __future__ import annotations

import io
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from .course import SECRET_MARKERS
from .paths import LABS, REPO

STUDENT_README = Path(__file__).with_name("STUDENT_README.md")


def build_wheel(out_dir: Path) -> Path:
    """Build the ``mlsys_lib`` wheel (the library only) into ``out_dir`` and return its path."""
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(out_dir), str(REPO)],
        check=True,
    )
    (wheel,) = out_dir.glob("mlsys_lib-*.whl")
    return wheel


def bundle(out: Path) -> Path:
    """Write the student zip to ``out``; raise ``RuntimeError`` if anything secret got in."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        wheel = build_wheel(Path(tmp))
        with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
            for path in sorted(LABS.rglob("*")):
                if path.is_file() and ".ipynb_checkpoints" not in path.parts:
                    archive.write(path, Path("mlsys-course") / path.relative_to(REPO))
            archive.write(REPO / "environment.yml", "mlsys-course/environment.yml")
            archive.write(STUDENT_README, "mlsys-course/README.md")
            archive.write(wheel, f"mlsys-course/{wheel.name}")
    problems = audit(out)
    if problems:
        out.unlink()
        raise RuntimeError("student bundle rejected: " + "; ".join(problems))
    return out


def audit(zip_path: Path) -> list[str]:
    """What in the zip must not reach students: solution/hidden-test text, autograder, solutions/."""
    problems = []
    with zipfile.ZipFile(zip_path) as archive:
        for name in archive.namelist():
            parts = Path(name).parts
            if "solutions" in parts or "autograder" in parts:
                problems.append(f"{name} is instructor-only")
            data = archive.read(name)
            if name.endswith(".whl"):
                with zipfile.ZipFile(io.BytesIO(data)) as wheel:
                    problems += [f"{name} contains {n}" for n in wheel.namelist() if n.startswith("autograder/")]
                continue
            problems += [f"{name} contains '{m}'" for m in SECRET_MARKERS if m.encode() in data]
    return problems

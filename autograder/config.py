"""The nbgrader configuration of the course, built in one place.

``autograder/nbgrader_config.py`` (read by plain ``nbgrader`` commands) and the course tool both
call :func:`course_config`, so the two never disagree.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from traitlets.config import Config

from .paths import LABS, SOLUTIONS, course_dir

#: Name of the kernel every graded notebook runs on, whatever kernel the student's file names.
GRADING_KERNEL = "mlsys-grader"

#: Seconds one cell may run before nbgrader interrupts it (first Numba compiles take a few seconds).
CELL_TIMEOUT_S = 180


def course_config(root: Path | None = None, release_dir: Path | None = None) -> Config:
    """nbgrader configuration with the course root ``root`` (absolute; default :func:`course_dir`).

    ``source`` is ``solutions/`` and ``release`` is ``labs/`` (or ``release_dir``); submitted,
    autograded and feedback folders and the gradebook live under the course root.
    """
    root = Path(root or course_dir()).resolve()
    c = Config()
    c.CourseDirectory.course_id = "mlsys"
    c.CourseDirectory.root = str(root)
    c.CourseDirectory.source_directory = str(SOLUTIONS)
    c.CourseDirectory.release_directory = str(Path(release_dir or LABS).resolve())
    c.CourseDirectory.db_url = f"sqlite:///{root / 'gradebook.db'}"
    c.Exchange.root = str(root / "exchange")
    c.NbGrader.logfile = str(root / "nbgrader.log")
    # Everything a student needs is in the notebook; do not copy stray files of the source folder.
    c.CourseDirectory.ignore = [".ipynb_checkpoints", "*.pyc", "__pycache__", "feedback"]
    c.ClearSolutions.code_stub = {"python": "# YOUR CODE HERE\nraise NotImplementedError()"}
    c.Execute.kernel_name = GRADING_KERNEL
    c.Execute.timeout = CELL_TIMEOUT_S
    # The feedback a student reads must not show hidden tests: neither their source (nbgrader
    # restores it into the autograded copy) nor the traceback lines that quote it.
    c.GenerateFeedback.preprocessors = [
        "nbgrader.preprocessors.GetGrades",
        "autograder.feedback.HideHiddenTestTracebacks",
        "nbgrader.preprocessors.ClearHiddenTests",
        "nbconvert.preprocessors.CSSHTMLHeaderPreprocessor",
    ]
    return c


def install_grading_kernel(root: Path | None = None) -> dict[str, str]:
    """Write the grading kernelspec (this interpreter) under the course root.

    Returns the environment variables under which Jupyter finds it first, whatever kernels the
    user has installed elsewhere.
    """
    root = Path(root or course_dir()).resolve()
    jupyter_path = root / "jupyter"
    spec_dir = jupyter_path / "kernels" / GRADING_KERNEL
    spec_dir.mkdir(parents=True, exist_ok=True)
    spec = {
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "mlsys grader",
        "language": "python",
    }
    (spec_dir / "kernel.json").write_text(json.dumps(spec, indent=1))
    others = os.environ.get("JUPYTER_PATH")
    return {"JUPYTER_PATH": os.pathsep.join([str(jupyter_path)] + ([others] if others else []))}

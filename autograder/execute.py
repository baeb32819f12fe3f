"""nbgrader's Execute preprocessor, telling which cell killed the kernel.

When a cell kills its kernel (``os._exit()``, memory exhausted past recovery), nbgrader fails the
whole notebook and the student would get nothing. This preprocessor writes the index of that cell
to the file named by ``$MLSYS_KILLER_CELL``, so the grader can skip that one cell and grade again
(see :func:`autograder.batch.grade_one`).
"""

from __future__ import annotations

import os
from pathlib import Path

from nbclient.exceptions import DeadKernelError
from nbgrader.preprocessors import Execute

KILLER_ENV = "MLSYS_KILLER_CELL"


class ExecuteReportingDeaths(Execute):
    """Execute, recording the index of a cell during which the kernel died before re-raising."""

    def preprocess_cell(self, cell, resources, index):
        try:
            return super().preprocess_cell(cell, resources, index)
        except DeadKernelError:
            if os.environ.get(KILLER_ENV):
                Path(os.environ[KILLER_ENV]).write_text(str(index))
            raise

"""The course's nbgrader settings: the defaults of ``autograder.config``, then your changes.

Plain nbgrader commands read this file when told to:

    nbgrader autograde lab01_tensors --config autograder/nbgrader_config.py

and the course tool (``mlsys course ...``) always does. Change settings below the merge, e.g.

    c.Execute.timeout = 300          # seconds a cell may run while graded
    c.Sandbox.memory_mb = 8192       # address space of a graded kernel
    c.Sandbox.cpu_seconds = 900      # CPU time of one graded notebook
    c.Sandbox.processes = 64         # processes and threads of one graded kernel
    c.Sandbox.workers = 4            # notebooks graded at once (0: one per CPU core)
    c.Sandbox.chunk_size = 1         # students per nbgrader run of a worker (progress after each)
    c.Sandbox.bubblewrap = False     # resource limits only, no isolation
"""

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from autograder.config import TOOL_ENV, course_config, install_grading_kernel  # noqa: E402

c = get_config()  # noqa: F821 (provided by traitlets when it loads this file)
c.merge(course_config())
if not os.environ.get(TOOL_ENV):  # plain nbgrader: make the grading kernel findable
    os.environ.update(install_grading_kernel())

"""The course's nbgrader settings: the defaults of ``autograder.config``, then your changes.

nbgrader reads this file as in every nbgrader course: from the folder you run it in (the repository
root), and, through the copy ``make`` installs into the course's virtual environment
(``.venv/etc/jupyter/nbgrader_config.py``, which loads this one), from any folder:

    nbgrader autograde lab01_tensors
    nbgrader generate_feedback lab01_tensors

The course tool (``mlsys course ...``) and Formgrader read it too, so they never disagree. Every
autograde, whoever starts it, runs each notebook on the sandboxed grading kernel. Change settings
below the merge, e.g.

    c.Execute.timeout = 300          # seconds a cell may run while graded
    c.Sandbox.memory_mb = 8192       # address space of a graded kernel
    c.Sandbox.cpu_seconds = 900      # CPU time of one graded notebook
    c.Sandbox.processes = 64         # processes of one graded kernel (more: stopped as a fork bomb)
    c.Sandbox.threads = 0            # room for threads (default 1024: the CUDA simulator's full block)
    c.Sandbox.workers = 4            # notebooks graded at once (0: one per CPU core)
    c.Sandbox.chunk_size = 1         # students per nbgrader run of a worker (progress after each)
    c.Sandbox.bubblewrap = False     # resource limits only, no isolation
    c.LateSubmissionPlugin.penalty_method = "zero"   # nbgrader's late policy (default: none)
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from autograder.config import course_config, plain_nbgrader_setup  # noqa: E402

c = get_config()  # noqa: F821 (provided by traitlets when it loads this file)
c.merge(course_config())
plain_nbgrader_setup(c)  # the grading kernel findable, its sockets at an absolute path (not for the tool)

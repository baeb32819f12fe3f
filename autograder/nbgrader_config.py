"""Configuration for plain ``nbgrader`` commands run by hand, e.g.

    nbgrader autograde lab01_tensors --config autograder/nbgrader_config.py

The course tool (``mlsys course ...``) builds the same configuration from ``autograder.config``.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import os  # noqa: E402

from autograder.config import course_config, install_grading_kernel  # noqa: E402

os.environ.update(install_grading_kernel())
c = get_config()  # noqa: F821 (provided by traitlets when it loads this file)
c.merge(course_config())

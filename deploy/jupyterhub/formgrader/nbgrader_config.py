"""nbgrader in the Formgrader service, on top of the course's settings (the repository's
``nbgrader_config.py``, loaded through the course environment's copy, with ``$MLSYS_COURSE_DIR`` the
course folder): the release goes into the course folder (the repository's ``labs/`` is not the
grader's to write), the exchange is the shared one, JupyterHub's groups are the course's roster, and
the class's late policy applies. Autograde still runs every notebook on the sandboxed grading kernel."""

import os
from pathlib import Path

from nbgrader.auth import JupyterHubAuthPlugin

c = get_config()  # noqa: F821 (provided by traitlets)
course = Path(os.environ["MLSYS_COURSE_DIR"])
c.CourseDirectory.course_id = os.environ["MLSYS_HUB_COURSE"]
c.CourseDirectory.release_directory = str(course / "release")
c.Exchange.root = os.environ["MLSYS_HUB_EXCHANGE"]
c.Exchange.path_includes_course = True
c.Authenticator.plugin_class = JupyterHubAuthPlugin
c.LateSubmissionPlugin.penalty_method = os.environ["MLSYS_HUB_LATE_PENALTY"]

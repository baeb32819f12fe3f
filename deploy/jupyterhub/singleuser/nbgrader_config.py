"""nbgrader in everyone's own server on the course's hub: the shared exchange, one folder per course in
it, and JupyterHub's groups deciding whose courses are listed (``nbgrader-<course>`` students,
``formgrade-<course>`` teaching team). The hub sets the variables (jupyterhub_config.py)."""

import os

from nbgrader.auth import JupyterHubAuthPlugin

c = get_config()  # noqa: F821 (provided by traitlets)
c.CourseDirectory.course_id = os.environ["MLSYS_HUB_COURSE"]
c.Exchange.root = os.environ["MLSYS_HUB_EXCHANGE"]
c.Exchange.path_includes_course = True
c.Authenticator.plugin_class = JupyterHubAuthPlugin

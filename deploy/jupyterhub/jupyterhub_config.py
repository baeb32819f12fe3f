"""The course's JupyterHub on one machine (``make hub``; the class from ``$MLSYS_HUB_CLASS``, default ``class.yaml``).

As The Littlest JupyterHub does: the hub runs as root, people log in with their Unix password (PAM),
and each one's JupyterLab runs as that person (``LocalProcessSpawner``) from the course's environment,
whose Python is the students' kernel. The proxy is configurable-http-proxy from npm, installed into
``.venv/hub/`` by ``make hub``. JupyterHub's groups say who is who (``deploy/jupyterhub/classroom.py``):

- ``formgrade-<course>`` (instructors, TAs) may open the service ``<course>``: Formgrader, run as
  ``grader-<course>`` on the course folder, autograding on the sandboxed grading kernel;
- ``nbgrader-<course>`` (students) get the course in their Assignments tab;
- ``instructors-<course>`` are the hub's admins.
"""

import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(REPO))

from deploy.jupyterhub.classroom import load  # noqa: E402

c = get_config()  # noqa: F821 (provided by traitlets)
classroom = load(Path(os.environ.get("MLSYS_HUB_CLASS") or HERE / "class.yaml"))
course = classroom.course
#: the course's environment as every account runs it (deploy/jupyterhub/provision.py made it)
venv_bin = classroom.root / "env" / "bin"
if not (venv_bin / "jupyterhub-singleuser").is_file():
    raise ValueError(f"{venv_bin} has no jupyterhub-singleuser: run python -m deploy.jupyterhub.provision up first")
#: configurable-http-proxy, from npm (`make hub` installs it here)
proxy = REPO / ".venv" / "hub" / "node_modules" / ".bin" / "configurable-http-proxy"
if not proxy.is_file():
    raise ValueError(f"{proxy} is missing: `make hub` installs configurable-http-proxy with npm")

# --- where it listens, where it keeps its state ---
c.JupyterHub.bind_url = f"http://{classroom.ip}:{classroom.port}"
c.JupyterHub.hub_bind_url = f"http://127.0.0.1:{classroom.hub_port}"
c.ConfigurableHTTPProxy.api_url = f"http://127.0.0.1:{classroom.proxy_api_port}"
c.ConfigurableHTTPProxy.command = [str(proxy)]
c.ConfigurableHTTPProxy.pid_file = str(classroom.state / "proxy.pid")
c.JupyterHub.db_url = f"sqlite:///{classroom.state / 'jupyterhub.sqlite'}"
c.JupyterHub.cookie_secret_file = str(classroom.state / "cookie_secret")
c.JupyterHub.pid_file = str(classroom.state / "jupyterhub.pid")

# --- who logs in, and what each one may do ---
c.JupyterHub.authenticator_class = "pam"
c.Authenticator.allowed_users = {*classroom.people, classroom.grader}
c.JupyterHub.load_groups = {name: {"users": users} for name, users in classroom.groups().items()}
c.JupyterHub.load_roles = [
    {"name": "admin", "groups": [f"instructors-{course}"]},
    {"name": f"formgrade-{course}", "groups": [f"formgrade-{course}"],
     "scopes": [f"access:services!service={course}", f"read:services!service={course}"]},
    # nbgrader's JupyterHub plugin in Formgrader reads who is in which group, and enrols a student
    # added in Formgrader by adding them to nbgrader-<course>
    {"name": f"{course}-formgrader", "services": [course],
     "scopes": ["read:users", "read:groups", f"groups!group=nbgrader-{course}"]},
]
# ... and in each person's server it reads that person's groups, to list their courses
c.Spawner.server_token_scopes = ["users:activity!user", "access:servers!server", "read:users:groups!user",
                                 "read:users:name!user"]

# --- each person's JupyterLab ---
course_env = {
    "PATH": os.pathsep.join([str(venv_bin), "/usr/local/bin", "/usr/bin", "/bin"]),
    "MLSYS_HUB_COURSE": course,
    "MLSYS_HUB_EXCHANGE": str(classroom.exchange),
}
c.Spawner.cmd = [str(venv_bin / "jupyterhub-singleuser")]
c.Spawner.default_url = "/lab"
c.Spawner.notebook_dir = "~"
c.Spawner.environment = {
    **course_env,
    "JUPYTER_CONFIG_PATH": str(HERE / "singleuser"),
    # the course's settings copy the Validate button's kernelspec here; the person's, not the course's folder
    "MLSYS_COURSE_DIR": lambda spawner: str(classroom.home / spawner.user.name / ".mlsys-course"),
}
c.Spawner.start_timeout = 120
c.Spawner.http_timeout = 120

# --- Formgrader, for the teaching team, on the course folder ---
c.JupyterHub.services = [{
    "name": course,
    "url": f"http://127.0.0.1:{classroom.formgrader_port}",
    "command": [str(venv_bin / "jupyterhub-singleuser")],
    "user": classroom.grader,
    "cwd": str(classroom.course_dir),
    "oauth_no_confirm": True,
    "environment": {
        **course_env,
        "JUPYTER_CONFIG_PATH": str(HERE / "formgrader"),
        "MLSYS_COURSE_DIR": str(classroom.course_dir),
        "MLSYS_HUB_LATE_PENALTY": classroom.late_penalty,
        "JUPYTERHUB_DEFAULT_URL": "/formgrader",
    },
}]

"""Make (``up``) or remove (``down``) the Unix accounts and folders a class on the course's JupyterHub needs.

    python -m deploy.jupyterhub.provision up   deploy/jupyterhub/class.yaml
    python -m deploy.jupyterhub.provision down deploy/jupyterhub/class.yaml

Run as root (the hub runs as root too and starts each person's server as that person, as The
Littlest JupyterHub does). ``up`` is idempotent: an account that exists is kept as it is (its
password too); a new one gets a random password, written to ``<root>/hub/passwords.txt`` (root
only) for PAM, the hub's login. It makes

- an account per person and ``grader-<course>``, which runs Formgrader and owns the course folder;
  home folders are private (0700), so no student opens another's;
- the Unix group ``formgrade-<course>`` of the teaching team, who may read the course folder
  (mode 2750: the gradebook and submissions are closed to students);
- nbgrader's exchange root, 0777 as nbgrader wants it; nbgrader itself gives the course's folders in it
  their modes (``inbound`` 2733: students drop submissions but list nobody's);
- the hub's state folder (0700, root's);
- ``<root>/env``, the course's environment as every account runs it (:func:`shared_environment`).

``down`` removes the accounts ``up`` made (listed in ``<root>/hub/created.txt``) with their homes;
the course folder and the exchange stay (they hold the grades).
"""

from __future__ import annotations

import argparse
import grp
import os
import pwd
import secrets
import shutil
import subprocess
import sys
from pathlib import Path

from deploy.jupyterhub.classroom import Classroom, load

#: Longest a user or group command may take (seconds).
COMMAND_TIMEOUT_S = 60
#: Longest installing the course into the shared environment may take (seconds; uv's cache makes it seconds).
INSTALL_TIMEOUT_S = 600
#: The repository, installed (editable) into the shared environment.
REPO = Path(__file__).resolve().parents[2]
#: The extras the shared environment gets: the course's packages with JupyterHub's single-user server.
HUB_EXTRAS = "hub"


def run(command: list[str], stdin: str | None = None, timeout: float = COMMAND_TIMEOUT_S) -> None:
    """Run a system command; a failure raises ``RuntimeError`` with what it printed."""
    done = subprocess.run(command, input=stdin, capture_output=True, text=True, timeout=timeout)
    if done.returncode:
        raise RuntimeError(f"{' '.join(command)} failed (exit {done.returncode}): {done.stderr.strip()}")


def user_exists(name: str) -> bool:
    try:
        pwd.getpwnam(name)
        return True
    except KeyError:
        return False


def group_exists(name: str) -> bool:
    try:
        grp.getgrnam(name)
        return True
    except KeyError:
        return False


def created(classroom: Classroom) -> list[str]:
    """The accounts (and, prefixed with ``@``, the groups) ``up`` made for this class, in order."""
    path = classroom.state / "created.txt"
    return path.read_text().split() if path.is_file() else []


def record(classroom: Classroom, name: str) -> None:
    """Note that ``up`` made the account or (``@name``) group ``name``: ``down`` removes only those."""
    with open(classroom.state / "created.txt", "a") as out:
        out.write(name + "\n")


def add_account(classroom: Classroom, name: str, login: bool) -> None:
    """Make the account ``name`` with a private home; one that logs in gets a random password (PAM)."""
    if user_exists(name):
        return
    home = classroom.home / name
    run(["useradd", "--create-home", "--home-dir", str(home), "--shell", "/bin/bash", "--user-group", name])
    record(classroom, name)
    os.chmod(home, 0o700)
    if login:
        password = secrets.token_urlsafe(12)
        run(["chpasswd"], stdin=f"{name}:{password}\n")
        fd = os.open(classroom.passwords, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        with os.fdopen(fd, "a") as out:
            out.write(f"{name}:{password}\n")


def folder(path: Path, mode: int, owner: str = "root", group: str = "root") -> None:
    """Make ``path`` (and its parents) and give it ``mode``, ``owner`` and ``group``."""
    path.mkdir(parents=True, exist_ok=True)
    shutil.chown(path, owner, group)
    os.chmod(path, mode)


def runnable_by_all(path: Path) -> bool:
    """Whether every account may run ``path``: it and each folder above it are executable by others."""
    path = path.resolve()
    return all(p.stat().st_mode & 0o001 for p in (path, *path.parents))


def shared_environment(classroom: Classroom) -> Path:
    """The course's environment as every account runs it; returns its ``bin`` folder.

    This environment itself if every account may run its interpreter (then ``<root>/env`` links to
    it). Otherwise (a virtual environment made from a Python under ``/root``, e.g. pyenv's, cannot be
    run by anyone else) ``<root>/env`` is a virtual environment of the system's Python of the same
    version with the course installed into it by uv (:data:`HUB_EXTRAS`): packages resolved for that
    interpreter (this environment's may not run there: soupsieve 4.1.3 fails on Debian's Python
    3.11.2), its own commands (``jupyterhub-singleuser``, ``nbgrader``...), Jupyter folders and
    grading kernel (``python -m autograder.config install``)."""
    own_bin = Path(sys.executable).parent
    env = classroom.root / "env"
    if runnable_by_all(Path(sys.executable)):
        if env.is_symlink() or not env.exists():
            env.unlink(missing_ok=True)
            env.symlink_to(own_bin.parent)
        return env / "bin"
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    system = Path("/usr/bin") / version
    if not system.is_file() or not runnable_by_all(system):
        raise RuntimeError(f"{sys.executable} cannot be run by the class's accounts (a folder above it is closed "
                           f"to them) and there is no {system} to run the course's packages instead: install "
                           f"Debian's {version} (apt-get install {version}-venv), or make the course's environment "
                           f"from a Python everyone can run (make setup PYTHON=/usr/bin/python3)")
    uv = own_bin / "uv"
    if not uv.is_file():
        raise RuntimeError(f"{uv} is missing, which installs the course into {env}: a venv made by `make setup` "
                           f"has it; into an older one: {own_bin / 'python'} -m pip install uv")
    python = env / "bin" / "python"
    if not python.exists():
        run([str(system), "-m", "venv", "--without-pip", str(env)])
    run([str(uv), "pip", "install", "--quiet", "--compile-bytecode", "--python", str(python), "-e", f"{REPO}[{HUB_EXTRAS}]"],
        timeout=INSTALL_TIMEOUT_S)
    run([str(python), "-m", "autograder.config", "install"])
    return env / "bin"


def up(classroom: Classroom) -> None:
    """Accounts, groups and folders of the class (see the module's docstring); idempotent."""
    folder(classroom.root, 0o755)
    folder(classroom.state, 0o700)
    if not classroom.home.exists():
        folder(classroom.home, 0o755)
    if user_exists(classroom.grader) and classroom.grader not in created(classroom):
        raise RuntimeError(f"the account {classroom.grader} exists but was not made for the class in {classroom.root}: "
                           f"another class of course {classroom.course!r} runs on this machine, and the account that "
                           f"owns its course folder cannot serve two (remove it with `make hub-down` of that class)")
    for name in classroom.people:
        add_account(classroom, name, login=True)
    add_account(classroom, classroom.grader, login=False)
    team = f"formgrade-{classroom.course}"
    if not group_exists(team):
        run(["groupadd", team])
        record(classroom, f"@{team}")
    for name in classroom.teaching_team + (classroom.grader,):
        run(["usermod", "--append", "--groups", team, name])
    folder(classroom.course_dir, 0o2750, classroom.grader, team)
    folder(classroom.exchange, 0o777, classroom.grader, classroom.grader)
    shared_environment(classroom)


def down(classroom: Classroom) -> list[str]:
    """Remove the accounts and groups ``up`` made, with the accounts' homes; returns their names."""
    names = created(classroom)
    for name in names:
        if not name.startswith("@") and user_exists(name):
            run(["userdel", "--remove", name])  # its own group too (--user-group)
    for name in names:
        if name.startswith("@") and group_exists(name[1:]):
            run(["groupdel", name[1:]])
    (classroom.state / "created.txt").unlink(missing_ok=True)
    classroom.passwords.unlink(missing_ok=True)
    return names


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m deploy.jupyterhub.provision", description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=("up", "down"))
    parser.add_argument("class_file", type=Path)
    args = parser.parse_args(argv)
    try:
        classroom = load(args.class_file)
    except ValueError as error:
        parser.error(str(error))
    if os.geteuid() != 0:
        parser.error("run as root: it adds Unix accounts, and the hub starts each server as its user")
    if args.action == "up":
        up(classroom)
        print(f"{classroom.course}: {len(classroom.people)} accounts, course folder {classroom.course_dir}, "
              f"exchange {classroom.exchange}; new accounts' passwords: {classroom.passwords}")
    else:
        print(f"removed accounts: {' '.join(down(classroom)) or 'none'}; {classroom.root} stays")


if __name__ == "__main__":
    sys.exit(main())

"""The settings of one class on the course's JupyterHub, read from a YAML file (``class.yaml``).

Keys: ``course`` (nbgrader's course id, also the Formgrader service's name), ``root`` (an absolute
folder holding the course folder, the exchange and the hub's state), ``home`` (where home folders
are made), ``port`` (the hub's public port; the three ports above it are the hub's API, the
proxy's API and the Formgrader service), ``ip``, ``late_penalty`` (nbgrader's ``none`` or ``zero``)
and the people: ``instructors``, ``tas`` and ``students``, lists of Unix user names. JupyterHub's
groups say who is who (:meth:`Classroom.groups`): ``formgrade-<course>`` may open Formgrader,
``nbgrader-<course>`` are the students nbgrader lists the course for, ``instructors-<course>`` are
the hub's admins.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import yaml

#: What a Unix user name, a group name and a course id may be here (Debian's useradd accepts these).
NAME = re.compile(r"[a-z_][a-z0-9_-]{0,30}")
PENALTIES = ("none", "zero")
KEYS = {"course", "root", "home", "port", "ip", "late_penalty", "instructors", "tas", "students"}


@dataclass(frozen=True)
class Classroom:
    """One class: its course id, folders, ports and people (see the module's docstring)."""

    course: str
    root: Path
    home: Path
    port: int
    ip: str
    late_penalty: str
    instructors: tuple[str, ...]
    tas: tuple[str, ...]
    students: tuple[str, ...]

    @property
    def grader(self) -> str:
        """The Unix account the Formgrader service runs as; it owns the course folder."""
        return f"grader-{self.course}"

    @property
    def course_dir(self) -> Path:
        """The course folder: gradebook, release, submissions, autograded copies, feedback."""
        return self.root / "course"

    @property
    def exchange(self) -> Path:
        """nbgrader's exchange root, shared by everyone (``<exchange>/<course>/{outbound,inbound,feedback}``)."""
        return self.root / "exchange"

    @property
    def state(self) -> Path:
        """The hub's own files (database, cookie secret, passwords of the accounts made here): root's only."""
        return self.root / "hub"

    @property
    def passwords(self) -> Path:
        """``user:password`` lines of the accounts :mod:`.provision` made (mode 0600)."""
        return self.state / "passwords.txt"

    @property
    def teaching_team(self) -> tuple[str, ...]:
        return self.instructors + self.tas

    @property
    def people(self) -> tuple[str, ...]:
        """Everyone who logs in (the grader account does not: it only runs Formgrader)."""
        return self.teaching_team + self.students

    @property
    def hub_port(self) -> int:
        return self.port + 1

    @property
    def proxy_api_port(self) -> int:
        return self.port + 2

    @property
    def formgrader_port(self) -> int:
        return self.port + 3

    @property
    def url(self) -> str:
        host = "127.0.0.1" if self.ip in ("0.0.0.0", "") else self.ip
        return f"http://{host}:{self.port}"

    def groups(self) -> dict[str, list[str]]:
        """JupyterHub's groups of the class. The grader account is in the Formgrader group so that it
        exists in the hub's database: nbgrader's JupyterHub plugin asks the hub about the user that
        runs Formgrader and fails when the hub does not know it."""
        return {
            f"formgrade-{self.course}": [*self.teaching_team, self.grader],
            f"nbgrader-{self.course}": list(self.students),
            f"instructors-{self.course}": list(self.instructors),
        }


def load(path: Path) -> Classroom:
    """Read and check a class file; a missing key, a bad name or a clash raises ``ValueError`` saying which."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"{path}: no such class file")
    data = yaml.safe_load(path.read_text())
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a mapping of {sorted(KEYS)}, got {type(data).__name__}")
    unknown, missing = set(data) - KEYS, KEYS - set(data) - {"ip", "late_penalty"}
    if unknown or missing:
        raise ValueError(f"{path}: unknown keys {sorted(unknown)}, missing keys {sorted(missing)}")
    people = {role: _names(path, role, data[role]) for role in ("instructors", "tas", "students")}
    classroom = Classroom(course=_name(path, "course", data["course"]), root=_absolute(path, "root", data["root"]),
                          home=_absolute(path, "home", data["home"]), port=_port(path, data["port"]),
                          ip=str(data.get("ip", "127.0.0.1")), late_penalty=str(data.get("late_penalty", "none")),
                          **people)
    if classroom.late_penalty not in PENALTIES:
        raise ValueError(f"{path}: late_penalty must be one of {PENALTIES}, got {classroom.late_penalty!r}")
    everyone = [*classroom.people, classroom.grader]
    twice = sorted({name for name in everyone if everyone.count(name) > 1})
    if twice:
        raise ValueError(f"{path}: {twice} named more than once (the grader account is {classroom.grader!r})")
    if not classroom.instructors or not classroom.students:
        raise ValueError(f"{path}: a class needs at least one instructor and one student")
    return classroom


def _name(path: Path, key: str, value) -> str:
    if not isinstance(value, str) or not NAME.fullmatch(value):
        raise ValueError(f"{path}: {key}: {value!r} is not a user name (lower case, digits, - and _, "
                         "at most 31 characters, not starting with a digit or -)")
    return value


def _names(path: Path, key: str, value) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list):
        raise ValueError(f"{path}: {key}: expected a list of user names, got {value!r}")
    return tuple(_name(path, key, v) for v in value)


def _absolute(path: Path, key: str, value) -> Path:
    if not isinstance(value, str) or not Path(value).is_absolute():
        raise ValueError(f"{path}: {key}: expected an absolute folder, got {value!r}")
    return Path(value)


def _port(path: Path, value) -> int:
    if not isinstance(value, int) or not 1024 <= value <= 65532:
        raise ValueError(f"{path}: port: expected a number from 1024 to 65532 (the 3 above it are used too), "
                         f"got {value!r}")
    return value

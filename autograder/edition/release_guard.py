"""A release never destroys an edit: what :func:`autograder.course.release` may overwrite in ``labs/``.

A file in the release folder *was released* when its bytes are git's committed version of it (the
HEAD commit) or what the last release on this machine wrote there (``<course>/released.json``,
sha256 per file). A file the release writes is **edited** when it is neither released nor already
what the release writes now: someone changed it by hand, most often a student who worked in
``labs/``. Without git (a tarball) only the record of the last release tells, so before the first
release on a machine every file that differs from the new release counts as edited: safe, and
``--force`` keeps a copy. Files the release does not write are left alone, except released ones
(the source no longer makes them), which go.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from mlsys_lib.workspace import work_dir

from ..paths import REPO


class ReleaseRefused(RuntimeError):
    """Releasing would overwrite files someone edited; the message names them and what to do."""


def committed_version(path: Path) -> bytes | None:
    """``path`` as git's HEAD commit holds it; None outside a git work tree, without git, or if
    HEAD has no such file."""
    path = Path(path).absolute()
    if not path.parent.is_dir() or not shutil.which("git"):
        return None
    done = subprocess.run(["git", "-C", str(path.parent), "show", f"HEAD:./{path.name}"], capture_output=True)
    return done.stdout if done.returncode == 0 else None


def in_git(folder: Path) -> bool:
    """Whether ``folder`` is inside a git work tree (a clone, not a tarball)."""
    if not shutil.which("git"):
        return False
    done = subprocess.run(["git", "-C", str(folder), "rev-parse", "--is-inside-work-tree"],
                          capture_output=True, text=True)
    return done.returncode == 0 and done.stdout.strip() == "true"


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@dataclass
class Plan:
    """What releasing one lab folder does: ``writes`` maps each target file to its new bytes."""

    writes: dict[Path, bytes] = field(default_factory=dict)
    edited: list[Path] = field(default_factory=list)  # would be overwritten, and nobody released them
    stale: list[Path] = field(default_factory=list)  # released before, no longer written: removed


class ReleaseRecord:
    """``<course>/released.json``: absolute path -> sha256 of what the last release wrote there."""

    def __init__(self, root: Path):
        self.path = Path(root) / "released.json"
        self.data = json.loads(self.path.read_text()) if self.path.exists() else {}

    def released(self, path: Path, data: bytes) -> bool:
        """``data``, the bytes now at ``path``, is what a release wrote there (see module doc)."""
        return self.data.get(str(path)) == _sha256(data) or data == committed_version(path)

    def update(self, plan: Plan) -> None:
        for path in plan.stale:
            self.data.pop(str(path), None)
        self.data.update({str(path): _sha256(data) for path, data in plan.writes.items()})
        self.path.parent.mkdir(parents=True, exist_ok=True)
        partial = self.path.with_suffix(".tmp")
        partial.write_text(json.dumps(self.data, indent=1, sort_keys=True))
        os.replace(partial, self.path)


def _files(folder: Path) -> list[Path]:
    """Every entry below ``folder`` that is not a folder (links included, never followed)."""
    found = []
    for parent, dirs, names in os.walk(folder):  # does not descend into linked folders
        found += [Path(parent) / name for name in names]
        found += [Path(parent) / name for name in dirs if (Path(parent) / name).is_symlink()]
    return found


def plan_lab(fresh: Path, target: Path, record: ReleaseRecord) -> Plan:
    """Compare the new release of a lab (folder ``fresh``) with the lab folder ``target``."""
    target = target.absolute()
    plan = Plan(writes={target / p.relative_to(fresh): p.read_bytes() for p in _files(fresh)})
    for path in _files(target):
        regular = path.is_file() and not path.is_symlink()
        data = path.read_bytes() if regular else None
        if path in plan.writes:
            if data != plan.writes[path] and not (regular and record.released(path, data)):
                plan.edited.append(path)
        elif regular and record.released(path, data):
            plan.stale.append(path)
    return plan


def _shown(path: Path) -> str:
    """``path`` relative to the repository when inside it (what a user types there), else as is."""
    return str(path.relative_to(REPO)) if path.is_relative_to(REPO) else str(path)


def backup_root(release_dir: Path) -> Path:
    """Where ``--force`` puts edited files: ``work/release-backups/`` beside the release folder."""
    return work_dir(release_dir) / "release-backups"


def default_backups(release_dir: Path) -> Path:
    """The folder of one forced release's backups: ``<backup_root>/<UTC time>``."""
    return backup_root(release_dir) / dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")


def refusal(edited: list[Path], release_dir: Path) -> str:
    """The message that names the edited files and the ways on."""
    listed = "\n".join(f"  {_shown(path)}" for path in edited)
    drop = (f"git checkout -- {' '.join(_shown(path) for path in edited)}" if in_git(Path(release_dir))
            else "delete them (without git, a file counts as edited until a release on this machine wrote it)")
    return (f"release refused: {len(edited)} file(s) of the release were edited by hand and releasing would "
            "overwrite them (each differs from the committed release and from what the release writes now):\n"
            f"{listed}\n"
            f"Keep the edits: `mlsys course release --force` moves the files to "
            f"{_shown(backup_root(Path(release_dir)))}/<UTC time>/ first, then releases.\n"
            f"Drop the edits: {drop}.\n"
            "Students work in work/, a copy that no release touches: `make lab` or `mlsys lab`.")


def back_up(edited: list[Path], release_dir: Path, backups: Path) -> None:
    """Move each of ``edited`` (under ``release_dir``) to the same relative place under ``backups``."""
    for path in edited:
        dest = backups / path.relative_to(Path(release_dir).absolute())
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(str(path), str(dest))


def install(plan: Plan) -> None:
    """Write the plan's files (each replaced whole, never written through a link) and remove its stale ones."""
    for path in plan.stale:
        path.unlink()
    for path, data in plan.writes.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(f".{path.name}.partial")
        partial.write_bytes(data)
        os.replace(partial, path)

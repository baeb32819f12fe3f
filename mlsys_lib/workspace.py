"""The student's work folder: a copy of the released labs, so that the release stays as released.

``labs/`` is the release (in the course repository, or in the student kit); ``work/`` beside it is
the student's own. :func:`fetch` copies each lab not fetched yet into ``work/<lab>/`` and never
touches a lab already there, and :func:`jupyter_command` starts JupyterLab in ``work/``. The
instructor's ``mlsys course release`` rewrites ``labs/``, never ``work/``.
"""

from __future__ import annotations

import os
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path

RELEASE = "labs"
WORK = "work"


def find_release(start: Path | None = None) -> Path:
    """The ``labs/`` folder (one with ``lab*/*.ipynb``) in ``start`` (default: the current folder)
    or the nearest folder above it; ``FileNotFoundError`` if there is none."""
    origin = Path(start or Path.cwd()).resolve()
    for folder in [origin, *origin.parents]:
        if released_labs(folder / RELEASE):
            return folder / RELEASE
    raise FileNotFoundError(f"no released labs (a {RELEASE}/ folder of lab notebooks) in {origin} or above it: "
                            "run this in the course repository or in the unpacked student kit")


def work_dir(release: Path) -> Path:
    """The work folder that goes with the release folder ``release``: ``work/`` beside it."""
    return Path(release).parent / WORK


def released_labs(release: Path) -> list[str]:
    """The labs in ``release`` (folders ``lab*`` holding a notebook), sorted."""
    return sorted({notebook.parent.name for notebook in Path(release).glob("lab*/*.ipynb")})


@dataclass
class Fetched:
    """What :func:`fetch` did: the labs it copied and those it left alone (fetched before)."""

    copied: list[str] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)


def fetch(release: Path, labs: list[str] | None = None, work: Path | None = None) -> Fetched:
    """Copy each of ``labs`` (default: every lab of ``release``) into ``work`` (default:
    :func:`work_dir`) unless ``work/<lab>`` exists already (a file, folder or link): a copy that
    exists is never overwritten. A lab is copied under a temporary name and then renamed, so an
    interrupted copy is never mistaken for one fetched. ``ValueError`` names unknown labs."""
    known = released_labs(release)
    unknown = sorted(set(labs or ()) - set(known))
    if unknown:
        raise ValueError(f"no released lab {', '.join(unknown)}; the labs are: {', '.join(known) or '(none)'}")
    work = Path(work or work_dir(release))
    work.mkdir(parents=True, exist_ok=True)
    done = Fetched()
    for lab in labs or known:
        target = work / lab
        if os.path.lexists(target):
            done.kept.append(lab)
            continue
        partial = work / f".{lab}.partial"
        if partial.is_dir() and not partial.is_symlink():
            shutil.rmtree(partial)
        shutil.copytree(Path(release) / lab, partial, symlinks=True,
                        ignore=shutil.ignore_patterns(".ipynb_checkpoints"))
        partial.rename(target)
        done.copied.append(lab)
    return done


def jupyter_command(work: Path, *, port: int | None = None, browser: bool = True) -> list[str]:
    """The command that starts JupyterLab in ``work``: on ``port`` (default: Jupyter's, 8888 or
    the next free one), opening a browser tab or not; with ``--allow-root`` when run as root
    (a container, a lab server), which Jupyter refuses otherwise."""
    command = [sys.executable, "-m", "jupyterlab", f"--ServerApp.root_dir={Path(work).resolve()}"]
    if port is not None:
        command.append(f"--port={port}")
    if not browser:
        command.append("--no-browser")
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        command.append("--allow-root")
    return command

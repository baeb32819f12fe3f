"""File access the grader can trust on paths a student could have shaped.

A submission folder (an LMS download, the exchange's inbound folder, a worker's working copy) may
hold symbolic links, FIFOs or device files: a link named ``lab01_tensors.ipynb`` that points at the
gradebook, a folder that is a link to the instructor's home, ``/dev/zero`` that never ends. The
grader reads such paths only through this module, which

* walks from a trusted folder one component at a time, relative to an open directory descriptor,
  never following a link (``O_NOFOLLOW``), so a link anywhere below the folder is refused;
* takes regular files only (no FIFO, device or socket: ``O_NONBLOCK`` so opening one cannot hang);
* reads at most a given number of bytes, so a huge file cannot exhaust memory or disk.

Every refusal is an :class:`UnsafePath` whose message says why, for ``grades.csv``.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import NamedTuple

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


class UnsafePath(ValueError):
    """A path the grader will not use (a link, not a regular file, too big); the message says why."""


class RegularFile(NamedTuple):
    """What was read: the bytes and the modification time (seconds since the epoch)."""

    data: bytes
    mtime: float


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISLNK, "a symbolic link"), (stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO"),
                       (stat.S_ISCHR, "a device"), (stat.S_ISBLK, "a device"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "not a regular file"


def _open_beneath(root: Path, relative: Path, flags: int) -> int:
    """Open ``root / relative`` without following a link in any component below ``root``."""
    parts = Path(relative).parts
    if not parts or Path(relative).is_absolute() or ".." in parts:
        raise UnsafePath(f"{relative}: not a path inside {root}")
    fd = os.open(root, _DIR_FLAGS)
    try:
        for depth, part in enumerate(parts):
            last = depth == len(parts) - 1
            try:
                next_fd = os.open(part, flags if last else _DIR_FLAGS, dir_fd=fd)
            except OSError as error:
                try:
                    mode = os.stat(part, dir_fd=fd, follow_symlinks=False).st_mode
                except OSError:
                    raise UnsafePath(f"{Path(*parts[:depth + 1])}: {error.strerror.lower()}") from None
                raise UnsafePath(f"{Path(*parts[:depth + 1])} is {_kind(mode)}") from None
            os.close(fd)
            fd = next_fd
        return fd
    except BaseException:
        os.close(fd)
        raise


def read_beneath(root: Path, relative: Path, limit: int) -> RegularFile:
    """The regular file ``root / relative``; :class:`UnsafePath` if any component below ``root`` is
    a link, the file is not a regular file, or it holds more than ``limit`` bytes."""
    fd = _open_beneath(Path(root), Path(relative), _FILE_FLAGS)
    try:
        status = os.fstat(fd)
        mode = status.st_mode
        if not stat.S_ISREG(mode):
            raise UnsafePath(f"{relative} is {_kind(mode)}")
        chunks, size = [], 0
        while size <= limit:
            chunk = os.read(fd, min(1 << 20, limit + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        if size > limit:
            raise UnsafePath(f"{relative} is larger than {limit} bytes")
        return RegularFile(b"".join(chunks), status.st_mtime)
    finally:
        os.close(fd)


def read_regular(path: Path, limit: int) -> RegularFile:
    """:func:`read_beneath` for a path whose folder the grader trusts (only the file itself may not be)."""
    path = Path(path)
    return read_beneath(path.parent, Path(path.name), limit)


def check_tree(root: Path, *, max_bytes: int, max_files: int = 1000) -> list[str]:
    """Why the folder ``root`` (made by the grader, written by tools it runs) must not be used: links,
    special files, more than ``max_files`` entries or ``max_bytes`` in all. Empty when it is sound."""
    problems, files, total = [], 0, 0
    for folder, dirs, names in os.walk(root, followlinks=False):
        for name in dirs + names:
            path = Path(folder) / name
            mode = path.lstat().st_mode
            if stat.S_ISDIR(mode):
                continue
            if not stat.S_ISREG(mode):
                problems.append(f"{path.relative_to(root)} is {_kind(mode)}")
                continue
            files += 1
            total += path.lstat().st_size
    if files > max_files:
        problems.append(f"{files} files (at most {max_files})")
    if total > max_bytes:
        problems.append(f"{total} bytes (at most {max_bytes})")
    return problems

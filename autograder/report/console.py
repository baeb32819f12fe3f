"""What the course tool shows on the terminal: its own summary, not the chatter of what it runs.

Grading and rendering start many processes (grading workers, Jupyter kernels, nbgrader's tools)
whose banners and library warnings would bury the summary. :func:`children_to_log` sends whatever
they write to a log file; :class:`Progress` shows the batch's progress on one line of a terminal.
``mlsys course -v`` turns both off and shows everything.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import sys
import warnings
from pathlib import Path
from typing import Iterator

#: A progress message of :func:`autograder.run.batch.grade_batch`: ``|###---| [3/11] student: graded``.
PROGRESS_MESSAGE = re.compile(r"\|[#-]+\| \[\d+/\d+\] ")


def _writes_to(stream, fd: int) -> bool:
    """Whether the Python ``stream`` writes to the file descriptor ``fd`` (not to a capture, say)."""
    try:
        return stream.fileno() == fd
    except (AttributeError, OSError, ValueError):  # io.UnsupportedOperation: an in-memory stream
        return False


@contextlib.contextmanager
def children_to_log(log: Path) -> Iterator[None]:
    """Inside: what child processes and C libraries write to standard output and error goes to
    ``log`` (overwritten), while Python's ``sys.stdout`` and ``sys.stderr`` still reach the
    terminal; Python warnings are ignored, in this process and in the children it starts."""
    Path(log).parent.mkdir(parents=True, exist_ok=True)
    streams, environment = (sys.stdout, sys.stderr), os.environ.get("PYTHONWARNINGS")
    for stream in streams:
        stream.flush()
    saved = [os.dup(1), os.dup(2)]
    with open(log, "wb") as sink, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        os.environ["PYTHONWARNINGS"] = "ignore"
        sys.stdout, sys.stderr = (
            open(terminal, "w", buffering=1, encoding=stream.encoding or "utf-8", errors="replace", closefd=False)
            if _writes_to(stream, fd) else stream for fd, terminal, stream in zip((1, 2), saved, streams))
        os.dup2(sink.fileno(), 1)
        os.dup2(sink.fileno(), 2)
        try:
            yield
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            sys.stdout, sys.stderr = streams
            for fd in saved:
                os.close(fd)
            if environment is None:
                os.environ.pop("PYTHONWARNINGS", None)
            else:
                os.environ["PYTHONWARNINGS"] = environment


class Progress:
    """A ``log`` callback for the batch: progress messages rewrite one terminal line in place (and
    are dropped when the output is not a terminal: a make log); other messages (warnings) get a
    line of their own; ``verbose`` prints every message on its own line."""

    def __init__(self, verbose: bool = False, prefix: str = ""):
        self.verbose, self.prefix, self.shown = verbose, prefix, False

    def __call__(self, message: str) -> None:
        if self.verbose or not PROGRESS_MESSAGE.match(message):
            self.clear()
            print(self.prefix + message, flush=True)
        else:
            self.show(message)

    def show(self, message: str) -> None:
        """Show ``message`` on the progress line (on a terminal only; never when ``verbose``)."""
        if sys.stdout.isatty() and not self.verbose:
            width = shutil.get_terminal_size().columns - 1
            sys.stdout.write("\r" + (self.prefix + message)[:width].ljust(width))
            sys.stdout.flush()
            self.shown = True

    def clear(self) -> None:
        """Erase the progress line, if one is shown."""
        if self.shown:
            sys.stdout.write("\r" + " " * (shutil.get_terminal_size().columns - 1) + "\r")
            sys.stdout.flush()
            self.shown = False

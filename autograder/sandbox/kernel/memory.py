"""Runs inside the grading kernel: a cell that exhausts memory must not starve the cells after it.

A cell that allocates until ``MemoryError`` (the sandbox caps the address space) leaves that memory
held by its traceback: IPython keeps the last exception and its traceback (``sys.last_value``,
``sys.last_traceback``, the last execution result, its traceback formatter), and the traceback's
frames keep every local. The next cells then cannot allocate either and the kernel stalls until the
grader's cell timeout (minutes per student). After such a cell this hook drops the tracebacks and
collects, so the failing cell scores what it scores and the rest of the notebook is graded normally.

The kernel's start-up line (:func:`autograder.sandbox.kernel.exec_line`, or :data:`EXEC_LINE` alone
for an ungraded kernel) installs it; it leaves no name in the student's namespace.
"""

from __future__ import annotations

import gc
import sys


def release_memory_after_memory_error(result) -> None:
    """IPython ``post_run_cell`` callback: drop the frames of a cell that ran out of memory.

    The exception itself stays (the cell still failed, its reply still says so); only the tracebacks,
    which hold the frames and so their locals, go.
    """
    error = result.error_in_exec
    if not isinstance(error, MemoryError):
        return
    while error is not None:  # the exception and those it was raised from or during
        error.__traceback__ = None
        error = error.__cause__ or error.__context__
    sys.last_traceback = None
    shell = _shell()
    if hasattr(shell.InteractiveTB, "tb"):
        shell.InteractiveTB.tb = None
    gc.collect()


def _shell():
    from IPython import get_ipython

    return get_ipython()


def install() -> None:
    """Register the hook with the running IPython kernel."""
    _shell().events.register("post_run_cell", release_memory_after_memory_error)


#: The kernel's ``exec_lines`` entry that installs only this hook, without binding a name.
EXEC_LINE = "__import__('autograder.sandbox.kernel.memory').sandbox.kernel.memory.install()"

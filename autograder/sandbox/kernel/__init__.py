"""What runs inside the grading kernel: the only part of ``autograder`` the sandbox shows it.

- :mod:`.memory`  frees what a cell that ran out of memory held, so the cells after it still run;
- :mod:`.guard`   reports tampering with grading and restores what the tests rely on, at every cell;
- :mod:`.shutdown` lets the kernel end as soon as it has answered its shutdown request;
- :mod:`.start`   the sandbox's entry point: limits, an unprivileged user, then the kernel.

The launcher starts the kernel with ``--IPKernelApp.exec_lines=<exec_line(...)>``, which installs
the first three before any cell of the notebook runs, after giving the threads the kernel starts from
then on 1 MiB stacks (:data:`THREAD_STACK_BYTES`). This package imports only the standard library
and (inside the kernel) IPython: nothing else of ``autograder``, nbgrader or nbformat.
"""

from __future__ import annotations

import re

#: Stack size of the threads the graded kernel starts [bytes] (Linux's default is 8 MiB): 1024 threads of
#: Numba's CUDA simulator, one block's most, then reserve 1 GiB of the kernel's address space, not 8 GiB,
#: so that a block of 1024 fits the address-space limit (``c.Sandbox.memory_mb``, 4 GiB by default).
THREAD_STACK_BYTES = 1 << 20

_DIGEST = re.compile(r"[0-9a-f]{64}")
_MODULE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")


def exec_line(report_fd: int, test_cells: list[str], pinned: list[str]) -> str:
    """The one-line Python statement that installs the memory hook and the guard at kernel start-up.

    ``report_fd``: the write end of the supervisor's report pipe, inherited by the kernel;
    ``test_cells``: sha256 hex digests of the graded test cells' stripped sources;
    ``pinned``: the modules those cells import. The statement binds no name in the user namespace.
    ``ValueError`` if an argument could not appear in it safely.
    """
    if type(report_fd) is not int or report_fd < 0:
        raise ValueError(f"report_fd must be a file descriptor number, got {report_fd!r}")
    bad = [digest for digest in test_cells if not isinstance(digest, str) or not _DIGEST.fullmatch(digest)]
    bad += [name for name in pinned if not isinstance(name, str) or not _MODULE.fullmatch(name)]
    if bad:
        raise ValueError(f"not a sha256 hex digest or module name: {bad[0]!r}")
    return (f"__import__('autograder.sandbox.kernel').sandbox.kernel.install("
            f"{report_fd}, {list(test_cells)!r}, {list(pinned)!r})")


def install(report_fd: int, test_cells: list[str], pinned: list[str]) -> None:
    """Set the threads' stack size (:data:`THREAD_STACK_BYTES`), install the memory hook and the ordered
    shutdown, then the guard (which takes the hook's callback and the shutdown's wrappers as part of the
    pristine state). Called by :func:`exec_line`'s statement inside the kernel."""
    import threading

    from . import guard, memory, shutdown

    threading.stack_size(THREAD_STACK_BYTES)
    memory.install()
    shutdown.install()
    guard.install(report_fd, test_cells, pinned)

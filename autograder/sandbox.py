"""The grading kernel's launcher: resource limits, then the kernel inside bubblewrap.

The grading kernelspec runs ``python -m autograder.sandbox {connection_file}`` in the folder of the
notebook being graded. This module then

1. sets resource limits (CPU seconds, address space, file size, processes) that the student's code
   cannot raise, and puts the kernel in a ``pids`` cgroup when one can be made (root ignores the
   process-count rlimit);
2. if bubblewrap (``bwrap``) is installed and enabled, runs the kernel in a sandbox: the whole system
   read-only, a private ``/tmp``, no network (its own network namespace), its own PID namespace, the
   course folder (gradebook, other submissions), ``solutions/`` and ``.git`` hidden behind empty
   folders, and only two folders writable: this submission's working copy and the folder of the
   kernel's Unix sockets (it talks to nbgrader over them; it has no network).

Settings come from :class:`autograder.config.Sandbox` through the ``MLSYS_SANDBOX`` environment
variable; see :func:`autograder.config.sandbox_environment`.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import sys
from pathlib import Path

from . import kernel_guard

SETTINGS_ENV = "MLSYS_SANDBOX"
NOBODY = "65534"


def bwrap_command(kernel: list[str], workdir: Path, connection_file: Path, hidden: list[str]) -> list[str]:
    """The bubblewrap command line that runs ``kernel`` with only ``workdir`` and its socket folder writable.

    The kernel must talk over Unix sockets (``transport: ipc``): it has no network.
    """
    connection = json.loads(connection_file.read_text())
    if connection.get("transport") != "ipc":
        raise ValueError(f"{connection_file}: a sandboxed kernel needs transport 'ipc', "
                         f"not {connection.get('transport')!r} (set c.KernelManager.transport = 'ipc')")
    sockets = Path(connection["ip"]).parent
    command = ["bwrap", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp"]
    for path in _needed_under_tmp():  # a course repository or venv living in /tmp stays readable
        command += ["--ro-bind", path, path]
    for path in hidden:
        if Path(path).exists():
            command += ["--tmpfs", str(path)]
    command += ["--bind", str(workdir), str(workdir), "--bind", str(sockets), str(sockets),
                "--ro-bind", str(connection_file), str(connection_file)]
    command += [
        "--chdir", str(workdir),
        "--unshare-all", "--unshare-user", "--uid", NOBODY, "--gid", NOBODY,
        "--die-with-parent", "--new-session",
        "--unsetenv", "JPY_PARENT_PID",  # the parent's PID means nothing in the new PID namespace
        "--setenv", "HOME", "/tmp", "--setenv", "NUMBA_CACHE_DIR", "/tmp/numba",
        "--setenv", "MPLCONFIGDIR", "/tmp/matplotlib",
        # one BLAS thread per process: graded notebooks share the cores and the process limit
        "--setenv", "OPENBLAS_NUM_THREADS", "1", "--setenv", "OMP_NUM_THREADS", "1",
    ]
    return command + kernel


def _needed_under_tmp() -> list[str]:
    """The repository (``mlsys_lib``, the autograder) and Python installations, where they lie under /tmp."""
    paths = {Path(__file__).resolve().parent.parent, Path(sys.prefix).resolve(), Path(sys.base_prefix).resolve()}
    return sorted(str(p) for p in paths if p.is_relative_to("/tmp") and p != Path("/tmp"))


def _processes_of_this_user() -> int:
    uid = os.getuid()
    count = 0
    for entry in Path("/proc").iterdir():
        try:
            count += entry.name.isdigit() and entry.stat().st_uid == uid
        except OSError:
            continue
    return count


def join_pids_cgroup(limit: int) -> bool:
    """Move this process into a fresh cgroup allowing ``limit`` processes; False if none can be made."""
    name = f"mlsys-grader-{os.getpid()}"
    for base in (Path("/sys/fs/cgroup/pids"), Path("/sys/fs/cgroup")):
        group = base / name
        try:
            group.mkdir()
            (group / "pids.max").write_text(str(limit))
            (group / "cgroup.procs").write_text(str(os.getpid()))
            return True
        except OSError:
            try:
                group.rmdir()
            except OSError:
                pass
    return False


def remove_empty_cgroups() -> None:
    """Remove the grader's cgroups whose kernels have exited (called by the grader, not the kernel)."""
    for base in (Path("/sys/fs/cgroup/pids"), Path("/sys/fs/cgroup")):
        for group in base.glob("mlsys-grader-*"):
            try:
                group.rmdir()
            except OSError:
                continue


def apply_limits(cpu_seconds: int, memory_mb: int, processes: int, file_mb: int) -> None:
    """Hard resource limits for this process and everything it starts."""
    def limit(kind, value):
        resource.setrlimit(kind, (value, value))

    limit(resource.RLIMIT_CPU, cpu_seconds)
    limit(resource.RLIMIT_FSIZE, file_mb * 2**20)
    limit(resource.RLIMIT_CORE, 0)
    if sys.platform.startswith("linux"):
        limit(resource.RLIMIT_AS, memory_mb * 2**20)
        limit(resource.RLIMIT_NPROC, _processes_of_this_user() + processes)


def main(argv: list[str]) -> None:
    """``python -m autograder.sandbox CONNECTION_FILE``: become the sandboxed kernel."""
    (connection_file,) = argv
    settings = json.loads(os.environ.get(SETTINGS_ENV, "{}"))
    kernel = [sys.executable, "-m", "ipykernel_launcher", "-f", connection_file,
              f"--IPKernelApp.exec_lines={kernel_guard.EXEC_LINE}"]
    if settings.get("processes"):
        join_pids_cgroup(settings["processes"])
    if settings:
        apply_limits(settings["cpu_seconds"], settings["memory_mb"], settings["processes"], settings["file_mb"])
    command = kernel
    if settings.get("bubblewrap") and shutil.which("bwrap"):
        command = bwrap_command(kernel, Path.cwd(), Path(connection_file).resolve(), settings["hidden"])
    os.execvp(command[0], command)


if __name__ == "__main__":
    main(sys.argv[1:])

"""Inside the sandbox, before the kernel: limits, an unprivileged user, then the IPython kernel.

``python -m autograder.sandbox.kernel.start SETTINGS_JSON`` is what :mod:`autograder.sandbox.sandbox`
runs inside bubblewrap. It

1. sets hard resource limits the student's code cannot raise (CPU seconds, address space, file
   size, tasks: processes and threads together, no core files);
2. when started as root (the grader runs as root: bubblewrap then uses no user namespace), switches
   to the kernel's own unprivileged user id, with no supplementary groups and no capabilities left,
   and refuses to go on if any capability survived;
3. creates the kernel's working folder on the private ``/tmp`` and moves into it;
4. copies Numba's caches of the library's compiled functions, which the read-only package carries
   in its ``__pycache__`` folders, into the kernel's private Numba cache folder (``NUMBA_CACHE_DIR``),
   so that every kernel does not compile them again (seconds per notebook); the sandboxes share none;
5. becomes the IPython kernel (in this process: a second interpreter start would cost a tenth of a
   second or more per notebook), whose start-up line installs the kernel guard
   (:func:`autograder.sandbox.kernel.exec_line`) before any cell of the notebook runs.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import resource
import shutil
import sys
from pathlib import Path


#: CPU seconds past ``cpu_seconds`` before SIGKILL, for a kernel that ignores SIGXCPU.
CPU_GRACE_S = 5


def apply_limits(cpu_seconds: int, memory_mb: int, tasks: int, file_mb: int) -> None:
    """Hard resource limits for this process and everything it starts. ``tasks`` caps the processes and
    threads of this user id (``RLIMIT_NPROC`` counts both).

    CPU time: at ``cpu_seconds`` the kernel gets SIGXCPU, which ends it (bubblewrap exits with
    128 + SIGXCPU, which tells the grader a limit stopped it, not a cell: it does not grade the
    notebook again); SIGKILL :data:`CPU_GRACE_S` later if it caught the signal. With equal limits the
    system would send SIGKILL alone, which a cell can send itself too.
    """
    def limit(kind, value):
        resource.setrlimit(kind, (value, value))

    resource.setrlimit(resource.RLIMIT_CPU, (cpu_seconds, cpu_seconds + CPU_GRACE_S))
    limit(resource.RLIMIT_FSIZE, file_mb * 2**20)
    limit(resource.RLIMIT_CORE, 0)
    if sys.platform.startswith("linux"):
        limit(resource.RLIMIT_AS, memory_mb * 2**20)
        limit(resource.RLIMIT_NPROC, tasks)


def drop_privileges(uid: int) -> None:
    """Become ``uid`` (group ``uid``) for good; raise if the switch left any capability."""
    os.setgroups([])
    os.setresgid(uid, uid, uid)
    os.setresuid(uid, uid, uid)
    with open("/proc/self/status") as status:
        caps = {k: v.strip() for k, v in (line.split(":", 1) for line in status if line.startswith("Cap"))}
    if os.getuid() != uid or int(caps.get("CapEff", "0"), 16) or int(caps.get("CapPrm", "0"), 16):
        raise SystemExit(f"sandbox: could not drop to user {uid} without capabilities ({caps})")


def seed_numba_cache(package: Path, cache_dir: str) -> int:
    """Copy the ``*.nbi``/``*.nbc`` files in ``package``'s ``__pycache__`` folders to where Numba looks
    for them when ``NUMBA_CACHE_DIR`` is ``cache_dir``: ``<cache_dir>/<folder name>_<sha1 of the
    folder's absolute path>`` (``numba.core.caching._CacheLocator.get_suitable_cache_subpath``).
    Numba checks each index against its source file's time and size, so a stale one is recompiled,
    never used. Returns the number of files copied."""
    copied = 0
    for pycache in package.rglob("__pycache__"):
        files = [f for f in pycache.iterdir() if f.suffix in (".nbi", ".nbc") and f.is_file()]
        if not files:
            continue
        source_dir = str(pycache.parent.resolve())
        target = Path(cache_dir) / f"{os.path.basename(source_dir)}_{hashlib.sha1(source_dir.encode()).hexdigest()}"
        target.mkdir(parents=True, exist_ok=True)
        for file in files:
            shutil.copyfile(file, target / file.name)
            copied += 1
    return copied


def main(argv: list[str]) -> None:
    (raw,) = argv
    settings = json.loads(raw)
    launched_in = os.getcwd()  # sys.path[0] under ``python -m``
    apply_limits(settings["cpu_seconds"], settings["memory_mb"], settings["tasks"], settings["file_mb"])
    if settings.get("uid") is not None and os.getuid() == 0:
        drop_privileges(settings["uid"])
    if settings.get("workdir"):
        os.makedirs(settings["workdir"], mode=0o700, exist_ok=True)
        os.chdir(settings["workdir"])
    spec = importlib.util.find_spec("mlsys_lib")
    if os.environ.get("NUMBA_CACHE_DIR") and spec and spec.submodule_search_locations:
        seed_numba_cache(Path(spec.submodule_search_locations[0]), os.environ["NUMBA_CACHE_DIR"])
    if settings.get("probe"):  # see autograder.sandbox.sandbox.probe
        command = [sys.executable, "-c",
                   "import ipykernel, numpy, mlsys_lib, autograder.sandbox.kernel; print('sandbox ok')"]
        os.execv(command[0], command)
    from autograder.sandbox.kernel import exec_line

    line = exec_line(settings["report_fd"], settings["test_cells"], settings["pinned"])
    sys.argv = ["ipykernel_launcher", "-f", settings["connection"], f"--IPKernelApp.exec_lines={line}",
                "--HistoryManager.enabled=False", *settings["kernel_args"]]
    if sys.path and sys.path[0] == launched_in:  # as ipykernel_launcher does; IPython adds the cwd back
        del sys.path[0]
    from ipykernel import kernelapp

    kernelapp.launch_new_instance()


if __name__ == "__main__":
    main(sys.argv[1:])

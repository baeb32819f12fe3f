"""The grading kernel's launcher: a supervisor outside the sandbox, the kernel inside it.

The grading kernelspec runs ``python -m autograder.sandbox {connection_file}`` (the package's
``__main__`` calls :func:`main`). Without sandbox settings (plain nbgrader, ``mlsys course check``)
this simply becomes the kernel. While the course tool grades (settings in ``$MLSYS_SANDBOX``, see
:func:`autograder.config.sandbox_settings`) it stays outside as a **supervisor** and starts the
kernel inside bubblewrap, which shows the kernel only:

* the system read-only (``/usr`` and the few files of ``/etc`` programs need; a generated
  ``/etc/passwd``), the Python installation and virtual environment read-only, and of the repository
  only ``mlsys_lib`` (the lab's *grading edition*, its references removed) and
  ``autograder/sandbox/kernel`` (with the ``__init__.py`` files of its two parent packages, which
  import nothing);
* a private ``/tmp`` (the kernel's working folder, its home) and ``/dev/shm``: size-limited tmpfs
  mounts that vanish with the kernel, so nothing a notebook writes reaches the grader's disk;
* the folder of its Unix sockets (it talks to nbgrader over them; it has no network) and a copy of
  its connection file;
* an empty environment but for an allow-list; its own PID, IPC, UTS and network namespaces.

No instructor home, course folder, submissions, solutions, git history or other file of the
machine is visible; nothing tells the kernel what is hidden. When the grader runs as root, the
kernel drops to an unprivileged user id of its own (:mod:`autograder.sandbox.kernel.start`), so
files only root may read stay unreadable even where they are visible. CPU seconds, address space,
file size, tasks, processes and (via the supervisor) wall-clock time are limited:

* tasks (processes and threads, which Linux counts alike): ``c.Sandbox.processes + c.Sandbox.threads``,
  the hard ceiling, by ``pids.max`` of a cgroup of the kernel's own when the grader runs as root and
  can make one, and by ``RLIMIT_NPROC`` in every case; ``threads`` is room for the CUDA simulator's
  thread per GPU thread of a block;
* processes alone (threads not counted): ``c.Sandbox.processes``. Linux has no such limit, so the
  supervisor counts the processes of the sandbox's PID namespace every :data:`PROCESS_POLL_S` and stops
  the whole sandbox past the budget, as a fork bomb (with bubblewrap only: without it only the task cap
  applies).

The supervisor copies what the kernel guard (:mod:`autograder.sandbox.kernel`) writes to its report
pipe into ``<connection file>.report.jsonl`` (a folder the kernel cannot see), bounded, and adds what
it observed itself: the pipe closed early, the wall-clock limit reached, a ``limit`` that made it stop
the kernel (its ``what`` says which, for the notebook's cells and the instructor).
"""

from __future__ import annotations

import json
import os
import select
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from ..intake.safe_fs import read_regular
from ..paths import REPO

SETTINGS_ENV = "MLSYS_SANDBOX"
#: Where the kernel finds its connection file inside the sandbox.
CONNECTION_INSIDE = "/run/kernel/connection.json"
#: The user id of the kernel in a user namespace (grader not root).
NOBODY = 65534
#: Seconds the supervisor waits past the notebook's wall-clock limit before it kills the kernel
#: (the grader stops sending cells at the limit; this is the backstop).
KILL_GRACE_S = 60
#: Seconds between two counts of the sandbox's processes by the supervisor (:func:`sandbox_processes`, about
#: 0.05 ms each): a fork bomb is stopped within about this of passing ``c.Sandbox.processes``, the task
#: cap bounding what it can start meanwhile.
PROCESS_POLL_S = 0.03
#: Most bytes of kernel reports, and of what the kernel writes to its stdout and stderr, kept per notebook.
REPORT_LIMIT = 512 * 1024
CONSOLE_LIMIT = 64 * 1024
#: Files of /etc a Python kernel needs (the dynamic linker's cache, time zone, alternatives; fontconfig's
#: settings, without which matplotlib's font search prints "Fontconfig error" into the graded notebook).
ETC_FILES = ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "localtime", "alternatives", "nsswitch.conf", "mime.types",
             "fonts")
#: Environment variables the kernel always gets from the grader when they are set.
PASSED_ENV = ("NBGRADER_EXECUTION", "MLSYS_DEVICE", "NUMBA_ENABLE_CUDASIM", "LANG", "LC_ALL", "TZ")


def report_path(connection_file: Path) -> Path:
    """Where the supervisor of the kernel with this connection file writes its reports."""
    return Path(connection_file).with_suffix(".report.jsonl")


def console_path(connection_file: Path) -> Path:
    """Where it drains the kernel's stdout and stderr (their start kept); removed with the report once read."""
    return Path(connection_file).with_suffix(".console.log")


def system_binds() -> list[str]:
    """bwrap arguments showing the system read-only: /usr, the top-level links into it, a few /etc files."""
    args = ["--ro-bind", "/usr", "/usr", "--perms", "0755", "--dir", "/etc"]  # bwrap would make /etc 0700
    for name in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
        path = Path("/") / name
        if path.is_symlink():
            args += ["--symlink", os.readlink(path), str(path)]
        elif path.is_dir():
            args += ["--ro-bind", str(path), str(path)]
    for name in ETC_FILES:
        if (Path("/etc") / name).exists():
            args += ["--ro-bind", f"/etc/{name}", f"/etc/{name}"]
    return args


def python_paths() -> list[Path]:
    """The folders of this Python installation and its environment (resolved), outermost first."""
    import site

    candidates = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix, *site.getsitepackages()}
    if site.ENABLE_USER_SITE and Path(site.getusersitepackages()).is_dir():
        candidates.add(site.getusersitepackages())
    paths = sorted({Path(p).resolve() for p in candidates if Path(p).is_dir()}, key=lambda p: len(p.parts))
    kept: list[Path] = []
    for path in paths:
        if not any(path.is_relative_to(outer) for outer in kept):
            kept.append(path)
    return kept


def code_binds(edition: str | None) -> list[str]:
    """bwrap arguments showing ``mlsys_lib`` (the grading edition if given) and
    ``autograder/sandbox/kernel`` (with ``autograder/__init__.py`` and ``autograder/sandbox/__init__.py``,
    which import nothing) at their repository paths, and nothing else of the repository."""
    library = Path(edition) if edition else REPO / "mlsys_lib"
    if not (library / "__init__.py").is_file():
        raise ValueError(f"{library}: not an mlsys_lib package")
    kernel = REPO / "autograder" / "sandbox" / "kernel"
    args = ["--ro-bind", str(library), str(REPO / "mlsys_lib")]
    for package in (REPO / "autograder" / "__init__.py", REPO / "autograder" / "sandbox" / "__init__.py"):
        args += ["--ro-bind", str(package), str(package)]
    args += ["--ro-bind", str(kernel), str(kernel)]
    for path in python_paths():
        args += ["--ro-bind", str(path), str(path)]
    return args


def _data_fd(text: str) -> int:
    """A file descriptor holding ``text`` (for bwrap's ``--file``), at offset 0."""
    fd = os.memfd_create("mlsys-sandbox-data", 0)
    os.write(fd, text.encode())
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


def environment(settings: dict) -> dict[str, str]:
    """The kernel's whole environment: the course's allow-list plus ``settings['environment']``."""
    env = {
        "PATH": os.pathsep.join([str(Path(sys.executable).parent), "/usr/local/bin", "/usr/bin", "/bin"]),
        "HOME": "/tmp", "USER": "student", "LOGNAME": "student", "LANG": "C.UTF-8",
        "PYTHONPATH": str(REPO), "PYTHONDONTWRITEBYTECODE": "1", "NUMBA_CACHE_DIR": "/tmp/.numba", "MPLCONFIGDIR": "/tmp/.matplotlib",
        "IPYTHONDIR": "/tmp/.ipython", "JUPYTER_RUNTIME_DIR": "/tmp/.jupyter",
        # one BLAS thread per process: graded notebooks share the cores and the process limit
        "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
    }
    for name in (*PASSED_ENV, *settings.get("environment", [])):
        if name in os.environ:
            env[name] = os.environ[name]
    return env


def bwrap_command(inner: list[str], settings: dict, sockets: Path, fds: dict[str, int], privileged: bool) -> list[str]:
    """The bubblewrap command line that runs ``inner`` as described in the module docstring.

    ``fds`` holds open descriptors of the connection file (``connection``) and of the generated
    ``passwd`` and ``group`` files; ``privileged`` is True when bwrap runs as root (the kernel then
    drops to its own user id itself; otherwise a user namespace maps it to ``NOBODY``).
    """
    disk = str(settings["disk_mb"] * 2**20)
    command = ["bwrap", "--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts", "--unshare-cgroup-try",
               "--hostname", "grader", "--die-with-parent", "--new-session", "--clearenv"]
    if privileged:
        command += ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
    else:
        command += ["--unshare-user", "--uid", str(NOBODY), "--gid", str(NOBODY)]
    for name, value in environment(settings).items():
        command += ["--setenv", name, value]
    command += system_binds()
    command += ["--proc", "/proc", "--dev", "/dev",
                "--perms", "1777", "--size", disk, "--tmpfs", "/tmp",
                "--perms", "1777", "--size", disk, "--tmpfs", "/dev/shm"]
    binds = code_binds(settings.get("edition"))
    for path in settings.get("extra_paths", []):
        binds += ["--ro-bind", str(Path(path).resolve()), str(path)]
    binds += ["--bind", str(sockets), str(sockets)]
    targets = [Path(binds[i + 2]) for i in range(0, len(binds), 3)]
    for folder in sorted({parent for target in targets for parent in target.parents} - {Path("/")},
                         key=lambda p: len(p.parts)):  # the kernel's user must pass (bwrap would make them 0700)
        command += ["--perms", "0755", "--dir", str(folder)]
    command += binds + ["--perms", "0755", "--dir", str(Path(CONNECTION_INSIDE).parent),
                        "--perms", "0444", "--file", str(fds["connection"]), CONNECTION_INSIDE,
                        "--perms", "0444", "--file", str(fds["passwd"]), "/etc/passwd",
                        "--perms", "0444", "--file", str(fds["group"]), "/etc/group",
                        "--chdir", "/tmp"]
    return command + ["--"] + inner


#: Where the grader makes the kernels' pids cgroups: the cgroup v1 pids hierarchy, or the v2 root.
CGROUP_ROOTS = (Path("/sys/fs/cgroup/pids"), Path("/sys/fs/cgroup"))


def task_limit(settings: dict) -> int:
    """Tasks (processes and threads: Linux counts both alike) one kernel may have at once."""
    return settings["processes"] + settings.get("threads", 0)


def _tasks_of_this_user() -> int:
    """Tasks (threads of every process) of this user: what RLIMIT_NPROC counts against its limit."""
    uid = os.getuid()
    count = 0
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and entry.stat().st_uid == uid:
                count += len(os.listdir(entry / "task"))
        except OSError:
            continue
    return count


def join_pids_cgroup(limit: int) -> bool:
    """Move this process into a fresh cgroup allowing ``limit`` tasks (``pids.max``); False if none can be
    made (not root, no pids controller, cgroups not delegated): then RLIMIT_NPROC alone caps the kernel.
    Run in the sandbox's first process, before it execs bubblewrap."""
    name = f"mlsys-grader-{os.getpid()}"
    for base in CGROUP_ROOTS:
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


def pids_cgroup(pid: int) -> Path | None:
    """The cgroup :func:`join_pids_cgroup` made for process ``pid``, if ``pid`` is in it; else None."""
    for base in CGROUP_ROOTS:
        group = base / f"mlsys-grader-{pid}"
        try:
            if str(pid) in (group / "cgroup.procs").read_text().split():
                return group
        except OSError:
            continue
    return None


def sandbox_processes(bwrap: int) -> int | None:
    """Processes (thread-group leaders: threads do not count) in the PID namespace bubblewrap process ``bwrap``
    made, its own init and the kernel among them: the entries of the /proc the sandbox mounted. None while
    that /proc is not in place (the sandbox starting, or gone)."""
    try:
        with open(f"/proc/{bwrap}/task/{bwrap}/children") as children:
            init = children.read().split()[0]  # bubblewrap's only child: the namespace's PID 1
        proc = f"/proc/{init}/root/proc"
        if os.stat(proc).st_dev == os.stat("/proc").st_dev:
            return None  # the sandbox's root is not in place yet: this is the grader's own /proc
        return sum(name.isdigit() for name in os.listdir(proc))
    except (OSError, IndexError):
        return None


def remove_empty_cgroups() -> None:
    """Remove the grader's cgroups whose kernels have exited (called by the grader, not the kernel)."""
    for base in CGROUP_ROOTS:
        for group in base.glob("mlsys-grader-*"):
            try:
                group.rmdir()
            except OSError:
                continue


class Report:
    """The kernel's report lines, copied into a file as they arrive, at most :data:`REPORT_LIMIT` bytes."""

    def __init__(self, path: Path):
        self.handle = open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600), "wb")
        self.size = 0
        self.partial = b""

    def feed(self, data: bytes) -> None:
        *lines, self.partial = (self.partial + data).split(b"\n")
        for line in lines:
            self.write(line)
        if len(self.partial) > 4096:
            self.partial = b""

    def write(self, line: bytes) -> None:
        if self.size >= REPORT_LIMIT:
            return
        if self.size + len(line) + 1 > REPORT_LIMIT:
            line = json.dumps({"event": "truncated"}).encode()
        self._append(line)

    def event(self, name: str, **fields) -> None:
        """A line of the supervisor's own: kept even past :data:`REPORT_LIMIT` (it writes a few), so a
        kernel that fills its report cannot hide why it was stopped."""
        self._append(json.dumps({"event": name, **fields, "by": "supervisor"}).encode())

    def _append(self, line: bytes) -> None:
        self.handle.write(line + b"\n")
        self.handle.flush()
        self.size += len(line) + 1


def prepare(settings: dict, connection: int, sockets: Path, report_fd: int, kernel_args: list[str],
            *, probe: bool = False) -> tuple[list[str], list[int]]:
    """The command that starts :mod:`autograder.sandbox.kernel.start` in the sandbox, and the descriptors
    it needs.

    ``connection`` is an open descriptor of the kernel's connection file, ``report_fd`` the write end
    of the report pipe; ``probe`` starts a short import check instead of the kernel.
    """
    privileged = os.geteuid() == 0
    uid = settings["uid"] + os.getpid() % 100_000 if privileged else NOBODY
    inner = {
        "cpu_seconds": settings["cpu_seconds"], "memory_mb": settings["memory_mb"], "file_mb": settings["file_mb"],
        # RLIMIT_NPROC counts the tasks of the kernel's real user id: its own when grading as root, else
        # the instructor's, whose tasks of the moment are added
        "tasks": task_limit(settings) if privileged else _tasks_of_this_user() + task_limit(settings),
        "uid": uid if privileged else None, "workdir": f"/tmp/{Path.cwd().name}", "report_fd": report_fd,
        "test_cells": settings["test_cells"], "pinned": settings["pinned"], "kernel_args": kernel_args,
        "connection": CONNECTION_INSIDE, "probe": probe,
    }
    fds = {"connection": connection,
           "passwd": _data_fd(f"root:x:0:0::/root:/usr/sbin/nologin\nstudent:x:{uid}:{uid}::/tmp:/usr/sbin/nologin\n"),
           "group": _data_fd(f"root:x:0:\nstudent:x:{uid}:\n")}
    if settings["bubblewrap"] and shutil.which("bwrap"):
        start = [sys.executable, "-m", "autograder.sandbox.kernel.start", json.dumps(inner)]
        return bwrap_command(start, settings, sockets, fds, privileged), [report_fd, *fds.values()]
    # resource limits only: the kernel can read and write what the grader can, as the grader
    inner.update(connection=f"/proc/self/fd/{connection}", uid=None, workdir=None)
    return [sys.executable, "-m", "autograder.sandbox.kernel.start", json.dumps(inner)], [report_fd, connection]


def supervise(settings: dict, connection_file: Path, kernel_args: list[str]) -> int:
    """Start the kernel in its sandbox and watch it until it ends; returns its exit status."""
    connection = json.loads(read_regular(connection_file, 64 * 1024).data)
    if connection.get("transport") != "ipc":
        raise ValueError(f"{connection_file}: a sandboxed kernel needs transport 'ipc', "
                         f"not {connection.get('transport')!r} (set c.KernelManager.transport = 'ipc')")
    if not os.path.isabs(connection.get("ip", "")):  # bwrap would bind (and create folders) relative to here
        raise ValueError(f"{connection_file}: a sandboxed kernel needs an absolute socket path as its ip, "
                         f"not {connection.get('ip')!r} (see autograder.run.nbgrader_run.grading_environment)")
    read_end, write_end = os.pipe()
    connection_fd = os.open(connection_file, os.O_RDONLY | os.O_NOFOLLOW)
    command, fds = prepare(settings, connection_fd, Path(connection["ip"]).parent, write_end, kernel_args)
    console_read, console_write = os.pipe()
    limit = task_limit(settings)
    cgroup = settings.get("cgroup", True) and os.geteuid() == 0
    child = subprocess.Popen(command, pass_fds=fds, stdin=subprocess.DEVNULL, stdout=console_write,
                             stderr=console_write, preexec_fn=(lambda: join_pids_cgroup(limit)) if cgroup else None)
    for fd in (*fds, console_write):
        os.close(fd)
    group = pids_cgroup(child.pid) if cgroup else None
    processes = settings["processes"] if command[0] == "bwrap" else None  # counted in its PID namespace
    report = Report(report_path(connection_file))
    report.event("tasks", limit=limit, cgroup=group is not None, processes=processes)
    # jupyter_client ends a kernel that does not shut down by SIGTERM to the process group: pass it
    # on and keep watching, so the report still gets its "exit"
    signal.signal(signal.SIGTERM, lambda *_: child.terminate())
    try:
        return watch(child, read_end, report, settings["wall_seconds"] + KILL_GRACE_S,
                     console_read, console_path(connection_file), processes)
    finally:
        if group:
            try:
                group.rmdir()  # empty once the sandbox has ended (its PID namespace takes every task with it)
            except OSError:
                pass  # remove_empty_cgroups, after the batch, tries again


def probe(settings: dict, timeout: float = 120) -> None:
    """Start the sandbox once with a short import check; ``RuntimeError`` saying why if it fails,
    so a broken sandbox stops a batch before it grades every student 0."""
    import tempfile

    with tempfile.TemporaryDirectory(prefix="mlsys-probe-") as sockets:
        read_end, write_end = os.pipe()
        command, fds = prepare(settings, _data_fd("{}"), Path(sockets), write_end, [], probe=True)
        try:
            done = subprocess.run(command, pass_fds=fds, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            raise RuntimeError(f"the grading sandbox did not start within {timeout:g} s") from None
        finally:
            for fd in (read_end, *fds):
                os.close(fd)
    if done.returncode != 0 or "sandbox ok" not in done.stdout:
        tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-12:])
        raise RuntimeError(f"the grading sandbox does not start (exit {done.returncode}):\n{tail}\n"
                           "Fix it, or set c.Sandbox.bubblewrap = False to grade without isolation.")


def watch(child: subprocess.Popen, reports: int, report: Report, seconds: float,
          console: int | None = None, console_log: Path | None = None, processes: int | None = None) -> int:
    """Copy ``reports`` into ``report`` until ``child`` ends; kill it after ``seconds``.

    ``console`` (the kernel's stdout and stderr) is drained into ``console_log``, its first
    :data:`CONSOLE_LIMIT` bytes kept: nothing the kernel prints reaches the grader's terminal or
    fills its disk. With ``processes``, ``child`` is bubblewrap: the processes of its PID namespace
    are counted every :data:`PROCESS_POLL_S`, and past ``processes`` of them it is killed (and with it
    the namespace) and a ``limit`` reported; the ``exit`` event then says the most processes counted.
    """
    deadline = time.monotonic() + seconds
    tick = PROCESS_POLL_S if processes is not None else 1.0
    next_count, most = 0.0, None  # when to count next; the most processes counted
    readers = {reports: report.feed}
    if console is not None:
        log = open(os.open(console_log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600), "wb")
        kept = [0]

        def keep(data: bytes) -> None:
            data = data[:max(0, CONSOLE_LIMIT - kept[0])]
            kept[0] += len(data)
            log.write(data)
            log.flush()
        readers[console] = keep
    closing = None  # when the kernel, if it still runs then, closed its report channel early
    while child.poll() is None:
        left = deadline - time.monotonic()
        if left <= 0:
            report.event("wall_clock", seconds=seconds)
            child.kill()
            break
        if closing is not None and time.monotonic() >= closing:
            report.event("closed")  # the kernel closed its end while it still ran
            closing = None
        if processes is not None and time.monotonic() >= next_count:
            next_count = time.monotonic() + tick
            count = sandbox_processes(child.pid)
            if count is not None:
                most = max(most or 0, count)
                if count > processes:
                    report.event("limit", what=f"fork bomb: more than {processes} processes", processes=count)
                    child.kill()
                    break
        if not readers:
            time.sleep(min(left, tick, 0.2))
            continue
        for fd in select.select(list(readers), [], [], min(left, tick))[0]:
            data = os.read(fd, 65536)
            if data:
                readers[fd](data)
                continue
            del readers[fd]
            if fd == reports:  # the kernel's end closes when it exits, a moment before the sandbox does
                closing = time.monotonic() + 5
    while readers:  # what was written just before the end
        ready = select.select(list(readers), [], [], 0.5)[0]
        if not ready:
            break
        for fd in ready:
            data = os.read(fd, 65536)
            if data:
                readers[fd](data)
            else:
                del readers[fd]
    returncode = child.wait()
    report.event("exit", status=returncode, **({"processes": most} if processes is not None else {}))
    return returncode


def main(argv: list[str]) -> None:
    """``python -m autograder.sandbox CONNECTION_FILE [KERNEL ARGS...]``: become or supervise the kernel."""
    connection_file, *kernel_args = argv
    raw = os.environ.get(SETTINGS_ENV)
    if not raw:  # not grading: an ordinary kernel, with the memory guard
        from .kernel import memory

        command = [sys.executable, "-m", "ipykernel_launcher", "-f", connection_file,
                   f"--IPKernelApp.exec_lines={memory.EXEC_LINE}", *kernel_args]
        os.execv(command[0], command)
    sys.exit(supervise(json.loads(raw), Path(connection_file).resolve(), kernel_args))


if __name__ == "__main__":
    main(sys.argv[1:])

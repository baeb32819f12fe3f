"""What a grading kernel can see and do: a real sandboxed kernel, probed from inside.

Started exactly as nbgrader starts it while the course tool grades (the grading kernelspec, the
settings in ``$MLSYS_SANDBOX``), with a secret in the grader's environment, a private file in a
folder the kernel may read, and a server on the loopback interface.
"""

import copy
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import nbformat
import pytest
from jupyter_client import KernelManager
from nbclient import NotebookClient
from traitlets import Float
from traitlets.config import Config

from autograder import course
from autograder.cells import fill, solution_cells
from autograder.config import GRADING_KERNEL, load_config, sandbox_settings
from autograder.paths import LABS, REPO, SOLUTIONS
from autograder.run.nbgrader_run import grading_environment
from autograder.sandbox.sandbox import (REPORT_LIMIT, Report, join_pids_cgroup, pids_cgroup, python_paths,
                                       report_path, supervise, task_limit, watch)

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")

SECRET = "sandbox-honeypot-31c9"
#: Notebooks run to catch a race at the kernel's shutdown (it struck one in three or so).
KERNELS = 8


class Kernel:
    """A started grading kernel: ``run(code)`` returns what it printed (or raises with its error)."""

    def __init__(self, manager, client):
        self.manager, self.client = manager, client

    def run(self, code: str, timeout: float = 60) -> str:
        msg_id = self.client.execute(code, stop_on_error=False)
        out = []
        while True:
            msg = self.client.get_iopub_msg(timeout=timeout)
            if msg["parent_header"].get("msg_id") != msg_id:
                continue
            kind, content = msg["msg_type"], msg["content"]
            if kind == "stream":
                out.append(content["text"])
            elif kind == "error":
                raise AssertionError(f"{content['ename']}: {content['evalue']}")
            elif kind == "status" and content["execution_state"] == "idle":
                return "".join(out)

    def value(self, expression: str):
        return json.loads(self.run(f"import json as _json\nprint(_json.dumps({expression}))"))


@contextmanager
def started_kernel(tmp: Path, **settings_changes):
    """A grading kernel in its sandbox, with the course's settings changed by ``settings_changes``."""
    root, work, visible = tmp / "course", tmp / "course" / "autograded" / "s" / "lab01_tensors", tmp / "data"
    work.mkdir(parents=True)
    (work / "lab01_tensors.ipynb").write_text("### BEGIN HIDDEN TESTS")
    visible.mkdir()
    (visible / "public.txt").write_text("public")
    (visible / "private.txt").write_text(SECRET)
    (visible / "private.txt").chmod(0o600)
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    settings = sandbox_settings(load_config(root), "lab01_tensors")
    settings.update(disk_mb=16, extra_paths=[str(visible)], **settings_changes)
    os.environ["MLSYS_HONEYPOT_TOKEN"] = SECRET
    try:
        with grading_environment(root, settings) as runtime:
            manager = KernelManager(kernel_name=GRADING_KERNEL, transport="ipc", ip=str(runtime / "sockets" / "kernel"))
            manager.start_kernel(cwd=str(work))
            client = manager.client()
            client.start_channels()
            client.wait_for_ready(timeout=60)
            try:
                yield {"kernel": Kernel(manager, client), "root": root, "work": work, "visible": visible,
                       "port": server.getsockname()[1], "report": report_path(Path(manager.connection_file)),
                       "settings": settings}
            finally:
                client.stop_channels()
                manager.shutdown_kernel(now=False)
    finally:
        os.environ.pop("MLSYS_HONEYPOT_TOKEN", None)
        server.close()


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory):
    with started_kernel(tmp_path_factory.mktemp("sandbox")) as started:
        yield started


def test_kernel_runs_unprivileged_without_capabilities(sandbox):
    kernel = sandbox["kernel"]
    uid = kernel.value("__import__('os').getuid()")
    assert uid != 0 and uid != os.getuid()
    status = kernel.run("print(open('/proc/self/status').read())")
    caps = {line.split(":")[0]: int(line.split(":")[1], 16) for line in status.splitlines() if line.startswith("Cap")}
    assert caps["CapEff"] == caps["CapPrm"] == 0
    assert "NoNewPrivs:\t1" in status


def test_environment_is_an_allow_list(sandbox):
    env = sandbox["kernel"].value("dict(__import__('os').environ)")
    assert SECRET not in json.dumps(env)
    assert not {name for name in env if name.startswith(("MLSYS_SANDBOX", "JPY_", "SSH_", "MLSYS_HONEYPOT"))}
    assert env["HOME"] == "/tmp" and env["PYTHONPATH"] == str(REPO)


def test_working_folder_is_private_and_empty(sandbox):
    kernel = sandbox["kernel"]
    cwd = kernel.value("__import__('os').getcwd()")
    assert cwd.startswith("/tmp/") and kernel.value("__import__('os').listdir('.')") == []
    assert not kernel.value(f"__import__('os').path.exists({str(sandbox['work'])!r})")
    kernel.run("open('made_here.txt', 'w').write('x')")
    assert not (sandbox["work"] / "made_here.txt").exists(), "the kernel wrote into the grader's folder"


def test_only_the_package_of_the_repository_is_visible(sandbox):
    kernel = sandbox["kernel"]
    for hidden in (SOLUTIONS, REPO / ".git", REPO / "tests", sandbox["root"], Path("/srv"), Path("/var"), Path("/opt")):
        assert not kernel.value(f"__import__('os').path.exists({str(hidden)!r})"), f"{hidden} is visible"
    home = Path.home()  # shown only as far as the path to Python, if Python lies in it
    if kernel.value(f"__import__('os').path.exists({str(home)!r})"):
        shown = kernel.value(f"__import__('os').listdir({str(home)!r})")
        assert all(any((home / name) in p.parents or home / name == p for p in python_paths()) for name in shown), shown
    assert sorted(kernel.value(f"__import__('os').listdir({str(REPO / 'autograder')!r})")) == ["__init__.py", "sandbox"]
    assert sorted(kernel.value(f"__import__('os').listdir({str(REPO / 'autograder' / 'sandbox')!r})")) == [
        "__init__.py", "kernel"]
    visible = set(kernel.value(f"__import__('os').listdir({str(REPO)!r})"))
    assert visible <= {"mlsys_lib", "autograder", ".venv"}, visible


def test_private_files_stay_private_even_where_visible(sandbox):
    kernel = sandbox["kernel"]
    assert kernel.value(f"open({str(sandbox['visible'] / 'public.txt')!r}).read()") == "public"
    if os.geteuid() == 0:
        with pytest.raises(AssertionError, match="PermissionError"):
            kernel.run(f"open({str(sandbox['visible'] / 'private.txt')!r}).read()")
    found = kernel.run("import glob\nfor p in glob.glob('/proc/*/environ'):\n    try:\n"
                       "        print(open(p, 'rb').read())\n    except OSError:\n        pass\n")
    assert SECRET not in found


@pytest.mark.parametrize("path", ["mlsys_lib/__init__.py", "autograder/sandbox/kernel/start.py"])
def test_code_is_read_only(sandbox, path):
    with pytest.raises(AssertionError, match="OSError|PermissionError"):
        sandbox["kernel"].run(f"open({str(REPO / path)!r}, 'a').write('#')")


@pytest.mark.parametrize("place", ["/tmp", "/dev/shm"])
def test_disk_is_bounded_while_running(sandbox, place):
    out = sandbox["kernel"].run(f"import os\ntry:\n    with open('{place}/ballast', 'wb') as f:\n"
                                "        for _ in range(64):\n            f.write(b'0' * 2**20)\n    print('fitted')\n"
                                f"except OSError as error:\n    print('full', error.errno)\nos.remove('{place}/ballast')\n")
    assert out.startswith("full 28"), f"64 MiB fitted into {place} (the limit is 16 MiB): {out}"


def test_no_network(sandbox):
    with pytest.raises(AssertionError, match="OSError|ConnectionRefused|Network"):
        sandbox["kernel"].run(f"__import__('socket').create_connection(('127.0.0.1', {sandbox['port']}), timeout=3)")


def test_the_supervisor_reports_the_guard(sandbox):
    sandbox["kernel"].run("x = 1")
    events = [json.loads(line) for line in sandbox["report"].read_text().splitlines()]
    assert any(e.get("event") == "ready" for e in events), events[:3]


def test_watch_kills_at_the_wall_clock_limit(tmp_path):
    read_end, write_end = os.pipe()
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], pass_fds=(write_end,))
    os.close(write_end)
    start = time.monotonic()
    status = watch(child, read_end, Report(tmp_path / "r.jsonl"), seconds=1.0)
    assert time.monotonic() - start < 10 and status != 0
    events = [json.loads(line)["event"] for line in (tmp_path / "r.jsonl").read_text().splitlines()]
    assert events == ["wall_clock", "exit"]


def test_the_supervisors_events_are_kept_past_the_report_limit(tmp_path):
    report = Report(tmp_path / "r.jsonl")
    report.feed(b'{"event": "noise"}\n' * (REPORT_LIMIT // 10))
    report.event("limit", what="fork bomb: more than 256 processes")
    events = [json.loads(line)["event"] for line in (tmp_path / "r.jsonl").read_text().splitlines()]
    assert events[-2:] == ["truncated", "limit"] and (tmp_path / "r.jsonl").stat().st_size < REPORT_LIMIT + 200


def test_watch_notes_a_report_channel_closed_early(tmp_path):
    read_end, write_end = os.pipe()
    code = f"import os, time; os.write({write_end}, b'{{\"event\": \"ready\"}}\\n'); os.close({write_end}); time.sleep(8)"
    child = subprocess.Popen([sys.executable, "-c", code], pass_fds=(write_end,))
    os.close(write_end)
    watch(child, read_end, Report(tmp_path / "r.jsonl"), seconds=30)
    events = [json.loads(line)["event"] for line in (tmp_path / "r.jsonl").read_text().splitlines()]
    assert events == ["ready", "closed", "exit"]


def in_pid_namespace(code: str, marker: str) -> subprocess.Popen:
    """``code`` run by this Python (``marker`` its argument) in a PID namespace of bubblewrap's, as a graded
    kernel runs: the system read-only, a /proc of the namespace's own."""
    user = [] if os.geteuid() == 0 else ["--unshare-user"]
    return subprocess.Popen(["bwrap", "--unshare-pid", *user, "--die-with-parent", "--ro-bind", "/", "/", "--proc",
                             "/proc", "--dev", "/dev", "--", sys.executable, "-c", code, marker])


def processes_with(marker: str) -> list[int]:
    """This machine's processes with ``marker`` among their arguments."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and marker.encode() in (entry / "cmdline").read_bytes().split(b"\0"):
                found.append(int(entry.name))
        except OSError:
            continue
    return found


#: 300 processes of one thread each: children that sleep, forked one after the other.
THREE_HUNDRED_PROCESSES = "import os, time\nfor _ in range(299):\n    if os.fork() == 0:\n        time.sleep(60)\n" \
                          "        os._exit(0)\ntime.sleep(60)\n"
#: One process of 1000 threads (small stacks) that all live at once, for 2 s; it fails if they do not.
THOUSAND_THREADS = """
import os, threading, time
threading.stack_size(262144)
done = threading.Event()  # the threads live until all are counted, however slowly a busy machine starts them
for _ in range(1000):
    threading.Thread(target=done.wait, daemon=True).start()
assert len(os.listdir('/proc/self/task')) > 1000
time.sleep(1)  # the supervisor counts every 30 ms
done.set()
"""


def test_watch_stops_a_sandbox_past_its_process_budget(tmp_path):
    """300 processes (one thread each) against a budget of 256: the whole sandbox is killed within moments,
    every process of it, and the report says why."""
    marker = f"mlsys-forks-{os.getpid()}"
    read_end, write_end = os.pipe()  # the report channel, held open as the kernel's guard would
    child = in_pid_namespace(THREE_HUNDRED_PROCESSES, marker)
    start = time.monotonic()
    status = watch(child, read_end, Report(tmp_path / "r.jsonl"), seconds=50, processes=256)
    os.close(write_end)
    assert time.monotonic() - start < 20 and status != 0
    events = [json.loads(line) for line in (tmp_path / "r.jsonl").read_text().splitlines()]
    assert [e["event"] for e in events] == ["limit", "exit"], events
    assert events[0]["what"] == "fork bomb: more than 256 processes" and 256 < events[0]["processes"] <= 301, events
    deadline = time.monotonic() + 10
    while processes_with(marker) and time.monotonic() < deadline:  # the namespace's end kills them all
        time.sleep(0.1)
    assert processes_with(marker) == []


def test_watch_counts_the_threads_of_a_process_as_one(tmp_path):
    """One process of 1000 threads is one process: not stopped, with a budget of 256."""
    read_end, write_end = os.pipe()
    child = in_pid_namespace(THOUSAND_THREADS, f"mlsys-threads-{os.getpid()}")
    status = watch(child, read_end, Report(tmp_path / "r.jsonl"), seconds=50, processes=256)
    os.close(write_end)
    events = [json.loads(line) for line in (tmp_path / "r.jsonl").read_text().splitlines()]
    assert status == 0 and [e["event"] for e in events] == ["exit"], events
    assert 2 <= events[0]["processes"] <= 4, events  # counted: bubblewrap's init and the Python process


def test_the_system_the_kernel_needs_is_readable(sandbox):
    kernel = sandbox["kernel"]
    assert kernel.value("__import__('pwd').getpwuid(__import__('os').getuid()).pw_name") == "student"
    assert kernel.value("__import__('os').access('/etc/ld.so.cache', __import__('os').R_OK)")
    kernel.run("import mlsys_lib\nfrom numba import cuda\nimport matplotlib.pyplot as plt\nplt.plot([1, 2])")


def test_a_relative_socket_path_is_refused_before_anything_is_made(tmp_path, monkeypatch):
    """bwrap would create the sandbox's /etc and /run in the grader's working folder."""
    connection = tmp_path / "kernel.json"
    connection.write_text(json.dumps({"transport": "ipc", "ip": "kernel-ipc", "shell_port": 1}))
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError, match="absolute socket path"):
        supervise(sandbox_settings(load_config(tmp_path / "course"), "lab01_tensors"), connection, [])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kernel.json"]


#: One block of 1024 threads (a CUDA block's most) on the simulator, launched as a notebook would, without
#: instrument(): every thread waits at the barrier, so all 1024 are alive at once.
BLOCK_OF_1024 = """
import mlsys_lib
import numpy as np
from numba import cuda

@cuda.jit
def fill_block(out):
    i = cuda.threadIdx.x
    cuda.syncthreads()
    out[i] = i

filled = np.zeros(1024, np.int64)
fill_block[1, 1024](filled)
"""
COUNT_FILLED = "print(int((filled == np.arange(1024)).sum()))"
#: A thread bomb held back: threads with small stacks (so the address space is not what stops them),
#: each waiting, started until the kernel refuses one; then released. Prints how many started.
THREADS_UNTIL_REFUSED = """
import os, threading, time
before = len(os.listdir('/proc/self/task'))
stack = threading.stack_size(32768)
release, started = threading.Event(), []
try:
    while len(started) < 10000:
        worker = threading.Thread(target=release.wait, daemon=True)
        worker.start()
        started.append(worker)
except RuntimeError:
    pass
finally:
    release.set()
    threading.stack_size(stack)
for worker in started:
    worker.join()
deadline = time.monotonic() + 30
while len(os.listdir('/proc/self/task')) > before and time.monotonic() < deadline:  # joined, not yet ended
    time.sleep(0.05)
print(len(started))
"""

#: A fork bomb: children that wait, forked until the kernel refuses one (the task cap) or is stopped.
FORK_BOMB = """
import os, time
forked = 0
while forked < 10000:
    if os.fork() == 0:
        time.sleep(300)
        os._exit(0)
    forked += 1
"""


def pids_cgroups_available() -> bool:
    """Whether this grader can cap a kernel with a pids cgroup (root, the controller mounted and delegated)."""
    if os.geteuid() != 0:
        return False
    probe = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE,
                             preexec_fn=lambda: join_pids_cgroup(8))
    group = pids_cgroup(probe.pid)
    probe.communicate(b"")
    if group:
        group.rmdir()
    return group is not None


@pytest.mark.parametrize("cgroup", [True, False], ids=["cgroup", "rlimit-only"])
def test_a_block_of_1024_simulator_threads_runs_under_the_task_cap(tmp_path, cgroup):
    """The simulator's thread per GPU thread fits (c.Sandbox.threads); processes + threads still caps the
    kernel's tasks (by a pids cgroup where one can be made, else by RLIMIT_NPROC alone), and a fork bomb is
    stopped at c.Sandbox.processes by the supervisor, which counts processes and not threads."""
    with started_kernel(tmp_path, cgroup=cgroup) as started:
        kernel, limit, processes = started["kernel"], task_limit(started["settings"]), started["settings"]["processes"]
        assert started["settings"]["threads"] >= 1024 and limit == processes + 1024
        assert kernel.run(BLOCK_OF_1024 + COUNT_FILLED, timeout=120).strip() == "1024"
        threads = int(kernel.run(THREADS_UNTIL_REFUSED, timeout=120))
        # the kernel's own threads (and, in the cgroup, bubblewrap's processes) take the rest
        assert limit - 32 <= threads < limit, (threads, limit)
        assert kernel.run(BLOCK_OF_1024 + COUNT_FILLED, timeout=120).strip() == "1024"  # the released threads are gone
        kernel.client.execute(FORK_BOMB)
        deadline = time.monotonic() + 120  # forking a kernel takes ~20 ms a child here
        while kernel.manager.is_alive() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not kernel.manager.is_alive(), "the fork bomb was not stopped"
        report = started["report"]
    events = [json.loads(line) for line in report.read_text().splitlines()]
    tasks = [e for e in events if e.get("event") == "tasks"]
    assert tasks == [{"event": "tasks", "limit": limit, "cgroup": cgroup and pids_cgroups_available(),
                      "processes": processes, "by": "supervisor"}], tasks
    (stopped,) = [e for e in events if e.get("event") == "limit"]
    assert stopped["what"] == f"fork bomb: more than {processes} processes", stopped
    assert processes < stopped["processes"] < processes + 64, stopped  # counted every 30 ms


@pytest.mark.slow
def test_a_notebook_launching_a_block_of_1024_threads_is_graded_with_its_points(tmp_path):
    """Through the course tool, with the course's default limits: a Lab 1 answer that first launches one
    block of 1024 simulator threads, and defines compact_strides only if every thread wrote its index."""
    lab = "lab01_tensors"
    answers = solution_cells(lab)
    answers["compact_strides"] = (BLOCK_OF_1024 + "assert (filled == np.arange(1024)).all()\n\n\n"
                                  + answers["compact_strides"])
    notebook = fill(nbformat.read(LABS / lab / f"{lab}.ipynb", as_version=4), answers)
    (tmp_path / "subs" / "sim").mkdir(parents=True)
    nbformat.write(notebook, tmp_path / "subs" / "sim" / f"{lab}.ipynb")
    start = time.monotonic()
    (result,) = course.grade(lab, tmp_path / "subs", root=tmp_path / "course", workers=1, log=lambda message: None)
    assert result.status == "graded" and result.score == result.max_score > 0, (result, time.monotonic() - start)


class _PatientManager(KernelManager):
    """Gives a kernel 5 s after its shutdown request before SIGTERM; notes each kernel's report."""

    shutdown_wait_time = Float(10.0)
    reports: list[Path] = []

    def cleanup_resources(self, restart=False):
        _PatientManager.reports.append(report_path(Path(self.connection_file)))
        return super().cleanup_resources(restart)


def test_kernels_end_by_themselves_after_the_shutdown_request(tmp_path):
    """ipykernel's control thread could block sending into the IOPub thread the main thread had just
    stopped (autograder/sandbox/kernel/shutdown.py): the kernel then lived until jupyter_client's
    SIGTERM, one notebook in three or so. Each notebook runs as nbgrader runs it (nbclient), and every
    kernel must exit with status 0 by itself, well within the 5 s before SIGTERM."""
    settings = sandbox_settings(load_config(tmp_path / "course"), "lab01_tensors")
    cells = ["print(1)", "import mlsys_lib, numpy as np; print(np.arange(3))", "import sys; print('e', file=sys.stderr)"]
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(source) for source in cells])
    _PatientManager.reports.clear()
    with grading_environment(tmp_path / "course", settings) as runtime:
        config = Config()
        config.KernelManager.update(transport="ipc", ip=str(runtime / "sockets" / "kernel"))
        for _ in range(KERNELS):
            NotebookClient(copy.deepcopy(notebook), kernel_name=GRADING_KERNEL, kernel_manager_class=_PatientManager,
                           config=config).execute()
    statuses = [e["status"] for report in _PatientManager.reports
                for e in map(json.loads, report.read_text().splitlines()) if e["event"] == "exit"]
    assert statuses == [0] * KERNELS, f"kernels' exit statuses (-15: killed after lingering): {statuses}"

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
from pathlib import Path

import nbformat
import pytest
from jupyter_client import KernelManager
from nbclient import NotebookClient
from traitlets import Float
from traitlets.config import Config

from autograder.config import GRADING_KERNEL, load_config, sandbox_settings
from autograder.paths import REPO, SOLUTIONS
from autograder.run.nbgrader_run import grading_environment
from autograder.sandbox.sandbox import Report, python_paths, report_path, supervise, watch

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


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("sandbox")
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
    settings.update(disk_mb=16, extra_paths=[str(visible)])
    os.environ["MLSYS_HONEYPOT_TOKEN"] = SECRET
    try:
        with grading_environment(root, settings) as runtime:
            manager = KernelManager(kernel_name=GRADING_KERNEL, transport="ipc", ip=str(runtime / "sockets" / "kernel"))
            manager.start_kernel(cwd=str(work))
            client = manager.client()
            client.start_channels()
            client.wait_for_ready(timeout=60)
            yield {"kernel": Kernel(manager, client), "root": root, "work": work, "visible": visible,
                   "port": server.getsockname()[1], "report": report_path(Path(manager.connection_file))}
            client.stop_channels()
            manager.shutdown_kernel(now=False)
    finally:
        os.environ.pop("MLSYS_HONEYPOT_TOKEN", None)
        server.close()


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


def test_watch_notes_a_report_channel_closed_early(tmp_path):
    read_end, write_end = os.pipe()
    code = f"import os, time; os.write({write_end}, b'{{\"event\": \"ready\"}}\\n'); os.close({write_end}); time.sleep(8)"
    child = subprocess.Popen([sys.executable, "-c", code], pass_fds=(write_end,))
    os.close(write_end)
    watch(child, read_end, Report(tmp_path / "r.jsonl"), seconds=30)
    events = [json.loads(line)["event"] for line in (tmp_path / "r.jsonl").read_text().splitlines()]
    assert events == ["ready", "closed", "exit"]


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

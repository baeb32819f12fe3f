"""Set-up files agree with each other: environment.yml mirrors pyproject's dependencies; `make`'s set-up
steps print one line each and keep their output in a log, which a failed step shows the end of."""

import os
import re
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parent.parent


def _name(requirement: str) -> str:
    return re.split(r"[<>=!~\[; ]", requirement.strip(), maxsplit=1)[0].lower().replace("_", "-")


def test_environment_yml_names_the_same_dependencies_as_pyproject():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    wanted = {_name(r) for r in project["dependencies"]}
    for extra in project["optional-dependencies"].values():
        wanted |= {_name(r) for r in extra}
    env = yaml.safe_load((REPO / "environment.yml").read_text())
    pip = [r for d in env["dependencies"] if isinstance(d, dict) for r in d.get("pip", [])]  # wheels only on PyPI
    listed = {_name(d) for d in env["dependencies"] + pip if isinstance(d, str)} - {"python", "pip"}
    assert listed == wanted, f"only in environment.yml: {listed - wanted}; only in pyproject: {wanted - listed}"
    assert "python=3.11" in env["dependencies"]


def test_readme_gives_the_two_commands_and_ci_runs_the_tests():
    readme = (REPO / "README.md").read_text()
    assert "make course" in readme and "make test" in readme
    assert "make test" in (REPO / ".ci" / "run").read_text()



#: A stand-in for python (and uv) under the real Makefile: ``-m venv DIR`` copies it to DIR/bin/python
#: and DIR/bin/uv, the grading kernel's install writes the file make wants, installing the project
#: fails when $FAIL_PIP is set;
#: every call prints what a real one might (a warning among it), so that where it went shows.
FAKE_PYTHON = """#!/bin/sh
echo "fake python: $*"
echo "WARNING: a warning for the log only"
case "$*" in
  "-m venv "*) mkdir -p "$3/bin" && cp "$0" "$3/bin/python" && cp "$0" "$3/bin/uv";;
  *"pip install"*" -e"*) [ -z "$FAIL_PIP" ] || { echo "ERROR: No matching distribution found"; exit 3; };;
  "-m autograder.config install") mkdir -p .venv/etc/jupyter && touch .venv/etc/jupyter/nbgrader_config.py;;
esac
"""


@pytest.fixture
def make_setup(tmp_path):
    """`make setup` with the repository's Makefile in a scratch folder, with the fake python."""
    if shutil.which("make") is None:
        pytest.skip("no make")
    shutil.copy(REPO / "Makefile", tmp_path)
    (tmp_path / "pyproject.toml").touch()
    (tmp_path / "autograder").mkdir()
    (tmp_path / "autograder" / "config.py").touch()
    (tmp_path / "fakepy").write_text(FAKE_PYTHON)
    (tmp_path / "fakepy").chmod(0o755)
    # a `make test V=1` around this test must not reach the make under it
    env = {k: v for k, v in os.environ.items() if k not in {"MAKEFLAGS", "MFLAGS", "MAKELEVEL", "V"}}

    def run(*args, **extra_env):
        return subprocess.run(["make", "setup", "PYTHON=./fakepy", *args], cwd=tmp_path, capture_output=True,
                              text=True, env={**env, **extra_env}, timeout=60)
    run.folder = tmp_path
    return run


def test_make_setup_prints_one_line_a_step_and_keeps_the_output_in_the_logs(make_setup):
    done = make_setup()
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "venv: ./fakepy -m venv .venv, then uv, pip, setuptools and wheel (log: .venv/log/venv.log)",
        "packages: uv pip install -e .[dev,mpi,site,shared,hub] (log: .venv/log/packages.log)",
        "grading kernel: python -m autograder.config install (log: .venv/log/grading-kernel.log)"]
    assert done.stderr == ""
    logs = make_setup.folder / ".venv" / "log"
    assert "fake python: pip install --compile-bytecode --python .venv/bin/python -e .[dev,mpi,site,shared,hub]" in (logs / "packages.log").read_text()
    assert "WARNING: a warning for the log only" in (logs / "grading-kernel.log").read_text()
    again = make_setup()
    assert (again.returncode, again.stdout.strip(), again.stderr) == (0, "make: Nothing to be done for 'setup'.", "")


def test_a_failed_make_setup_step_fails_make_with_the_end_of_its_log(make_setup):
    failed = make_setup(FAIL_PIP="1")
    assert failed.returncode != 0
    assert failed.stdout.splitlines()[-1] == "packages: uv pip install -e .[dev,mpi,site,shared,hub] (log: .venv/log/packages.log)"
    assert failed.stderr.splitlines()[:5] == [
        "packages failed (exit 3); the end of .venv/log/packages.log:",
        "fake python: pip install --compile-bytecode --python .venv/bin/python -e .[dev,mpi,site,shared,hub]",
        "WARNING: a warning for the log only",
        "ERROR: No matching distribution found",
        "the whole log: .venv/log/packages.log"]
    assert not (make_setup.folder / ".venv" / ".installed").exists()  # the next make tries again
    assert "grading kernel" not in failed.stdout


def test_make_setup_v1_shows_each_command_and_its_output(make_setup):
    shown = make_setup("V=1")
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert '.venv/bin/uv pip install --compile-bytecode --python .venv/bin/python -e ".[dev,mpi,site,shared,hub]"' in lines
    assert "fake python: pip install --compile-bytecode --python .venv/bin/python -e .[dev,mpi,site,shared,hub]" in lines
    assert lines.count("WARNING: a warning for the log only") == 5  # venv, uv, pip upgrade, packages, kernel
    assert not (make_setup.folder / ".venv" / "log").exists()
    later = (make_setup.folder / ".venv" / ".installed").stat().st_mtime + 10
    os.utime(make_setup.folder / "pyproject.toml", (later, later))  # pyproject changed: pip again
    failed = make_setup("V=1", FAIL_PIP="1")
    assert failed.returncode != 0 and "ERROR: No matching distribution found" in failed.stdout


def test_make_system_deps_installs_what_is_missing_in_one_step(tmp_path):
    """As root with apt-get and neither bwrap, chromium nor PostgreSQL on PATH: one apt-get step, failing here."""
    if shutil.which("make") is None:
        pytest.skip("no make")
    shutil.copy(REPO / "Makefile", tmp_path)
    shims = tmp_path / "bin"
    shims.mkdir()
    for tool in ("mkdir", "tail"):
        (shims / tool).symlink_to(shutil.which(tool))
    (shims / "id").write_text("#!/bin/sh\necho 0\n")
    (shims / "apt-get").write_text('#!/bin/sh\necho "apt-get $*"\n'
                                   'case "$*" in *install*) echo "E: Unable to locate package"; exit 100;; esac\n')
    for shim in ("id", "apt-get"):
        (shims / shim).chmod(0o755)
    env = {"PATH": str(shims), "HOME": str(tmp_path)}
    done = subprocess.run([shutil.which("make"), "system-deps"], cwd=tmp_path, capture_output=True, text=True,
                          env=env, timeout=60)
    assert done.returncode != 0
    assert done.stdout == "system packages: bubblewrap chromium postgresql (apt-get) (log: .venv/log/system-packages.log)\n"
    assert done.stderr.splitlines()[:4] == [
        "system packages failed (exit 100); the end of .venv/log/system-packages.log:",
        "apt-get update -qq", "apt-get install -y -qq bubblewrap chromium postgresql", "E: Unable to locate package"]

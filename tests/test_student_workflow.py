"""What students and instructors see of the course tool.

Student work is never lost: students work on a copy (``mlsys lab``), and a release refuses to
overwrite a release file edited by hand (``--force`` moves it to a backup first). The release tests
run nbgrader on a one-exercise lab in a temporary ``solutions/``, released into a temporary git
repository (or a plain folder: a tarball), so that they can change the source, commit, and edit the
release freely.

The course tool's output is a summary, not the chatter of kernels and libraries; course pages
(feedback, Formgrader's manual grading, JupyterLab) load no asset from another site.
"""

import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request

import re
from html.parser import HTMLParser
from urllib.parse import urljoin, urlsplit

import nbformat
import pytest
from jupyter_server_mathjax.app import STATIC_ASSETS_PATH
from nbconvert.exporters import HTMLExporter
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook
from nbgrader.server_extensions.formgrader import handlers

from autograder import config, course, paths
from autograder.authoring import samples
from autograder.config import install_grading_kernel, load_config
from autograder.edition.release_guard import ReleaseRefused
from mlsys_lib import workspace

LAB = "lab99_tiny"


def source_notebook(text: str) -> nbformat.NotebookNode:
    """An nbgrader source notebook: ``text``, one solution cell, one graded test cell."""
    def meta(grade_id, **kind):
        return {"nbgrader": {"grade_id": grade_id, "schema_version": 3, "solution": False, "grade": False,
                             "locked": False, **kind}}

    notebook = new_notebook(cells=[
        new_markdown_cell(text),
        new_code_cell("def answer():\n    ### BEGIN SOLUTION\n    return 42\n    ### END SOLUTION",
                      metadata=meta("answer", solution=True)),
        new_code_cell("assert answer() == 42", metadata=meta("test_answer", grade=True, locked=True, points=1)),
    ])
    for number, cell in enumerate(notebook.cells):
        cell.id = f"cell-{number}"  # not random: the same text releases the same bytes
    notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    return notebook


@pytest.fixture(scope="module")
def first_release(tmp_path_factory):
    """A ``solutions/`` holding only :data:`LAB`, made the course's for this module; a git repository
    whose committed ``labs/`` is its release; the gradebook that release made (a new one costs seconds)."""
    folder = tmp_path_factory.mktemp("solutions")
    (folder / LAB).mkdir()
    nbformat.write(source_notebook("# Version one"), folder / LAB / f"{LAB}.ipynb")
    repo, root = tmp_path_factory.mktemp("repo"), tmp_path_factory.mktemp("course")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(paths, "SOLUTIONS", folder)
        patch.setattr(config, "SOLUTIONS", folder)
        git(repo, "init", "-q")
        course.release([LAB], release_dir=repo / "labs", root=root)
        git(repo, "add", "labs")
        git(repo, "commit", "-q", "-m", "release")
        yield folder, repo, root / "gradebook.db"


@pytest.fixture
def solutions(first_release):
    """Sets the text of the lab's source (version one to start with)."""
    folder = first_release[0]

    def write(text: str) -> None:
        nbformat.write(source_notebook(text), folder / LAB / f"{LAB}.ipynb")
    write("# Version one")
    return write


@pytest.fixture
def new_root(first_release, tmp_path):
    """A course root of its own (no record of releases), with a copy of the module's gradebook."""
    def make(name: str):
        root = tmp_path / name
        root.mkdir()
        shutil.copyfile(first_release[2], root / "gradebook.db")
        return root
    return make


def git(repo, *args):
    subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@example.org", *args],
                   check=True, capture_output=True)


@pytest.fixture
def committed(first_release, solutions, tmp_path):
    """A copy of the repository whose committed ``labs/`` is the release of version one."""
    repo = shutil.copytree(first_release[1], tmp_path / "repo")
    return repo / "labs", repo / "labs" / LAB / f"{LAB}.ipynb"


def markdown(path) -> str:
    return nbformat.read(path, as_version=4).cells[0].source


def test_release_refuses_to_overwrite_an_edited_notebook_and_force_keeps_a_backup(committed, new_root, tmp_path):
    labs, notebook = committed
    released = notebook.read_bytes()
    student = nbformat.read(notebook, as_version=4)
    student.cells[1].source = "def answer():\n    return 42  # my work"
    nbformat.write(student, notebook)
    edited = notebook.read_bytes()

    root = new_root("course")
    with pytest.raises(ReleaseRefused) as refused:
        course.release([LAB], release_dir=labs, root=root)
    message = str(refused.value)
    assert str(notebook) in message and "--force" in message and f"git checkout -- {notebook}" in message
    assert notebook.read_bytes() == edited

    backups = tmp_path / "backups"
    course.release([LAB], release_dir=labs, root=root, force=True, backups=backups,
                   log=lambda message: None)
    assert (backups / LAB / notebook.name).read_bytes() == edited
    assert notebook.read_bytes() == released


def test_a_stale_untouched_release_is_regenerated_and_other_files_are_kept(committed, solutions, new_root):
    labs, notebook = committed
    (labs / LAB / "notes.txt").write_text("a student's notes")
    (labs / LAB / "old.ipynb").write_bytes(notebook.read_bytes())  # released once, no longer made
    git(labs.parent, "add", "labs")
    git(labs.parent, "commit", "-q", "-m", "an older release had old.ipynb")
    (labs / LAB / "notes.txt").write_text("a student's notes, edited")
    solutions("# Version two")

    course.release([LAB], release_dir=labs, root=new_root("course"))  # no record: git alone tells
    assert markdown(notebook) == "# Version two"
    assert (labs / LAB / "notes.txt").read_text() == "a student's notes, edited"
    assert not (labs / LAB / "old.ipynb").exists()


def test_without_git_only_this_machines_last_release_counts_as_released(solutions, new_root, tmp_path):
    labs = tmp_path / "tarball" / "labs"
    notebook = labs / LAB / f"{LAB}.ipynb"
    here = new_root("course")
    course.release([LAB], release_dir=labs, root=here)
    solutions("# Version two")
    course.release([LAB], release_dir=labs, root=here)  # its record: it wrote version one
    assert markdown(notebook) == "# Version two"

    solutions("# Version three")
    with pytest.raises(ReleaseRefused, match="delete them"):
        course.release([LAB], release_dir=labs, root=new_root("elsewhere"))  # no record, no git
    assert markdown(notebook) == "# Version two"


def released_kit(tmp_path):
    """A student kit's layout: ``labs/`` with two labs."""
    for lab in ("lab01_a", "lab02_b"):
        (tmp_path / "labs" / lab).mkdir(parents=True)
        (tmp_path / "labs" / lab / f"{lab}.ipynb").write_text(f"release of {lab}")
    return tmp_path / "labs"


def test_fetch_copies_each_lab_once_and_never_overwrites_a_copy(tmp_path):
    release = released_kit(tmp_path)
    assert workspace.find_release(release / "lab01_a") == release
    first = workspace.fetch(release, ["lab01_a"])
    assert first.copied == ["lab01_a"] and first.kept == []
    work = tmp_path / "work"
    (work / "lab01_a" / "lab01_a.ipynb").write_text("my answers")
    (release / "lab01_a" / "lab01_a.ipynb").write_text("a new release")
    again = workspace.fetch(release)
    assert again.copied == ["lab02_b"] and again.kept == ["lab01_a"]
    assert (work / "lab01_a" / "lab01_a.ipynb").read_text() == "my answers"
    assert (work / "lab02_b" / "lab02_b.ipynb").read_text() == "release of lab02_b"
    with pytest.raises(ValueError, match="lab03_c"):
        workspace.fetch(release, ["lab03_c"])


def test_mlsys_lab_fetches_and_serves_jupyterlab_on_the_chosen_port(tmp_path):
    released_kit(tmp_path)
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(paths.REPO)}
    server = subprocess.Popen([sys.executable, "-m", "mlsys_lib.cli", "lab", "--port", str(port), "--no-browser"],
                              cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        status = wait_for(f"http://127.0.0.1:{port}/api", server)
        mathjax = wait_for(f"http://127.0.0.1:{port}/static/jupyter_server_mathjax/MathJax.js", server)
    finally:
        server.terminate()
        output = server.communicate(timeout=30)[0].decode()
    assert '"version"' in status, output  # as root too: `mlsys lab` adds --allow-root there
    assert mathjax.startswith("/*"), "the server serves the MathJax that Formgrader's pages load"
    assert f"Serving notebooks from local directory: {tmp_path / 'work'}" in output
    assert (tmp_path / "work" / "lab02_b" / "lab02_b.ipynb").read_text() == "release of lab02_b"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_for(url: str, server: subprocess.Popen, seconds: float = 60) -> str:
    """The body of ``url`` once the ``server`` answers it; fails if it exits or takes too long."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if server.poll() is not None:
            pytest.fail(f"the server exited with {server.returncode}")
        try:
            with urllib.request.urlopen(url, timeout=2) as answer:
                return answer.read().decode()
        except OSError:
            time.sleep(0.3)
    pytest.fail(f"{url} did not answer within {seconds} s")


class Assets(HTMLParser):
    """The URLs a page loads by itself (``src`` of any element, ``href`` of ``link``, CSS ``url()``
    and ``@import``), not the links a reader may follow."""

    CSS_URL = re.compile(r"""(?:url\(|@import)\s*['"]?([^'")\s;]+)""")

    def __init__(self, page: str):
        super().__init__()
        self.urls: list[str] = []
        self.in_style = False
        self.feed(page)

    def handle_starttag(self, tag, attrs):
        for name, value in attrs:
            if value and (name in ("src", "srcset", "poster", "data") or (tag == "link" and name == "href")):
                self.urls.append(value)
            if value and name == "style":
                self.urls += self.CSS_URL.findall(value)
        self.in_style = tag == "style"

    def handle_endtag(self, tag):
        self.in_style = False

    def handle_data(self, data):
        if self.in_style:
            self.urls += self.CSS_URL.findall(re.sub(r"/\*.*?\*/", "", data, flags=re.DOTALL))


def remote(urls: list[str]) -> list[str]:
    """The URLs that name a host: another site (``http://``, ``https://``, ``//host``)."""
    return [url for url in urls if urlsplit(url.strip()).netloc]


def mathjax_url(urls: list[str]) -> str:
    (url,) = [url for url in urls if "MathJax.js" in url]
    return url


def test_formgrader_manual_grading_page_loads_mathjax_from_the_jupyter_server(monkeypatch, tmp_path):
    # The course's settings, then Formgrader's own template settings, which win (as in the server);
    # the course's templates are found in the course folder's Jupyter data folder.
    settings = load_config(tmp_path)
    for name, value in install_grading_kernel(tmp_path).items():
        monkeypatch.setenv(name, value)
    settings.HTMLExporter.template_name = "formgrade"
    settings.HTMLExporter.extra_template_basedirs = [handlers.template_path]
    resources = {"assignment_id": "lab04_memory", "notebook_id": "lab04_memory", "submission_id": "abc",
                 "index": 0, "total": 1, "base_url": "/user/ta", "student": "s", "last_name": None,
                 "first_name": None, "notebook_path": "autograded/s/lab04_memory/lab04_memory.ipynb"}
    page, _ = HTMLExporter(config=settings).from_filename(str(paths.LABS / "lab04_memory" / "lab04_memory.ipynb"),
                                                          resources=resources)
    urls = Assets(page).urls
    assert len(urls) > 10 and remote(urls) == []
    # the page is {base_url}/formgrader/submissions/<id>/; jupyter-server-mathjax serves {base_url}/static/...
    loaded = urlsplit(urljoin("http://grader/user/ta/formgrader/submissions/abc/", mathjax_url(urls)))
    assert loaded.path == "/user/ta/static/jupyter_server_mathjax/MathJax.js"
    assert (STATIC_ASSETS_PATH / "MathJax.js").is_file()


GRADE_OUTPUT = [re.compile(line) for line in (
    r"student +score +status", r"(solution|blank) +\d+ / \d+ +graded", r"",
    r"(grades|feedback|summary): /\S+",
)]


@pytest.mark.slow
def test_grade_prints_a_summary_and_feedback_loads_mathjax_from_the_course_folder(tmp_path):
    samples.build_samples("lab04_memory", tmp_path / "submissions", wrong=0)  # solution and blank
    root = tmp_path / "course"
    done = subprocess.run(
        [sys.executable, "-c", "import sys; from autograder.cli import main; sys.exit(main(sys.argv[1:]))",
         "grade", "lab04_memory", str(tmp_path / "submissions"), "--course-dir", str(root)],
        cwd=paths.REPO, env={**os.environ, "PYTHONPATH": str(paths.REPO)}, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stderr == "", "warnings or kernel output reached the terminal"
    lines = done.stdout.splitlines()
    unexpected = [line for line in lines if not any(form.fullmatch(line) for form in GRADE_OUTPUT)]
    assert unexpected == [] and len(lines) == 7, done.stdout

    feedback = root / "feedback" / "solution" / "lab04_memory" / "lab04_memory.html"
    urls = Assets(feedback.read_text()).urls
    assert remote(urls) == []
    loaded = urlsplit(urljoin(feedback.as_uri(), mathjax_url(urls)))._replace(query="").geturl()
    assert loaded == (root / "mathjax" / "MathJax.js").as_uri()
    assert (root / "mathjax" / "MathJax.js").read_bytes() == (STATIC_ASSETS_PATH / "MathJax.js").read_bytes()

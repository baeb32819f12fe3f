"""Plain nbgrader commands and the course tool read the same configuration."""

import os
import sys
from pathlib import Path

from nbgrader.coursedir import CourseDirectory
from traitlets.config.loader import PyFileConfigLoader

from autograder.config import GRADING_KERNEL, TOOL_ENV, course_config, load_config
from autograder.paths import LABS, REPO, SOLUTIONS


def test_nbgrader_config_file_is_the_course_config(monkeypatch, tmp_path):
    monkeypatch.setenv("MLSYS_COURSE_DIR", str(tmp_path / "live"))
    monkeypatch.delenv(TOOL_ENV, raising=False)  # as plain nbgrader reads it
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "other"))  # restored after the test
    loaded = PyFileConfigLoader("nbgrader_config.py", path=str(REPO)).load_config()
    expected = course_config()
    for section in ("CourseDirectory", "Execute", "GenerateFeedback", "ClearSolutions"):
        assert dict(loaded[section]) == dict(expected[section]), section
    course = loaded.CourseDirectory
    assert course.root == str((tmp_path / "live").resolve())
    # the gradebook: nbgrader's default, in the course root (the settings may name a server instead)
    assert Path(course.root).is_absolute() and "db_url" not in course
    assert CourseDirectory(config=loaded).db_url == f"sqlite:///{(tmp_path / 'live').resolve() / 'gradebook.db'}"
    assert course.source_directory == str(SOLUTIONS) and course.release_directory == str(LABS)
    assert loaded.Execute.kernel_name == GRADING_KERNEL
    assert (tmp_path / "live" / "jupyter" / "kernels" / GRADING_KERNEL / "kernel.json").exists()


def test_reading_the_settings_again_leaves_the_search_paths_as_they_were(monkeypatch, tmp_path):
    """Formgrader reads them on every request: JUPYTER_PATH and PATH must not grow with each."""
    monkeypatch.setenv("MLSYS_COURSE_DIR", str(tmp_path / "live"))
    monkeypatch.delenv(TOOL_ENV, raising=False)
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "other"))  # both restored after the test
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    paths = []
    for _ in range(3):
        PyFileConfigLoader("nbgrader_config.py", path=str(REPO)).load_config()
        paths.append((os.environ["JUPYTER_PATH"], os.environ["PATH"]))
    jupyter_path = os.pathsep.join([str((tmp_path / "live" / "jupyter").resolve()), str(tmp_path / "other")])
    own = str(Path(sys.executable).parent)  # nbgrader runs its `alembic` when it creates a gradebook
    assert paths == [(jupyter_path, os.pathsep.join([own, "/usr/bin", "/bin"]))] * 3


def test_the_tool_reads_the_settings_file(monkeypatch, tmp_path):
    settings = tmp_path / "settings.py"
    settings.write_text("c = get_config()\nc.merge(__import__('autograder.config').config.course_config())\n"
                        "c.Execute.timeout = 7\nc.Sandbox.memory_mb = 1234\n")
    monkeypatch.setenv("MLSYS_CONFIG", str(settings))
    loaded = load_config(tmp_path / "root")
    assert loaded.Execute.timeout == 7 and loaded.Sandbox.memory_mb == 1234
    assert loaded.CourseDirectory.root == str((tmp_path / "root").resolve())

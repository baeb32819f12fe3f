"""Finding students' notebooks in a folder or an LMS zip."""

import zipfile

import pytest

from autograder.submissions import find_submissions

LAB = "lab01_tensors"


def _touch(path):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("{}")
    return path


def test_folder_of_student_folders(tmp_path):
    alice = _touch(tmp_path / "subs" / "alice" / f"{LAB}.ipynb")
    bob = _touch(tmp_path / "subs" / "bob" / f"{LAB} (1).ipynb")  # renamed by the browser
    _touch(tmp_path / "subs" / "bob" / ".ipynb_checkpoints" / f"{LAB}-checkpoint.ipynb")
    found = find_submissions(tmp_path / "subs", LAB, tmp_path / "unpack")
    assert found.notebooks == {"alice": alice, "bob": bob}
    assert found.problems == {}


def test_several_notebooks_pick_the_lab_or_explain(tmp_path):
    good = _touch(tmp_path / "subs" / "carol" / f"{LAB}.ipynb")
    _touch(tmp_path / "subs" / "carol" / "scratch.ipynb")
    _touch(tmp_path / "subs" / "dave" / "a.ipynb")
    _touch(tmp_path / "subs" / "dave" / "b.ipynb")
    found = find_submissions(tmp_path / "subs", LAB, tmp_path / "unpack")
    assert found.notebooks == {"carol": good}
    assert "none is exactly" in found.problems["dave"]


def test_flat_lms_zip(tmp_path):
    archive = tmp_path / "download.zip"
    with zipfile.ZipFile(archive, "w") as z:
        z.writestr("alice_123_456_lab01_tensors.ipynb", "{}")
        z.writestr("bob_late_789_lab01_tensors.ipynb", "{}")
        z.writestr("README.ipynb", "{}")
    found = find_submissions(archive, LAB, tmp_path / "unpack")
    assert sorted(found.notebooks) == ["alice", "bob"]
    assert found.notebooks["alice"].name == "alice_123_456_lab01_tensors.ipynb"
    assert "README.ipynb" in found.problems


def test_zip_of_the_submissions_folder(tmp_path):
    archive = tmp_path / "download.zip"
    with zipfile.ZipFile(archive, "w") as z:
        z.writestr(f"submissions/alice/{LAB}.ipynb", "{}")
        z.writestr(f"submissions/bob/{LAB}.ipynb", "{}")
        z.writestr("__MACOSX/submissions/._alice", "")
    found = find_submissions(archive, LAB, tmp_path / "unpack")
    assert sorted(found.notebooks) == ["alice", "bob"]


def test_zip_cannot_escape_its_folder(tmp_path):
    archive = tmp_path / "evil.zip"
    with zipfile.ZipFile(archive, "w") as z:
        z.writestr(f"../../escaped/{LAB}.ipynb", "{}")
        z.writestr(f"eve/{LAB}.ipynb", "{}")
    find_submissions(archive, LAB, tmp_path / "unpack" / "deep")
    assert not (tmp_path / "escaped").exists()


def test_bad_student_ids_are_reported_not_graded(tmp_path):
    _touch(tmp_path / "subs" / "-rf" / f"{LAB}.ipynb")
    found = find_submissions(tmp_path / "subs", LAB, tmp_path / "unpack")
    assert found.notebooks == {} and "student id" in found.problems["-rf"]


def test_neither_folder_nor_zip(tmp_path):
    (tmp_path / "grades.txt").write_text("x")
    with pytest.raises(ValueError, match="folder .* or a zip"):
        find_submissions(tmp_path / "grades.txt", LAB, tmp_path / "unpack")

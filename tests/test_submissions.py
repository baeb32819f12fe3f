"""Finding students' notebooks in a folder or an LMS zip."""

import os
import zipfile
from pathlib import Path

import pytest

from autograder.intake.safe_fs import UnsafePath, check_tree, read_beneath
from autograder.intake.submissions import find_submissions

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


def test_flat_files_named_student_then_lab(tmp_path):
    archive = tmp_path / "download.zip"
    with zipfile.ZipFile(archive, "w") as z:
        z.writestr(f"alice_{LAB}.ipynb", "{}")
        z.writestr(f"mary_smith_{LAB}.ipynb", "{}")  # the whole part before the lab's name
        z.writestr("mary_jones_lab01.ipynb", "{}")  # not the lab's name: whose is it?
        z.writestr("README.ipynb", "{}")
    found = find_submissions(archive, LAB, tmp_path / "unpack")
    assert sorted(found.notebooks) == ["alice", "mary_smith"]
    assert found.notebooks["mary_smith"].name == f"mary_smith_{LAB}.ipynb"
    assert sorted(found.problems) == ["README.ipynb", "mary_jones_lab01.ipynb"]
    assert "--students" in found.problems["mary_jones_lab01.ipynb"]


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


def test_links_and_special_files_are_refused_with_a_reason(tmp_path):
    secret = tmp_path / "secret.ipynb"
    secret.write_text("{}")
    subs = tmp_path / "subs"
    honest = _touch(subs / "honest" / f"{LAB}.ipynb")
    (subs / "linked").mkdir()
    (subs / "linked" / f"{LAB}.ipynb").symlink_to(secret)
    (subs / "folder_link").symlink_to(tmp_path)  # a whole student folder pointing elsewhere
    (subs / "fifo").mkdir()
    os.mkfifo(subs / "fifo" / f"{LAB}.ipynb")
    (subs / "mallory_x.ipynb").symlink_to("/dev/zero")
    found = find_submissions(subs, LAB, tmp_path / "unpack")
    assert found.notebooks == {"honest": honest}
    assert "symbolic link" in found.problems["linked"]
    assert "symbolic link" in found.problems["folder_link"]
    assert "not a regular file" in found.problems["fifo"]
    assert "symbolic link" in found.problems["mallory_x.ipynb"]


def test_zip_extracts_only_bounded_notebooks(tmp_path):
    archive = tmp_path / "download.zip"
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr(f"alice/{LAB}.ipynb", "{}")
        z.writestr(f"bomb/{LAB}.ipynb", "0" * 5000)  # compresses to almost nothing
        z.writestr("alice/data.bin", "1" * 5000)
    found = find_submissions(archive, LAB, tmp_path / "unpack", limit=1000)
    assert sorted(found.notebooks) == ["alice"]
    assert "larger than 1000 bytes" in found.problems["bomb"]
    assert not list((tmp_path / "unpack").rglob("*.bin")), "only notebooks are extracted"


@pytest.mark.parametrize("make, reason", [
    (lambda p: p.symlink_to("/etc/hostname"), "symbolic link"),
    (lambda p: os.mkfifo(p), "a FIFO"),
    (lambda p: p.write_bytes(b"x" * 2048), "larger than 1024 bytes"),
])
def test_safe_reads_refuse_links_special_and_big_files(tmp_path, make, reason):
    make(tmp_path / "f")
    with pytest.raises(UnsafePath, match=reason):
        read_beneath(tmp_path, Path("f"), limit=1024)


def test_safe_reads_refuse_a_link_anywhere_below_the_root(tmp_path):
    (tmp_path / "real").mkdir()
    (tmp_path / "real" / "f").write_text("data")
    (tmp_path / "root").mkdir()
    (tmp_path / "root" / "dir").symlink_to(tmp_path / "real")
    assert read_beneath(tmp_path / "real", Path("f"), 100).data == b"data"
    with pytest.raises(UnsafePath, match="dir is a symbolic link"):
        read_beneath(tmp_path / "root", Path("dir/f"), 100)
    with pytest.raises(UnsafePath, match="not a path inside"):
        read_beneath(tmp_path / "root", Path("../real/f"), 100)


def test_check_tree_reports_links_and_sizes(tmp_path):
    (tmp_path / "a").write_bytes(b"x" * 100)
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "link").symlink_to("/etc/passwd")
    problems = check_tree(tmp_path, max_bytes=50)
    assert any("link is a symbolic link" in p for p in problems) and any("100 bytes" in p for p in problems)
    (tmp_path / "sub" / "link").unlink()
    assert check_tree(tmp_path, max_bytes=500) == []

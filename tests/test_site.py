"""The course website (`make site`, docs/): it builds with no warning and no broken internal link, a page
linking to a missing page or heading fails the build, and the README fits one screen and links into docs/."""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
DOCS = REPO / "docs"


def _load(path: Path):
    """docs/ is no package: its scripts are loaded by path (registered, as dataclasses need)."""
    spec = importlib.util.spec_from_file_location(f"site_{path.stem}", path)
    module = sys.modules[spec.name] = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


check_links = _load(DOCS / "check_links.py")
course_pages = _load(DOCS / "_ext" / "course_pages.py")


def _site(tmp_path: Path, pages: dict[str, str]) -> Path:
    site = tmp_path / "html"
    for name, text in pages.items():
        (site / name).parent.mkdir(parents=True, exist_ok=True)
        (site / name).write_text(text)
    return site


def test_the_link_checker_finds_missing_pages_anchors_and_images(tmp_path):
    site = _site(tmp_path, {
        "index.html": '<a href="guide/a.html#usage">ok</a> <a href="#top" id="top">self</a> <img src="_images/f.png">'
                      '<a href="guide/missing.html">no page</a> <a href="guide/a.html#nowhere">no anchor</a>'
                      '<img src="_images/gone.png"> <link href="_static/style.css?v=3"> <a href="guide/">dir</a>',
        "guide/a.html": '<h2 id="usage">Usage</h2><a href="../index.html#top">up</a><a name="old">old</a>'
                        '<a href="a.html#old">by name</a><a href="../../outside.html">escape</a>',
        "guide/index.html": "<p>the folder's page</p>",
        "_images/f.png": "png",
        "_static/style.css": "css",
    })
    broken = {(b.page, b.target): b.reason for b in check_links.broken_links(site)}
    assert broken == {
        ("index.html", "guide/missing.html"): "no such file",
        ("index.html", "guide/a.html#nowhere"): "no id 'nowhere' in guide/a.html",
        ("index.html", "_images/gone.png"): "no such file",
        ("guide/a.html", "../../outside.html"): "outside the site",
    }


def test_the_link_checker_skips_external_links_and_the_themes_templates(tmp_path):
    site = _site(tmp_path, {
        "index.html": '<a href="https://nbgrader.readthedocs.io/x">web</a> <a href="mailto:a@b.c">mail</a>'
                      '<a href="//cdn.example/x.js">cdn</a> <script src="data:text/javascript,1"></script> <a href="">',
        "_static/macros.html": "<link href=\"{{ pathto('_static/x.css', 1) }}\">",  # a Jinja template, not a page
    })
    assert check_links.broken_links(site) == []
    assert check_links.main([str(site)]) == 0
    (site / "index.html").write_text('<a href="nowhere.html">')
    assert check_links.main([str(site)]) == 1


def _notebook(path: Path, cells: list[tuple[str, str]]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"cells": [{"cell_type": kind, "metadata": {}, "source": source}
                                          for kind, source in cells], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
    return path


def test_a_labs_page_is_its_introduction_and_the_titles_of_its_parts(monkeypatch, tmp_path):
    monkeypatch.setattr(course_pages, "REPO", tmp_path)
    notebook = _notebook(tmp_path / "labs" / "lab01_x" / "lab01_x.ipynb", [
        ("markdown", "# Lab 1 — X\n\nWhat it is about."), ("markdown", "**How it is graded.**"),
        ("code", "import numpy as np"), ("markdown", "## 1. First part\n\ntext"), ("code", "raise NotImplementedError()"),
        ("markdown", "### a detail\n\n## 2. Second part"), ("markdown", "## Wrap-up")])
    page = course_pages.lab_page(notebook)
    assert page.index("# Lab 1 — X\n\nWhat it is about.\n\n**How it is graded.**") < page.index("## The lab's parts")
    assert "\n1. First part\n2. Second part\n\n- Wrap-up\n" in page
    assert "NotImplementedError" not in page and "a detail" not in page
    assert "`labs/lab01_x/lab01_x.ipynb`" in page


def test_a_lecture_page_shows_the_figures_drawn_and_says_how_to_draw_them(tmp_path):
    notebook = _notebook(tmp_path / "lec01_x.ipynb", [("markdown", "# Lecture 1"), ("code", "plot()")])
    cells = json.loads(course_pages.lecture_notebook(notebook, []))["cells"]
    assert cells[:2] == json.loads(notebook.read_text())["cells"] and "`make plots`" in cells[-1]["source"]
    cells = json.loads(course_pages.lecture_notebook(notebook, [tmp_path / "lec01_a.png", tmp_path / "lec01_b.png"]))["cells"]
    assert "![lec01_a](figures/lec01_a.png)\n\n![lec01_b](figures/lec01_b.png)" in cells[-1]["source"]


def _github_anchor(heading: str) -> str:
    """The id GitHub (and MyST, docs/conf.py's myst_heading_anchors) gives a heading."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_the_readme_fits_one_screen_and_its_links_lead_into_docs():
    readme = (REPO / "README.md").read_text()
    assert len(readme.splitlines()) <= 60
    for command in ("make course", "make test", "make site"):
        assert command in readme
    links = [link for link in re.findall(r"\]\(([^)\s]+)\)", readme) if not re.match(r"\w+:", link)]
    assert len(links) >= 10
    for link in links:
        path, _, anchor = link.partition("#")
        target = REPO / path
        assert target.is_file() and target.is_relative_to(DOCS), link
        if anchor:
            headings = re.findall(r"^#+ (.+)$", target.read_text(), re.MULTILINE)
            assert anchor in {_github_anchor(h) for h in headings}, link


def _build(docs: Path, out: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(docs / "build.py"), "--docs", str(docs), "--out", str(out)],
                          capture_output=True, text=True, timeout=600)


@pytest.mark.slow
def test_the_site_builds_without_a_warning_or_a_broken_link(tmp_path):
    """What `make site` runs, into a scratch folder: no warning (-W), no broken cross-reference (-n), no
    broken internal link in the HTML; each lab's page is its student release's introduction, no more."""
    built = _build(DOCS, tmp_path / "html")
    assert built.returncode == 0, built.stdout + built.stderr
    assert "no warning, no broken link" in built.stdout
    site = tmp_path / "html"
    for notebook in sorted(REPO.glob("labs/lab*/lab*.ipynb")):
        page = (site / "labs" / f"{notebook.stem}.html").read_text()
        assert "BEGIN SOLUTION" not in page and "HIDDEN TESTS" not in page and "NotImplementedError" not in page
    for notebook in sorted(REPO.glob("lectures/lec*.ipynb")):
        assert "The figures" in (site / "lectures" / f"{notebook.stem}.html").read_text()
    for page in ("instructor/running-a-class", "instructor/grading-security", "maintainers/site", "benchmarks"):
        assert (site / f"{page}.html").is_file()
    assert (site / "_static" / "mathjax" / "MathJax.js").is_file()


@pytest.mark.slow
def test_a_page_linking_to_a_missing_page_or_heading_fails_the_build(tmp_path):
    """A copy of the site whose lectures have drawn a figure, and one of whose pages links to a page and
    to a heading that do not exist: the build fails naming both, and only them (the figure is shown)."""
    repo = tmp_path / "repo"
    shutil.copytree(DOCS, repo / "docs", ignore=shutil.ignore_patterns("_build", "labs", "lectures", "__pycache__"))
    (repo / "labs").symlink_to(REPO / "labs")
    (repo / "lectures" / "figures").mkdir(parents=True)
    for notebook in REPO.glob("lectures/lec*.ipynb"):
        (repo / "lectures" / notebook.name).symlink_to(notebook)
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(1, 1))
    ax.plot([0, 1])
    fig.savefig(repo / "lectures" / "figures" / "lec01_traversal.png")
    plt.close(fig)
    with (repo / "docs" / "layout.md").open("a") as page:
        page.write("\nSee [a missing page](no-such-page.md) and [a missing heading](gpu.md#no-such-heading).\n")

    built = _build(repo / "docs", tmp_path / "html")
    assert built.returncode == 1
    warnings = [line for line in built.stderr.splitlines() if "WARNING" in line]
    assert len(warnings) == 2, built.stderr
    assert "layout.md" in warnings[0] and "no-such-page.md" in warnings[0]
    assert "layout.md" in warnings[1] and "no-such-heading" in warnings[1]
    lecture = (tmp_path / "html" / "lectures" / "lec01_tensors.html").read_text()
    assert 'src="../_images/lec01_traversal.png"' in lecture
    assert (tmp_path / "html" / "_images" / "lec01_traversal.png").is_file()

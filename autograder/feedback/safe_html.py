"""Make graded notebooks safe to render: whatever a kernel printed, no renderer may run it.

Student code runs in the grading kernel, so every output of a graded notebook is attacker-controlled,
and so are the student's Markdown cells and most metadata. nbconvert's HTML exporter (feedback,
Formgrader) writes ``text/html`` outputs, ``application/javascript`` and the raw HTML of Markdown
verbatim into the page. :func:`sanitize_notebook` rewrites a notebook so that it renders inertly in
any renderer: HTML is cleaned by :func:`clean_html` (the ammonia sanitizer through ``nh3``, with an
allow-list), other rich outputs are dropped, Markdown with raw HTML or unsafe links is shown as its
source, and metadata that templates interpolate is dropped.
"""

from __future__ import annotations

import html
import re

import nh3
from nbconvert.filters.markdown_mistune import MarkdownWithMath, markdown2html_mistune
from pygments.token import STANDARD_TYPES

#: Tags notebook output needs: text formatting, lists, tables (pandas), images, code.
ALLOWED_TAGS = frozenset({
    "a", "abbr", "b", "blockquote", "br", "caption", "code", "col", "colgroup", "dd", "del", "div", "dl", "dt",
    "em", "h1", "h2", "h3", "h4", "h5", "h6", "hr", "i", "img", "ins", "kbd", "li", "mark", "ol", "p", "pre",
    "q", "s", "samp", "small", "span", "strong", "sub", "sup", "table", "tbody", "td", "tfoot", "th", "thead",
    "tr", "tt", "u", "ul", "var",
})
#: Attributes per tag ("*": every allowed tag). No event handlers, no ``id``/``name`` (DOM clobbering),
#: ``class`` only as in :data:`ALLOWED_CLASSES` (the page's CSS could restyle or overlay it), ``style``
#: only with the properties of :data:`ALLOWED_STYLE_PROPERTIES`.
ALLOWED_ATTRIBUTES = {
    "*": {"title", "style"},
    "a": {"href"},
    "img": {"src", "alt", "width", "height"},
    "table": {"border"},
    "td": {"colspan", "rowspan", "align", "valign"},
    "th": {"colspan", "rowspan", "align", "valign", "scope"},
    "tr": {"align", "valign"},
    "col": {"span", "align"},
    "colgroup": {"span", "align"},
    "ol": {"start"},
}
#: Classes nbconvert itself emits (Pygments tokens, the code box, heading anchors): harmless styling.
ALLOWED_CLASSES = {
    "span": {name for name in STANDARD_TYPES.values() if name},
    "div": {"highlight", "hl-python", "hl-python3", "hl-ipython", "hl-ipython2", "hl-ipython3"},
    "a": {"anchor-link"},
}
#: CSS properties that take no URL and cannot move content out of its box.
ALLOWED_STYLE_PROPERTIES = frozenset({
    "color", "background-color", "font-weight", "font-style", "text-align", "vertical-align",
    "text-decoration", "white-space",
})
#: Elements removed together with their content (not merely unwrapped).
DROPPED_WITH_CONTENT = frozenset({
    "script", "style", "template", "noscript", "textarea", "title", "iframe", "object", "embed", "svg",
    "math", "xmp", "noembed", "noframes", "select",
})

IMAGE_DATA_URL = re.compile(r"data:image/(png|jpeg|gif);base64,[A-Za-z0-9+/=\s]*", re.IGNORECASE)
BASE64 = re.compile(r"[A-Za-z0-9+/=\s]*")
_SCHEME = re.compile(r"([a-z][a-z0-9+.\-]*):")
_LINK_SCHEMES = frozenset({"http", "https", "mailto"})
_NUMBER = re.compile(r"\d{1,4}%?")
_WORD = re.compile(r"[a-zA-Z]{1,10}")
_STYLE_VALUE = re.compile(r"[#\w\s.,%()+\-]*")
_CSS_FUNCTIONS = frozenset({"rgb", "rgba", "hsl", "hsla"})


def _url_scheme(url: str) -> str | None:
    """The scheme a browser would read in ``url`` (it ignores ASCII whitespace and controls), or None."""
    compact = "".join(ch for ch in url if ord(ch) > 0x20).lower()
    match = _SCHEME.match(compact)
    return match[1] if match else None


def is_safe_link(url: str) -> bool:
    """A link target that navigates without running anything: http(s), mailto, or a relative URL."""
    scheme = _url_scheme(url)
    return scheme is None or scheme in _LINK_SCHEMES


def is_safe_image(url: str) -> bool:
    """An image source that loads nothing from anywhere: an inline PNG, JPEG or GIF."""
    return IMAGE_DATA_URL.fullmatch(url.strip()) is not None


def _clean_style(value: str) -> str | None:
    """Keep the declarations of allowed properties whose values hold no URL and no CSS escape."""
    kept = []
    for declaration in value.split(";"):
        name, _, setting = declaration.partition(":")
        name, setting = name.strip().lower(), setting.strip()
        functions = {f.lower() for f in re.findall(r"([a-zA-Z\-]+)\s*\(", setting)}
        if (name in ALLOWED_STYLE_PROPERTIES and setting and _STYLE_VALUE.fullmatch(setting)
                and functions <= _CSS_FUNCTIONS):
            kept.append(f"{name}: {setting}")
    return "; ".join(kept) or None


def _filter_attribute(tag: str, attribute: str, value: str) -> str | None:
    """nh3's per-attribute hook: the value to keep, or None to drop the attribute."""
    if attribute == "href":
        return value if is_safe_link(value) else None
    if attribute == "src":
        return value if tag == "img" and is_safe_image(value) else None
    if attribute == "style":
        return _clean_style(value)
    if attribute in {"width", "height", "border", "colspan", "rowspan", "span", "start"}:
        return value if _NUMBER.fullmatch(value.strip()) else None
    if attribute in {"align", "valign", "scope"}:
        return value if _WORD.fullmatch(value.strip()) else None
    return value


def clean_html(fragment: str | bytes) -> str:
    """Sanitize an HTML fragment with the course's allow-list (see the module's constants).

    Scripts, frames, forms, SVG, ``<base>``/``<meta>``/``<link>``, event handlers and every URL but
    http(s)/mailto/relative links and inline PNG/JPEG/GIF images are removed. Also usable as
    nbconvert's ``clean_html`` template filter (it accepts bytes like nbconvert's).
    """
    if isinstance(fragment, bytes):
        fragment = fragment.decode("utf-8", "replace")
    return nh3.clean(str(fragment), tags=set(ALLOWED_TAGS), clean_content_tags=set(DROPPED_WITH_CONTENT),
                     attributes={tag: set(names) for tag, names in ALLOWED_ATTRIBUTES.items()},
                     allowed_classes=ALLOWED_CLASSES, attribute_filter=_filter_attribute,
                     url_schemes=set(_LINK_SCHEMES | {"data"}), strip_comments=True,
                     link_rel="noopener noreferrer")


# --- Markdown -----------------------------------------------------------------------------------

#: Marks a Markdown cell that :func:`sanitize_notebook` replaced by its source shown as text.
MARKDOWN_NOTE = "(This cell held raw HTML or unsafe links; the grader shows its Markdown source.)"
SAFE_ATTACHMENT_TYPES = frozenset({"image/png", "image/jpeg", "image/gif"})
#: Raw HTML with no markup in it: the ``<pre>`` block :func:`markdown_as_source` writes.
_INERT_PRE = re.compile(r"<pre>[^<]*</pre>\s*")


def markdown_problems(source: str, attachments: dict | None = None) -> list[str]:
    """What makes Markdown unsafe to render, parsed exactly as nbconvert parses it (mistune with
    nbconvert's math rules): raw HTML (but a ``<pre>`` block without markup), links other than
    http(s)/mailto/relative, images other than inline PNG/JPEG/GIF or attachments of those types,
    and Mermaid diagrams (run by a script)."""
    problems = []
    stack = list(MarkdownWithMath(renderer=None)(source))
    while stack:
        token = stack.pop()
        stack.extend(token.get("children") or [])
        kind, url = token["type"], token.get("attrs", {}).get("url", "")
        if kind in ("inline_html", "block_html") and not _INERT_PRE.fullmatch(token["raw"]):
            problems.append(f"raw HTML {token['raw'][:60]!r}")
        elif kind == "link" and not is_safe_link(url):
            problems.append(f"link to {url[:60]!r}")
        elif kind == "image" and not (is_safe_image(url) or _is_attachment(url, attachments or {})):
            problems.append(f"image from {url[:60]!r}")
        elif kind == "block_code" and (token.get("attrs", {}).get("info") or "").strip().startswith("mermaid"):
            problems.append("Mermaid diagram")
    return problems


def _is_attachment(url: str, attachments: dict) -> bool:
    return url.startswith("attachment:") and url[len("attachment:"):] in attachments


def markdown_as_source(source: str) -> str:
    """Markdown that shows ``source`` verbatim: HTML-escaped in a ``<pre>`` block, which Markdown
    passes through whole (blank lines included) and nothing in it can be markup."""
    return f"*{MARKDOWN_NOTE}*\n\n<pre>{html.escape(source)}</pre>\n"


# --- Notebooks ----------------------------------------------------------------------------------

#: Notebook metadata kept, with its type; the rest (``widgets`` loads a widget manager, ``title``...) goes.
NOTEBOOK_METADATA = {"kernelspec": dict, "language_info": dict}
#: Cell metadata kept, with its type: nbgrader's own, tags, the editing flags the release sets, and
#: the raw cell's format (``jupyter.outputs_hidden``, ``transient.remove_source``... would hide things).
CELL_METADATA = {"nbgrader": dict, "tags": list, "editable": bool, "deletable": bool, "raw_mimetype": str}
#: Output MIME types kept (after cleaning ``text/html``); ``text/markdown`` becomes cleaned HTML.
KEPT_MIME_TYPES = ("text/plain", "text/html", "text/latex", "image/png", "image/jpeg")
_GRADE_ID = re.compile(r"[A-Za-z0-9_.\-]{1,200}")
_LATEX_DANGER = re.compile(r"\\(href|url|style|class|cssId|require|unicode|html\w*)\b"  # MathJax's URL/CSS macros
                           r"|</?[A-Za-z][\w-]*(\s[^<>]*)?/?>|<!", re.IGNORECASE)  # or an HTML tag
_OUTPUT_KEYS = {
    "stream": ("output_type", "name", "text"),
    "error": ("output_type", "ename", "evalue", "traceback"),
    "display_data": ("output_type", "data", "metadata"),
    "execute_result": ("output_type", "data", "metadata", "execution_count"),
}


def sanitize_notebook(nb) -> list[str]:
    """Make ``nb`` (an nbformat v4 notebook, modified in place) safe to render with any renderer.

    Outputs keep ``text/plain``, PNG/JPEG images, cleaned ``text/html`` and harmless ``text/latex``;
    JavaScript, SVG, widgets and any other type are dropped (a short ``text/plain`` note stands in
    when nothing is left of a display), Markdown output is rendered and cleaned. Stream and error
    outputs are text, which renderers escape, and are kept as they are (nbgrader grades on them).
    Markdown cells with raw HTML or unsafe links show their source as code; raw cells rendered as
    HTML are cleaned; attachments other than PNG/JPEG/GIF, and metadata renderers interpolate, go.

    Returns what was removed, one line each, for the instructor.
    """
    removed = [f"notebook metadata {key!r}" for key in _keep_metadata(nb.metadata, NOTEBOOK_METADATA)]
    for index, cell in enumerate(nb.cells):
        where = f"cell {index}"
        removed += [f"{where}: metadata {key!r}" for key in _keep_metadata(cell.metadata, CELL_METADATA)]
        removed += _sanitize_nbgrader_metadata(cell, where)
        if "attachments" in cell:
            removed += _sanitize_attachments(cell, where)
        if cell.cell_type == "code":
            removed += _sanitize_outputs(cell, where)
        elif cell.cell_type == "markdown":
            problems = markdown_problems(cell.source, cell.get("attachments"))
            if problems:
                cell.source = markdown_as_source(cell.source)
                removed += [f"{where}: Markdown shown as source ({problem})" for problem in problems]
        elif cell.cell_type == "raw" and cell.metadata.get("raw_mimetype", "").strip().lower() in ("", "text/html"):
            cleaned = clean_html(cell.source)
            if cleaned != cell.source:
                cell.source = cleaned
                removed.append(f"{where}: raw cell HTML cleaned")
    return removed


def _keep_metadata(metadata, allowed: dict[str, type]) -> list[str]:
    """Drop the keys of ``metadata`` not in ``allowed`` or whose value has another type (and the
    tags that are not strings); return the keys dropped."""
    dropped = [key for key in list(metadata) if not isinstance(metadata[key], allowed.get(key, ()))]
    for key in dropped:
        del metadata[key]
    if "tags" in metadata:
        metadata["tags"] = [tag for tag in metadata["tags"] if isinstance(tag, str)]
    return dropped


def _sanitize_nbgrader_metadata(cell, where: str) -> list[str]:
    """nbgrader's feedback template writes ``grade_id`` unescaped into a link: demote a cell whose
    grade id is not a plain identifier (nbgrader would not find it in the gradebook anyway)."""
    grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
    if grade_id is None or _GRADE_ID.fullmatch(str(grade_id)):
        return []
    del cell.metadata["nbgrader"]
    return [f"{where}: nbgrader metadata with grade id {str(grade_id)[:60]!r}"]


def _sanitize_attachments(cell, where: str) -> list[str]:
    removed, kept = [], {}
    for name, bundle in (cell.get("attachments") or {}).items():
        safe = {mime: data for mime, data in bundle.items()
                if mime in SAFE_ATTACHMENT_TYPES and isinstance(data, str) and BASE64.fullmatch(data)}
        removed += [f"{where}: attachment {name[:60]!r} as {mime[:60]}" for mime in bundle if mime not in safe]
        if safe:
            kept[name] = safe
    cell.attachments = kept
    return removed


def _sanitize_outputs(cell, where: str) -> list[str]:
    if cell.get("execution_count") is not None and not isinstance(cell.execution_count, int):
        cell.execution_count = None
    removed, outputs = [], []
    for number, output in enumerate(cell.get("outputs", [])):
        kind = output.get("output_type")
        if kind not in _OUTPUT_KEYS:
            removed.append(f"{where}: output {number} of type {str(kind)[:40]!r}")
            continue
        for key in [k for k in output if k not in _OUTPUT_KEYS[kind]]:
            del output[key]
        if kind == "stream" and output.get("name") not in ("stdout", "stderr"):
            output["name"] = "stdout"
        if kind == "error":
            output["traceback"] = [str(line) for line in output.get("traceback", [])]
        if "data" in output:
            removed += [f"{where}: output {number}: {item}" for item in _sanitize_bundle(output)]
        if kind == "execute_result" and not isinstance(output.get("execution_count"), int):
            output["execution_count"] = None
        outputs.append(output)
    cell.outputs = outputs
    return removed


def _sanitize_bundle(output) -> list[str]:
    """Keep the safe MIME types of a display output (cleaning HTML); image sizes are the only metadata."""
    data = {mime: "".join(value) if isinstance(value, list) else value for mime, value in output["data"].items()}
    kept = {mime: value for mime, value in data.items() if mime in KEPT_MIME_TYPES and isinstance(value, str)}
    removed = [mime[:60] for mime in data if mime not in kept and mime != "text/markdown"]
    if "text/markdown" in data:
        rendered = None if "text/html" in kept else _markdown_to_html(data["text/markdown"])
        if rendered is None:
            removed.append("text/markdown")
        else:
            kept["text/html"] = rendered
    if "text/html" in kept:
        cleaned = clean_html(kept["text/html"])
        if cleaned != kept["text/html"]:
            removed.append("HTML cleaned")
        kept["text/html"] = cleaned
    if "text/latex" in kept and _LATEX_DANGER.search(kept["text/latex"]):
        del kept["text/latex"]
        removed.append("text/latex with \\href, a style macro or HTML")
    for mime in ("image/png", "image/jpeg"):
        if mime in kept and not BASE64.fullmatch(kept[mime]):
            del kept[mime]
            removed.append(f"{mime} that is not base64")
    if not kept and output["output_type"] == "display_data":
        # (not for an execute_result: nbgrader reads its text/plain as partial credit)
        kept["text/plain"] = f"[output removed by the grader: {', '.join(sorted(data))[:200]}]"
    output["data"] = kept
    output["metadata"] = _image_sizes(output.get("metadata", {}), kept)
    return removed


def _markdown_to_html(source) -> str | None:
    """A Markdown output as nbconvert would render it (then cleaned), or None if it cannot be."""
    try:
        return markdown2html_mistune(source) if isinstance(source, str) else None
    except Exception:  # e.g. nbconvert's InvalidNotebook for an ``attachment:`` an output cannot have
        return None


def _image_sizes(metadata, data) -> dict:
    """Only integer width and height of kept images survive (nbconvert writes them unquoted)."""
    sizes = {}
    for mime in ("image/png", "image/jpeg"):
        entry = metadata.get(mime) if mime in data and isinstance(metadata, dict) else None
        if isinstance(entry, dict):
            size = {k: v for k, v in entry.items() if k in ("width", "height") and type(v) is int}
            if size:
                sizes[mime] = size
    return sizes

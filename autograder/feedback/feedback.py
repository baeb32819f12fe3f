"""What a student, and an instructor's browser, may see of a graded notebook.

Student code runs in the grading kernel, so every output is attacker-controlled. Two nbconvert
preprocessors apply the course's policy:

- :class:`SanitizeNotebook` (an Autograde step, right after execution) makes the autograded copy
  that Formgrader renders safe with :func:`~autograder.feedback.safe_html.sanitize_notebook`;
- :class:`SafeFeedback` (a GenerateFeedback step, before nbgrader's ``ClearHiddenTests``) reduces
  each hidden-test cell to a verdict and redacts hidden-test lines from every other output.
"""

from __future__ import annotations

import re
import unicodedata
from html.parser import HTMLParser

from nbconvert.preprocessors import Preprocessor
from nbformat.v4 import new_output
from nbgrader import utils
from traitlets import Int

from .safe_html import sanitize_notebook

#: The delimiters of nbgrader's ClearHiddenTests (it matches them anywhere in a line).
HIDDEN_BEGIN, HIDDEN_END = "BEGIN HIDDEN TESTS", "END HIDDEN TESTS"
#: What stands in for a hidden-test line found in an output.
REDACTED = "[hidden test line removed]"
#: Hidden lines shorter than this (after normalising whitespace) are too generic to redact.
MIN_SECRET_CHARS = 20
#: Exceptions whose message a hidden test writes itself (when raised in the test's own frame):
#: assertions, and mlsys_lib.testing's ReferenceUsedError (an AssertionError).
ASSERTION_ERRORS = frozenset({"AssertionError", "ReferenceUsedError"})
#: Files of the test helpers a test cell asserts with (``assert_close`` fails inside numpy.testing);
#: their frames below the test cell's are not the student's code. Matched by their package path,
#: since the kernel may import a grading edition of mlsys_lib from another folder.
TEST_HELPER_FILE = re.compile(r"(?:^|[/\\])(?:mlsys_lib[/\\]testing|numpy[/\\]testing)[/\\][\w/\\]+\.py$")

_ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]")
_FRAME = re.compile(r"(?:Cell In\s*\[(\d+)\]|Input In\s*\[(\d+)\]|File (.+?):\d+)")
_NAME = re.compile(r"[A-Za-z_][\w.]{0,79}")


class SanitizeNotebook(Preprocessor):
    """Autograde step: make the autograded notebook safe for any renderer (Formgrader, JupyterLab).

    Place it right after the Execute step. It leaves stream and error outputs alone, so nbgrader
    grades the notebook exactly as before; what it removes is logged for the instructor.
    """

    enabled = True  # nbconvert preprocessors are off unless enabled

    def preprocess(self, nb, resources):
        _log_removed(self.log, sanitize_notebook(nb), resources)
        return nb, resources


class SafeFeedback(Preprocessor):
    """GenerateFeedback step (before ``ClearHiddenTests``): what the student reads of each cell.

    A graded test cell holding hidden tests shows one verdict: ``passed``, or ``failed`` with the
    exception's name and, only for an assertion raised by the test's own code, its message
    (truncated, redacted). Every other cell keeps its outputs, with each line of any hidden-test
    region of the notebook replaced by :data:`REDACTED` and each output truncated. The notebook is
    sanitized first (:func:`~autograder.feedback.safe_html.sanitize_notebook`), in case the autograded copy
    was written without :class:`SanitizeNotebook`, so redaction sees what will be rendered.
    Scores are not touched: nbgrader's ``GetGrades`` reads them from the gradebook.
    """

    enabled = True
    message_chars = Int(300, help="Longest assertion message a hidden test's verdict shows.").tag(config=True)
    output_chars = Int(20_000, help="Longest text one output of a feedback cell shows.").tag(config=True)

    def preprocess(self, nb, resources):
        _log_removed(self.log, sanitize_notebook(nb), resources)
        redact = Redactor(secret_lines(nb))
        for cell in nb.cells:
            if cell.cell_type != "code":
                continue
            if utils.is_grade(cell) and not utils.is_solution(cell) and HIDDEN_BEGIN in cell.source:
                cell.outputs = [verdict(cell, redact, self.message_chars)]
            else:
                cell.outputs = [_redact_output(output, redact, self.output_chars)
                                for output in _coalesce_streams(cell.outputs)]
        return nb, resources


def _log_removed(log, removed: list[str], resources) -> None:
    """Tell the instructor (nbgrader's log) what sanitizing removed: the first few items and a count."""
    if removed:
        student = resources.get("nbgrader", {}).get("student", "?")
        shown = "; ".join(removed[:20]) + (f"; and {len(removed) - 20} more" if len(removed) > 20 else "")
        log.warning("Sanitized the notebook of %s (%d removals): %s", student, len(removed), shown)


# --- Hidden lines and redaction -----------------------------------------------------------------

def normalize(text: str) -> str:
    """``text`` as a reader sees it: no ANSI colours, no control or invisible format characters,
    compatibility forms folded (NFKC), runs of whitespace as one space."""
    text = unicodedata.normalize("NFKC", _ANSI.sub("", text))
    text = "".join(ch for ch in text if unicodedata.category(ch) not in ("Cc", "Cf") or ch in "\t\n")
    return " ".join(text.split())


def secret_lines(nb) -> set[str]:
    """The normalised lines of the notebook's hidden-test regions (at least :data:`MIN_SECRET_CHARS`
    long) that no visible part of a cell nbgrader restores (test cells, locked cells) contains, and
    the delimiters themselves (printed stolen source shows where the hidden tests were)."""
    hidden, visible = set(), set()
    for cell in nb.cells:
        inside, trusted = False, utils.is_locked(cell)
        for line in cell.source.splitlines():
            if HIDDEN_BEGIN in line or HIDDEN_END in line:
                inside = HIDDEN_BEGIN in line
            elif inside:
                hidden.add(normalize(line))
            elif trusted:
                visible.add(normalize(line))
    return {line for line in hidden - visible if len(line) >= MIN_SECRET_CHARS} | {HIDDEN_BEGIN, HIDDEN_END}


class Redactor:
    """Replace the secret lines found in a text, line by line (a line holding none is left as is)."""

    def __init__(self, secrets: set[str]):
        alternatives = "|".join(re.escape(s) for s in sorted(secrets, key=len, reverse=True))
        self._pattern = re.compile(alternatives) if secrets else None

    def __call__(self, text: str) -> str:
        if self._pattern is None:
            return text
        lines = text.split("\n")
        for number, line in enumerate(lines):
            flat = normalize(line)
            if self._pattern.search(flat):
                lines[number] = self._pattern.sub(REDACTED, flat)
        return "\n".join(lines)


def truncate(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters, with a note saying how much was cut."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}\n[... {len(text) - limit} more characters not shown]"


# --- Hidden-test verdicts -----------------------------------------------------------------------

def verdict(cell, redact: Redactor, message_chars: int):
    """The one output that replaces a hidden-test cell's: a ``passed`` stream, or an error whose
    only traceback line says why it failed (mirroring nbgrader: an error or stderr output fails)."""
    errors = [o for o in cell.outputs if o.get("output_type") == "error"]
    if errors:
        ename = redact(_exception_name(errors[0].get("ename")))
        in_test = raised_in_test(errors[0].get("traceback", []), cell.get("execution_count"))
        if in_test and ename in ASSERTION_ERRORS:
            message = truncate(redact(str(errors[0].get("evalue", ""))), message_chars)
            text = f"failed: {ename}: {message}" if message else f"failed: {ename}"
        else:
            message, where = "", "" if in_test else " raised inside your code"
            text = f"failed: {ename}{where} while the hidden tests ran (its message is not shown)"
        return new_output("error", ename=ename, evalue=message, traceback=[text])
    if any(o.get("output_type") == "stream" and o.get("name") == "stderr" for o in cell.outputs):
        return new_output("error", ename="Error", evalue="",
                          traceback=["failed: the cell wrote to standard error while the hidden tests ran "
                                     "(what it wrote is not shown)"])
    return new_output("stream", name="stdout", text="passed\n")


def raised_in_test(traceback: list, execution_count) -> bool:
    """Whether the innermost frame of an IPython traceback, test helpers aside, is the test cell
    itself (``Cell In[n]`` with the cell's execution count), not code the test called."""
    frames = []
    for entry in traceback:
        match = _FRAME.match(_ANSI.sub("", str(entry)).lstrip())
        if match:
            count = match[1] or match[2]
            frames.append(int(count) if count else match[3])
    while frames and isinstance(frames[-1], str) and TEST_HELPER_FILE.search(frames[-1]):
        frames.pop()
    return bool(frames) and frames[-1] == execution_count


def _exception_name(ename) -> str:
    """The exception's name if it looks like one (a student's exception class may be named anything)."""
    return str(ename) if _NAME.fullmatch(str(ename)) else "an exception"


# --- Other cells --------------------------------------------------------------------------------

def _coalesce_streams(outputs) -> list:
    """Merge consecutive stream outputs of one name, as renderers show them (so a line printed in
    pieces is redacted whole)."""
    merged = []
    for output in outputs:
        previous = merged[-1] if merged else None
        if (output.get("output_type") == "stream" and previous is not None
                and previous.get("output_type") == "stream" and previous.get("name") == output.get("name")):
            previous["text"] = previous.get("text", "") + output.get("text", "")
        else:
            merged.append(output)
    return merged


def _redact_output(output, redact: Redactor, limit: int):
    """The output with every text redacted and bounded; HTML or LaTeX that shows a hidden line, or
    is too long, gives way to its (redacted) plain text."""
    kind = output.get("output_type")
    if kind == "stream":
        output["text"] = truncate(redact(output.get("text", "")), limit)
    elif kind == "error":
        output["ename"] = truncate(redact(str(output.get("ename", ""))), 200)
        output["evalue"] = truncate(redact(str(output.get("evalue", ""))), limit)
        output["traceback"] = _bounded([redact(str(line)) for line in output.get("traceback", [])], limit)
    elif "data" in output:
        data = output["data"]
        if "text/html" in data:
            text = _html_text(data["text/html"])
            if redact(text) != text or len(data["text/html"]) > limit:
                data.setdefault("text/plain", text)
                del data["text/html"]
        latex = data.get("text/latex")
        if latex is not None and (redact(latex) != latex or len(latex) > limit):
            data.setdefault("text/plain", latex)
            del data["text/latex"]
        if "text/plain" in data:
            data["text/plain"] = truncate(redact(data["text/plain"]), limit)
    return output


def _bounded(lines: list[str], limit: int) -> list[str]:
    """The first lines of a traceback that fit in ``limit`` characters, then the next one cut short."""
    kept, used = [], 0
    for line in lines:
        if used + len(line) > limit:
            kept.append(truncate(line, max(limit - used, 0)))
            break
        kept.append(line)
        used += len(line)
    return kept


class _TextOf(HTMLParser):
    """The text a browser shows of an HTML fragment, attribute values (tooltips, alt text) included."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []

    def handle_data(self, data):
        self.parts.append(data)

    def handle_starttag(self, tag, attrs):
        self.parts.extend(f"\n{value}\n" for _, value in attrs if value)


def _html_text(fragment: str) -> str:
    parser = _TextOf()
    parser.feed(fragment)
    parser.close()
    return "".join(parser.parts)

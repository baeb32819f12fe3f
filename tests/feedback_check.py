"""What a student must never read in feedback: the lab's hidden-test lines the release does not show."""

import html
import json
import re

import nbformat

from autograder.paths import LABS, SOLUTIONS

HIDDEN_REGION = re.compile(r"### BEGIN HIDDEN TESTS\n(.*?)### END HIDDEN TESTS", re.DOTALL)
SOLUTION_REGION = re.compile(r"### BEGIN SOLUTION\n(.*?)### END SOLUTION", re.DOTALL)
#: Shorter hidden lines (``x = 1``) are too generic to call a leak.
MIN_CHARS = 20


def _flat(text: str) -> str:
    """``text`` with every run of whitespace as one space (how a reader compares lines)."""
    return " ".join(text.split())


def hidden_lines(lab: str) -> set[str]:
    """Every substantial source line of ``lab``'s hidden tests that its release does not contain,
    whitespace-normalised; a line the reference solution also writes (``for _ in range(n):``) is a
    student's own code in feedback, not a leak."""
    lines = set()
    for path in (SOLUTIONS / lab).glob("*.ipynb"):
        released = (LABS / lab / path.name).read_text()  # JSON: compare JSON-escaped lines
        cells = nbformat.read(path, as_version=4).cells
        answers = {_flat(line) for cell in cells for region in SOLUTION_REGION.findall(cell.source)
                   for line in region.splitlines()}
        for cell in cells:
            for region in HIDDEN_REGION.findall(cell.source):
                lines |= {_flat(line) for line in region.splitlines()
                          if len(_flat(line)) >= MIN_CHARS and json.dumps(line.strip())[1:-1] not in released
                          and not _is_visible_signature(line.strip(), released)} - answers
    return lines


def _is_visible_signature(line: str, released: str) -> bool:
    """``f(a, b)`` where the release defines ``def f(``: a traceback of a visible test prints exactly
    that as the frame of ``f``, so seeing it in feedback reveals nothing hidden."""
    call = re.fullmatch(r"(\w+)\(([\w, ]*)\)", line)
    return bool(call) and f"def {call[1]}(" in released


def leaked_lines(feedback_html: str, lab: str) -> list[str]:
    """The hidden-test lines of ``lab`` that the feedback page shows (as text, tags removed)."""
    text = _flat(html.unescape(re.sub(r"<[^>]+>", "", feedback_html)))
    found = [line for line in hidden_lines(lab) if line in text]
    return found + (["### HIDDEN TESTS marker"] if "HIDDEN TESTS" in text else [])

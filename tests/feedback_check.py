"""What a student must never read in feedback: the lab's hidden-test lines the release does not show."""

import html
import json
import re

import nbformat

from autograder.paths import LABS, SOLUTIONS

HIDDEN_REGION = re.compile(r"### BEGIN HIDDEN TESTS\n(.*?)### END HIDDEN TESTS", re.DOTALL)


def hidden_lines(lab: str) -> set[str]:
    """Every substantial source line of ``lab``'s hidden tests that its release does not contain."""
    lines = set()
    for path in (SOLUTIONS / lab).glob("*.ipynb"):
        released = (LABS / lab / path.name).read_text()  # JSON: compare JSON-escaped lines
        for cell in nbformat.read(path, as_version=4).cells:
            for region in HIDDEN_REGION.findall(cell.source):
                lines |= {line.strip() for line in region.splitlines()
                          if len(line.strip()) > 25 and json.dumps(line.strip())[1:-1] not in released
                          and not _is_visible_signature(line.strip(), released)}
    return lines


def _is_visible_signature(line: str, released: str) -> bool:
    """``f(a, b)`` where the release defines ``def f(``: a traceback of a visible test prints exactly
    that as the frame of ``f``, so seeing it in feedback reveals nothing hidden."""
    call = re.fullmatch(r"(\w+)\(([\w, ]*)\)", line)
    return bool(call) and f"def {call[1]}(" in released


def leaked_lines(feedback_html: str, lab: str) -> list[str]:
    """The hidden-test lines of ``lab`` that the feedback page shows (as text, tags removed)."""
    text = html.unescape(re.sub(r"<[^>]+>", "", feedback_html))
    found = [line for line in hidden_lines(lab) if line in text]
    return found + (["### HIDDEN TESTS marker"] if "HIDDEN TESTS" in text else [])

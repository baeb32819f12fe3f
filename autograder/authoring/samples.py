"""Sample submissions, made from the release so they never go stale.

For a lab: ``solution`` (the release with every answer cell filled in from ``solutions/``),
``blank`` (the untouched release) and one submission per wrong-answer fixture in
``tests/fixtures/wrong_answers/<lab>/<name>.py``. A fixture is a Python file::

    # Wrong answer: strides reversed (column-major order).
    # loses: test_compact_strides, test_compact
    # %% grade_id=compact_strides
    def compact_strides(shape):
        ...

The header says what the mistake is and which test cells must lose points (``loses:``); each
``# %% grade_id=<id>`` section replaces the answer cell with that grade_id in the solution.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

from ..cells import fill, solution_cells
from ..paths import FIXTURES, LABS, SOLUTIONS
from . import mutate

SECTION = re.compile(r"^# %% grade_id=(?P<grade_id>\S+)\s*$", re.MULTILINE)


@dataclass
class WrongAnswer:
    """A plausible mistake: its description, the test cells it must lose, the answer cells it replaces."""

    name: str
    description: str
    loses: list[str]
    cells: dict[str, str] = field(default_factory=dict)


def parse_wrong_answer(path: Path) -> WrongAnswer:
    """Read a fixture file (format in the module docstring); ``ValueError`` names what is missing."""
    text = path.read_text()
    parts = SECTION.split(text)
    header, sections = parts[0], parts[1:]
    if not sections:
        raise ValueError(f"{path}: no '# %% grade_id=<id>' section")
    description, loses = [], []
    for line in header.splitlines():
        line = line.lstrip("# ").strip()
        if line.startswith("loses:"):
            loses = [name.strip() for name in line[len("loses:"):].split(",") if name.strip()]
        elif line:
            description.append(line)
    if not loses:
        raise ValueError(f"{path}: the header must say which test cells lose points ('# loses: ...')")
    cells = {sections[i]: sections[i + 1].strip("\n") + "\n" for i in range(0, len(sections), 2)}
    return WrongAnswer(path.stem, " ".join(description), loses, cells)


def wrong_answers(lab: str) -> list[WrongAnswer]:
    """Every wrong-answer fixture of ``lab``."""
    return [parse_wrong_answer(p) for p in sorted((FIXTURES / "wrong_answers" / lab).glob("*.py"))]


def build_samples(lab: str, dest: Path, *, wrong: int | None = None) -> dict[str, WrongAnswer | None]:
    """Write ``dest/<student>/<lab>.ipynb`` for every sample; returns student -> its wrong answer.

    ``solution`` and ``blank`` map to ``None``. ``wrong``: only the first that many fixtures (by name).
    """
    release_path = LABS / lab / f"{lab}.ipynb"
    release = nbformat.read(release_path, as_version=4)
    full = solution_cells(lab)
    samples: dict[str, tuple[nbformat.NotebookNode, WrongAnswer | None]] = {
        "solution": (fill(release, full), None),
        "blank": (release, None),
    }
    for fixture in wrong_answers(lab)[:wrong]:
        samples[f"wrong_{fixture.name}"] = (fill(release, {**full, **fixture.cells}), fixture)
    for student, (notebook, _) in samples.items():
        (dest / student).mkdir(parents=True, exist_ok=True)
        nbformat.write(notebook, dest / student / f"{lab}.ipynb")
    return {student: wrong for student, (_, wrong) in samples.items()}


@dataclass
class FixtureCheck:
    """What a wrong-answer fixture lost when run, against what it must lose."""

    wrong: WrongAnswer
    lost: set[str] | None        # the failing test cells; None when the run gave no answer
    problem: str | None          # "timed out", "exit status 1", ...
    own_tests: set[str]          # the test cells of the exercises it replaces: all it may lose

    @property
    def ok(self) -> bool:
        return self.lost == set(self.wrong.loses)

    @property
    def cascades(self) -> set[str]:
        """Tests of *other* exercises it must lose: one mistake charged twice."""
        return set(self.wrong.loses) - self.own_tests


def check_wrong_answers(lab: str, *, jobs: int = 2, names: set[str] | None = None) -> list[FixtureCheck]:
    """Run every wrong-answer fixture of ``lab`` (or those ``names`` names) by forking from the solution
    notebook, on the lab's grading edition: seconds, not the minutes of grading each through nbgrader
    (``make check-all`` does that; ``make course`` grades only the solution and the blank so)."""
    notebook = SOLUTIONS / lab / f"{lab}.ipynb"
    wrongs = [w for w in wrong_answers(lab) if names is None or w.name in names]
    outcomes = mutate.failing_tests(notebook, {w.name: w.cells for w in wrongs}, edition=lab, jobs=jobs)
    cells = mutate.read_cells(notebook)
    own = {e.grade_id: set(e.own_tests(cells)) for e in mutate.find_exercises(cells)}
    checks = []
    for wrong in wrongs:
        outcome = outcomes[wrong.name]
        lost, problem = (None, outcome) if isinstance(outcome, str) else (outcome, None)
        checks.append(FixtureCheck(wrong, lost, problem, set().union(*(own[g] for g in wrong.cells))))
    return checks

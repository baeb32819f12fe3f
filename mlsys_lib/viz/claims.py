"""Timing for the lecture figures, and the measured ratio behind each claim a figure illustrates.

A timing figure teaches a claim ("fused is faster than unfused", "tiled beats naive"). On another
machine the measurement may not bear it out, and a figure that silently shows the opposite of its
text teaches the wrong lesson. So each lecture notebook times with :func:`median_time` and states
its claims with :func:`claim`, which prints the ratio measured here and whether it agrees; ``mlsys
course figures`` collects those lines (:func:`parse_claims`) and warns about each contradiction.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import Callable

#: Every claim line starts with this, so the figures command can find it among the outputs.
PREFIX = "claim "
_HOLDS, _CONTRADICTED = "holds", "does not hold"


def median_time(fn: Callable, *args, repeats: int = 5) -> float:
    """Median wall time in seconds of ``fn(*args)`` over ``repeats`` runs, after one warm-up (compile) run."""
    if repeats < 1:
        raise ValueError(f"repeats must be at least 1, got {repeats}")
    fn(*args)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn(*args)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


@dataclass(frozen=True)
class Claim:
    """A lecture's claim with the ratio measured for it: ``holds`` when ``ratio >= at_least``.

    ``unit`` follows both numbers in the printed line: "x" for a ratio of times, "% of bound" for a
    percentage of a roofline bound.
    """

    statement: str
    ratio: float
    at_least: float
    unit: str = "x"

    @property
    def holds(self) -> bool:
        return self.ratio >= self.at_least

    def line(self) -> str:
        verdict = _HOLDS if self.holds else _CONTRADICTED
        return (f"{PREFIX}{verdict}: {self.statement}: measured {self.ratio:.3g}{self.unit} "
                f"(the text needs >= {self.at_least:g}{self.unit})")


def claim(statement: str, ratio: float, *, at_least: float = 1.0, unit: str = "x") -> Claim:
    """Print the ratio behind ``statement`` (e.g. unfused time / fused time) and whether it bears it out."""
    result = Claim(statement, float(ratio), float(at_least), unit)
    print(result.line())
    return result


def parse_claims(text: str) -> list[tuple[bool, str]]:
    """The claim lines in a notebook's printed output, as ``(holds, line)``, in order."""
    found = []
    for line in text.splitlines():
        if line.startswith(PREFIX):
            found.append((line.startswith(f"{PREFIX}{_HOLDS}:"), line))
    return found

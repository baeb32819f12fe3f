"""Verifying a substitution: do its two sides compute the same function?

TASO proves its substitutions with an SMT solver over operator axioms; here, as in the lecture's
summary of the cheaper test, each candidate is run on many random inputs (float64, equal within
``1e-9·(1 + |value|)``), and, when every op of both sides is exact on integers (no div, exp,
non-integer numbers), once more on random integer inputs where the results must be *equal*. A wrong
rule fails on almost any random input; the integer check removes the tolerance from the verdict.
Random testing is evidence, not proof: a rule that differs on a set of inputs of measure zero passes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from .ops import OPS, Shape
from .pattern import Apply, Lit, Rule, Template, attribute_variables, evaluate_template, variables, walk


@dataclass(frozen=True)
class Verdict:
    """The result of :func:`verify_rule`: ``ok``; ``trials`` random trials passed; ``exact`` True when
    the integer check also passed, None when the ops do not allow one; ``reason`` why it failed."""

    ok: bool
    trials: int
    exact: bool | None
    reason: str = ""

    def __bool__(self) -> bool:
        return self.ok


def integer_exact(*templates: Template) -> bool:
    """Whether every op of the templates is exact on integers and every number in them is an integer."""
    for part in (part for t in templates for part in walk(t)):
        if isinstance(part, Apply) and not OPS[part.op].exact:
            return False
        if isinstance(part, Lit) and not float(part.value).is_integer():
            return False
    return True


def verify_rule(rule: Rule, trials: int = 16, sizes: Sequence[int] = (2, 3, 4, 5),
                shapes: Mapping[str, Shape] | None = None, attrs: Mapping[str, object] | None = None,
                seed: int = 0, tolerance: float = 1e-9) -> Verdict:
    """Check ``rule.source`` and ``rule.target`` agree on ``trials`` random float64 inputs, then exactly on integers.

    shapes: each variable's shape; by default every variable is an (n, n) matrix with n cycling
        through ``sizes`` from trial to trial (so a rule that holds only for one size fails).
    attrs: values for the rule's attribute variables (required if it has any).
    A side that fails to evaluate (shapes that do not fit) fails the verdict with the error as reason.
    """
    attr_vars = attribute_variables(rule.source)
    names = sorted(variables(rule.source) - attr_vars)
    missing = attr_vars - set(attrs or {})
    if missing:
        raise ValueError(f"verify_rule {rule}: give values for the attribute variables {sorted(missing)}")
    rng = np.random.default_rng(seed)

    def inputs(trial: int, integer: bool) -> dict[str, object]:
        n = sizes[trial % len(sizes)]
        values = {}
        for name in names:
            shape = shapes[name] if shapes is not None else (n, n)
            values[name] = rng.integers(-9, 10, shape) if integer else rng.uniform(-2.0, 2.0, shape)
        return {**values, **(attrs or {})}

    def disagreement(values: dict[str, object], exact: bool) -> str:
        try:
            a, b = evaluate_template(rule.source, values), evaluate_template(rule.target, values)
        except (ValueError, TypeError) as error:
            return f"does not evaluate: {error}"
        if a.shape != b.shape:
            return f"shapes differ: {a.shape} vs {b.shape}"
        error = np.abs(a - b)
        same = not error.any() if exact else bool(np.all(error <= tolerance * (1 + np.abs(b))))
        return "" if same else f"values differ by up to {np.max(error):.3g}"

    for trial in range(trials):
        reason = disagreement(inputs(trial, integer=False), exact=False)
        if reason:
            return Verdict(False, trial, None, f"random trial {trial}: {reason}")
    if not integer_exact(rule.source, rule.target):
        return Verdict(True, trials, None)
    reason = disagreement(inputs(0, integer=True), exact=True)
    return Verdict(not reason, trials, not reason, f"integer check: {reason}" if reason else "")

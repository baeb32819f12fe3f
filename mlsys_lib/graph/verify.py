"""Verifying a substitution: do its two sides compute the same function?

TASO proves its substitutions with an SMT solver over operator axioms; here, as in the lecture's
summary of the cheaper test, each candidate is run on many random inputs (float64, equal within
``1e-9·(1 + |value|)``), and, when every op of both sides is exact on integers (no div, exp,
non-integer numbers), once more on random integer inputs where the results must be *equal*. A wrong
rule fails on almost any random input; the integer check removes the tolerance from the verdict.

The random inputs (:func:`random_inputs`) are ``±10**u`` with ``u`` uniform in [-3, 3]: every decade
of magnitude from 0.001 to 1000 is equally likely, with either sign. Rules that hold on [-1, 1] but not
beyond, which inputs uniform in [-1, 1] would pass, fail: ``relu(x + x·x) = relu(x) + x·relu(x)``
differs only for x < -1 (a quarter of these inputs), ReLU6 ``relu(x) - relu(x - 6) = relu(x)`` only
for x > 6 (about a fifth). Random testing is evidence, not proof: a rule that differs on a set of
inputs of measure zero, or only beyond 1000 in magnitude, passes.
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


def random_inputs(rng: np.random.Generator, shape: Shape) -> np.ndarray:
    """Random float64 test inputs of ``shape``: each element independently ``±10**u``, the sign + or -
    with probability 1/2, ``u`` uniform in [-3, 3].

    Log-uniform magnitudes are scale-free: each decade from 0.001 to 1000 gets a sixth of the
    elements, so every trial has values near 0, around ±1 and large, of both signs (half the
    elements have |x| < 1, a quarter are below -1, a sixth have |x| > 100).
    """
    signs = np.where(rng.random(shape) < 0.5, -1.0, 1.0)
    return signs * 10.0 ** rng.uniform(-3.0, 3.0, shape)


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
    """Check ``rule.source`` and ``rule.target`` agree on ``trials`` random float64 inputs
    (:func:`random_inputs`), then exactly on random integers in [-9, 9].

    Two values agree when both are finite and within ``tolerance·(1 + |target's value|)``, or equal
    (the same infinity), or both nan: inputs up to 1000 in magnitude overflow ``exp``, and
    ``exp(x)·exp(y) = exp(y)·exp(x)`` holds in floating point even where both sides are inf or nan,
    while ``exp(x + y) = exp(x)·exp(y)`` does not (x = 750, y = -50: e**700 against inf).

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
            values[name] = rng.integers(-9, 10, shape) if integer else random_inputs(rng, shape)
        return {**values, **(attrs or {})}

    def disagreement(values: dict[str, object], exact: bool) -> str:
        with np.errstate(over="ignore", under="ignore", invalid="ignore", divide="ignore"):
            try:
                a, b = evaluate_template(rule.source, values), evaluate_template(rule.target, values)
            except (ValueError, TypeError) as error:
                return f"does not evaluate: {error}"
            if a.shape != b.shape:
                return f"shapes differ: {a.shape} vs {b.shape}"
            error = np.abs(a - b)
            # equal values, infinities included, and nan on both sides agree (|a - b| is nan for them);
            # the tolerance applies to finite values only (relative to an infinite one, all would be close)
            same = (a == b) | (np.isnan(a) & np.isnan(b))
            if not exact:
                same |= np.isfinite(a) & np.isfinite(b) & (error <= tolerance * (1 + np.abs(b)))
        return "" if same.all() else f"values differ by up to {np.max(error[~same]):.3g}"

    for trial in range(trials):
        reason = disagreement(inputs(trial, integer=False), exact=False)
        if reason:
            return Verdict(False, trial, None, f"random trial {trial}: {reason}")
    if not integer_exact(rule.source, rule.target):
        return Verdict(True, trials, None)
    reason = disagreement(inputs(0, integer=True), exact=True)
    return Verdict(not reason, trials, not reason, f"integer check: {reason}" if reason else "")

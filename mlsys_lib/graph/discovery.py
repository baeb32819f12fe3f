"""Automated discovery of graph substitutions, after TASO (Jia et al., SOSP 2019), in stages:

1. **enumerate** every graph of up to k ops over a small op set and a few variables (all (n, n)
   matrices, so every op applies; a variable alone is a graph of 0 ops): each new op takes its
   operands from the variables and the ops before it; a graph counts once (by its expression), only
   if every op reaches the output and no two ops are identical (that graph is listed CSE'd);
2. **fingerprint** each graph by its output on one fixed random input in [-1, 1] (rounded to 6
   decimals, hashed). Every pair of graphs with equal fingerprints is a candidate (counted); as
   equality is transitive, each graph is kept paired only with its group's smallest graph (m - 1
   candidates for a group of m instead of m(m - 1)/2: any other pair follows by chaining two of these).
   A fingerprint is a hash, not a check: on [-1, 1] the values of these graphs stay small enough for
   a fixed rounding, and a pair that agrees only there becomes a candidate that step 5 rejects;
3. **prune renamings**: a pair that is another pair with its variables renamed (``A+B = B+A`` and
   ``B+C = C+B``) adds nothing; each pair is kept in its canonical renaming;
4. **prune trivial pairs** (:func:`is_trivial`): pairs a smaller candidate implies (same root op with
   all operands but one identical; or TASO's *common subgraph*: a subgraph in both sides that an
   unused variable can replace), and pairs neither side of which can be a rewrite's target;
5. **verify** the rest (:func:`~mlsys_lib.graph.verify.verify_rule`): random trials on inputs ``±10**u``,
   ``u`` uniform in [-3, 3] (:func:`~mlsys_lib.graph.verify.random_inputs`: near 0, around ±1 and
   large, both signs), with varying sizes, plus an exact check on integers when the ops allow one. This
   rejects candidates that agree only on the fingerprint's inputs: ``relu(A + A·A) = relu(A) + A·relu(A)``
   holds for A >= -1, so on all of [-1, 1], and fails for A < -1.

The counts per stage are reproducible for a given seed. Each verified pair gives rewrite rules
(:meth:`Substitution.rules`, :meth:`Discovery.rules`) for the cost-based search.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from .ops import ELEMENTWISE, OPS
from .pattern import Apply, Rule, Template, Var, evaluate_template, ops_of, variables, walk
from .verify import Verdict, verify_rule

VARIABLES = ("A", "B", "C")
DISCOVERABLE = tuple(ELEMENTWISE) + ("matmul", "transpose")
DEFAULT_OPS = ("add", "mul", "relu", "matmul", "transpose")


@dataclass(frozen=True)
class Substitution:
    """Two graphs found equal: ``left`` and ``right`` templates; ``exact``: as in :class:`Verdict`."""

    left: Template
    right: Template
    exact: bool | None = None

    def rules(self) -> list[Rule]:
        """The rewrite rules it gives: each direction whose source is an op and whose target's variables
        all occur in the source."""
        return [Rule(a, b) for a, b in ((self.left, self.right), (self.right, self.left))
                if isinstance(a, Apply) and variables(b) <= variables(a)]

    def __str__(self) -> str:
        return f"{self.left} = {self.right}"


@dataclass
class Discovery:
    """The result of :func:`discover`: ``counts`` and ``seconds`` per stage (in order), the verified
    ``substitutions`` and the ``rejected`` candidates with their verdicts."""

    ops: tuple[str, ...]
    max_ops: int
    variables: tuple[str, ...]
    counts: dict[str, int] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)
    substitutions: list[Substitution] = field(default_factory=list)
    rejected: list[tuple[Substitution, Verdict]] = field(default_factory=list)

    def rules(self) -> list[Rule]:
        """Every rewrite rule of the verified substitutions."""
        return [rule for s in self.substitutions for rule in s.rules()]

    def report(self) -> str:
        """A table: candidates surviving each stage, and the time each stage took."""
        lines = [f"substitution discovery: ops {', '.join(self.ops)}; up to {self.max_ops} ops; "
                 f"variables {', '.join(self.variables)}",
                 f"  {'stage':<40}{'count':>9}{'seconds':>10}"]
        lines += [f"  {stage:<40}{count:>9}" + (f"{self.seconds[stage]:>10.3f}" if stage in self.seconds else "")
                  for stage, count in self.counts.items()]
        return "\n".join(lines)


def enumerate_graphs(ops: Sequence[str], max_ops: int, values: dict[str, np.ndarray]) -> dict[str, tuple[Template, np.ndarray]]:
    """Every graph of at most ``max_ops`` ops over ``ops`` and the variables of ``values`` (0 ops: a
    variable itself), as expression text -> (template, value on ``values``), computed incrementally.

    A graph whose expression is already known, or with an op the output does not depend on, or
    with two identical ops, is the same as (or CSE-equivalent to) one already listed and is skipped.
    """
    found: dict[str, tuple[Template, np.ndarray]] = {name: (Var(name), value) for name, value in values.items()}
    # pool entries: (text, template, value, bit mask of the ops it depends on)
    pool = [(name, Var(name), value, 0) for name, value in values.items()]

    def extend(n_ops: int) -> None:
        texts = {entry[0] for entry in pool}
        complete, last = (1 << (n_ops + 1)) - 1, n_ops + 1 == max_ops
        for op in ops:
            opdef = OPS[op]
            for operands in itertools.product(pool, repeat=opdef.arity[0]):
                mask = 1 << n_ops
                for entry in operands:
                    mask |= entry[3]
                if last and mask != complete:  # an earlier op would be dead: skip before any work
                    continue
                text = f"{op}({', '.join(e[0] for e in operands)})"
                if text in texts:
                    continue
                args = [e[2] for e in operands]
                try:
                    value = np.asarray(opdef.compute(opdef.defaults([a.shape for a in args]), *args))
                except ValueError:
                    continue
                template = Apply(op, tuple(e[1] for e in operands))
                if mask == complete:
                    found.setdefault(text, (template, value))
                if not last:
                    pool.append((text, template, value, mask))
                    extend(n_ops + 1)
                    pool.pop()

    extend(0)
    return found


def fingerprint(value: np.ndarray) -> tuple:
    """A hashable summary of a graph's output: shape and values rounded to 6 decimals (-0.0 made 0.0)."""
    return value.shape, (np.round(value, 6) + 0.0).tobytes()


def renamings(names: Sequence[str]) -> list[tuple[dict[str, str], dict[int, int]]]:
    """Every renaming of the variables ``names``: (mapping, its ``str.translate`` table).

    Variables are single capital letters and ops lower case, so renaming text is character translation.
    """
    return [(dict(zip(names, perm)), str.maketrans(dict(zip(names, perm)))) for perm in itertools.permutations(names)]


def canonical_renaming(left: str, right: str, tables: list[tuple[dict[str, str], dict[int, int]]]
                       ) -> tuple[tuple[str, ...], dict[str, str]]:
    """(key, mapping): the renaming (of :func:`renamings`) that makes the pair's texts, in sorted order,
    smallest, and those texts. A pair and its renamings (``A+B = B+A``, ``B+C = C+B``) get the same key."""
    return min(((tuple(sorted((left.translate(table), right.translate(table)))), mapping) for mapping, table in tables),
               key=lambda entry: entry[0])


def rename(template: Template, mapping: dict[str, str]) -> Template:
    """``template`` with its variables renamed by ``mapping``."""
    if isinstance(template, Var):
        return Var(mapping.get(template.name, template.name))
    if isinstance(template, Apply):
        return Apply(template.op, tuple(rename(a, mapping) for a in template.args), template.attrs)
    return template


def subterms(template: Template) -> set[Apply]:
    """Every op application inside ``template``, itself included."""
    return {part for part in walk(template) if isinstance(part, Apply)}


def substitute(template: Template, old: Template, new: Template) -> Template:
    """``template`` with every occurrence of ``old`` replaced by ``new``."""
    if template == old:
        return new
    if isinstance(template, Apply):
        return Apply(template.op, tuple(substitute(a, old, new) for a in template.args), template.attrs)
    return template


def is_trivial(left: Template, right: Template, values: dict[str, np.ndarray]) -> bool:
    """Whether a smaller candidate implies the pair, or the pair can be no rewrite rule:

    * same root op, all operands but one identical: the operands' own pair implies it;
    * a common subgraph E that can be replaced by an unused variable V in both sides and the pair
      stays equal on ``values`` (the fingerprint inputs): the smaller pair with V implies it;
    * each side has a variable the other lacks: neither side can be a rewrite's target.
    """
    used = variables(left) | variables(right)
    if not (variables(left) <= variables(right) or variables(right) <= variables(left)):
        return True
    if (isinstance(left, Apply) and isinstance(right, Apply) and left.op == right.op
            and left.attrs == right.attrs and sum(x != y for x, y in zip(left.args, right.args)) == 1):
        return True
    free = [v for v in values if v not in used]
    for common in (subterms(left) & subterms(right)) if free else ():
        fresh = Var(free[0])
        general = substitute(left, common, fresh), substitute(right, common, fresh)
        if fingerprint(evaluate_template(general[0], values)) == fingerprint(evaluate_template(general[1], values)):
            return True
    return False


def discover(ops: Sequence[str] = DEFAULT_OPS, max_ops: int = 2, names: Sequence[str] = VARIABLES,
             size: int = 4, seed: int = 0, trials: int = 16) -> Discovery:
    """Run the stages (see the module docstring) over ``ops`` with graphs of up to ``max_ops`` ops.

    names: the variables, single capital letters (renaming them is then translating characters).
    size: the variables are (size, size) float64 matrices for fingerprinting; verification varies the size.
    trials: random trials per candidate in verification.
    """
    unknown = [op for op in ops if op not in DISCOVERABLE]
    if unknown:
        raise ValueError(f"discover: ops {unknown} cannot be enumerated on square matrices; use {list(DISCOVERABLE)}")
    if max_ops < 1 or not names or not all(len(v) == 1 and v.isupper() for v in names):
        raise ValueError(f"discover: need max_ops >= 1 and single capital letters as variables, "
                         f"got {max_ops} and {list(names)}")
    result = Discovery(tuple(ops), max_ops, tuple(names))
    clock = time.perf_counter()

    def stage(name: str, count: int) -> None:
        nonlocal clock
        now = time.perf_counter()
        result.counts[name], result.seconds[name] = count, now - clock
        clock = now

    rng = np.random.default_rng(seed)
    values = {v: rng.uniform(-1.0, 1.0, (size, size)) for v in names}
    graphs = enumerate_graphs(ops, max_ops, values)
    stage("enumerated graphs", len(graphs))

    groups: dict[tuple, list[str]] = {}
    for text, (_, value) in graphs.items():
        groups.setdefault(fingerprint(value), []).append(text)
    groups = {key: group for key, group in groups.items() if len(group) > 1}
    stage("pairs with equal fingerprints", sum(len(g) * (len(g) - 1) // 2 for g in groups.values()))

    pairs = []
    for group in groups.values():
        smallest = min(group, key=lambda text: (len(ops_of(graphs[text][0])), len(text), text))
        pairs += [(smallest, text) for text in group if text != smallest]
    stage("candidates: each with its group's smallest", len(pairs))

    canonical: dict[tuple[str, ...], tuple[Template, Template]] = {}
    tables = renamings(names)
    for left, right in pairs:
        key, mapping = canonical_renaming(left, right, tables)
        if key not in canonical:
            canonical[key] = rename(graphs[left][0], mapping), rename(graphs[right][0], mapping)
    stage("after pruning renamings", len(canonical))

    kept = [(left, right) for left, right in canonical.values() if not is_trivial(left, right, values)]
    stage("after pruning trivial pairs", len(kept))

    for left, right in kept:
        source, target = (left, right) if isinstance(left, Apply) and variables(right) <= variables(left) else (right, left)
        verdict = verify_rule(Rule(source, target), trials=trials, seed=seed)
        if verdict:
            result.substitutions.append(Substitution(left, right, verdict.exact))
        else:
            result.rejected.append((Substitution(left, right), verdict))
    stage("verified (random trials)", len(result.substitutions))
    result.counts["  of which also exact on integers"] = sum(s.exact is True for s in result.substitutions)
    return result

"""Dependence analysis: may a compiler interchange loops, run a loop in parallel, or tile a band?

A perfect loop nest runs its body once per **iteration vector** (one entry per loop, outermost first),
in lexicographic order. Two accesses to one array element, at least one a write, make a **dependence**
from the iteration that runs first (*source*) to the later one (*sink*): **flow** (read after write),
**anti** (write after read) or **output** (write after write). Its **distance vector** ``sink - source``
is **lexicographically positive** (first non-zero entry positive); the loop of that entry **carries**
it. The zero vector (both accesses in one iteration, ordered by the body's statement order, which no
loop reordering changes) is loop-independent and dropped. Dependences must be **uniform**: the two
accesses have the same loop coefficients (``A[i, j]`` and ``A[i-1, j+1]``). A transformation is legal iff
every dependence keeps its direction (then it computes the same numbers; the converse can fail, see
:func:`legal_by_execution`):

* **permutation / interchange**: every permuted distance vector stays lexicographically positive;
* **parallel loop**: it carries no dependence (each vector is zero on it or carried by an outer loop);
* **tiling** a band (strip-mine + interchange): the band is *fully permutable*: every vector not
  carried by a loop outside the band is non-negative on the whole band.

**Reductions** such as ``C[i, j] += A[i, k] * B[k, j]`` (distances ``(0, 0, d)``) are ordinary dependences
here: a legal permutation or tiling still adds each ``C[i, j]``'s terms in increasing ``k``, so the floats
are bit-for-bit equal, and ``k`` is not parallel. (Compilers that declare ``+`` associative run ``k`` as a
tree reduction, which changes the rounding: another transformation, not a reordering of this nest.)
:func:`run_nest` executes a schedule in plain Python: the oracle of :func:`legal_by_execution`.
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

_NAME = r"[A-Za-z_]\w*"
_TERM = rf"(?:\d+\*{_NAME}|\d+|{_NAME})"
_AFFINE = re.compile(rf"[+-]?{_TERM}(?:[+-]{_TERM})*")
_ACCESS = re.compile(rf"({_NAME})((?:\[[^\[\]]*\])+)")


@dataclass(frozen=True)
class Access:
    """``array[index]``; each index is (coefficient per loop, outermost first; constant)."""

    array: str
    index: tuple[tuple[tuple[int, ...], int], ...]
    text: str

    def element(self, point: Sequence[int]) -> tuple[int, ...]:
        """The array element this access touches at iteration ``point``."""
        return tuple(sum(c * x for c, x in zip(coeffs, point)) + const for coeffs, const in self.index)


@dataclass(frozen=True)
class Statement:
    """``write = sum of products of reads`` (``+=`` also reads ``write`` first)."""

    text: str
    write: Access
    terms: tuple[tuple[Access, ...], ...]
    accumulate: bool

    @property
    def reads(self) -> tuple[Access, ...]:
        return (*itertools.chain(*self.terms), *([self.write] if self.accumulate else []))


def _affine(expr: str, loops: tuple[str, ...], where: str) -> tuple[tuple[int, ...], int]:
    text = expr.replace(" ", "")
    if not _AFFINE.fullmatch(text):
        raise ValueError(f"{where}: cannot read index {expr.strip()!r}; expected an affine expression "
                         f"of the loop variables like i-1, 2*j+1 or 3")
    coeffs, const = dict.fromkeys(loops, 0), 0
    for sign, scale, name in re.findall(rf"([+-]?)(?:(\d+)\*)?({_NAME}|\d+)", text):
        value = (-1 if sign == "-" else 1) * int(scale or 1)
        if name.isdigit():
            const += value * int(name)
        elif name in coeffs:
            coeffs[name] += value
        else:
            raise ValueError(f"{where}: unknown loop variable {name!r} (the loops are {', '.join(loops)})")
    return tuple(coeffs.values()), const


def _access(text: str, loops: tuple[str, ...], where: str) -> Access:
    match = _ACCESS.fullmatch(text.strip())
    if not match:
        raise ValueError(f"{where}: cannot read {text.strip()!r}; expected an array access like A[i-1, j+1] "
                         f"(a right-hand side is a sum of products of array reads)")
    subscripts = [s for group in re.findall(r"\[([^\[\]]*)\]", match[2]) for s in group.split(",")]
    return Access(match[1], tuple(_affine(s, loops, where) for s in subscripts), text.strip())


def _split_top(text: str, sep: str) -> list[str]:
    """Split ``text`` at ``sep`` outside brackets (``+`` also occurs inside ``A[i+1]``)."""
    parts, depth, start = [], 0, 0
    for pos, char in enumerate(text):
        depth += (char == "[") - (char == "]")
        if char == sep and depth == 0:
            parts.append(text[start:pos])
            start = pos + 1
    return parts + [text[start:]]


def _statement(text: str, loops: tuple[str, ...]) -> Statement:
    where = f"statement {text!r}"
    left, eq, right = text.partition("=")
    if not eq or "=" in right:
        raise ValueError(f"{where}: expected one '=' or '+=', as in A[i, j] = A[i-1, j] + B[i, j]")
    accumulate = left.rstrip().endswith("+")
    terms = tuple(tuple(_access(f, loops, where) for f in _split_top(t, "*")) for t in _split_top(right, "+"))
    return Statement(text, _access(left.rstrip().rstrip("+"), loops, where), terms, accumulate)


class LoopNest:
    """A perfect loop nest: ``loops`` maps each loop variable (outermost first) to its extent; the body
    runs ``statements`` in order, each ``"A[i, j] = A[i-1, j+1] + B[i, j] * C[j]"`` (``=`` or ``+=``, a
    sum of products of array reads; indices affine in the loop variables; ``A[i][j]`` also reads)."""

    def __init__(self, loops: Mapping[str, int], statements: str | Sequence[str]):
        if not loops or not all(isinstance(n, str) and re.fullmatch(_NAME, n) for n in loops):
            raise ValueError(f"loops must map loop variable names to extents, got {dict(loops)!r}")
        if not all(isinstance(n, int) and n >= 1 for n in loops.values()):
            raise ValueError(f"loop extents must be positive integers, got {dict(loops)!r}")
        self.loops = dict(loops)
        self.names, self.extents = tuple(loops), tuple(loops.values())
        texts = [statements] if isinstance(statements, str) else list(statements)
        if not texts:
            raise ValueError("a loop nest needs at least one statement")
        self.statements = tuple(_statement(t, self.names) for t in texts)
        ranks: dict[str, Access] = {}
        for access in self.accesses():
            first = ranks.setdefault(access.array, access)
            if len(first.index) != len(access.index):
                raise ValueError(f"array {access.array} is used with {len(first.index)} indices in {first.text} "
                                 f"but {len(access.index)} in {access.text}")

    def accesses(self) -> list[Access]:
        """Every access of the body: each statement's write, then its reads."""
        return [a for s in self.statements for a in (s.write, *s.reads)]

    def position(self, loop: str | int) -> int:
        """Position of a loop (0 = outermost), given its name or its position."""
        if loop in self.names:
            return self.names.index(loop)
        if isinstance(loop, int) and not isinstance(loop, bool) and 0 <= loop < len(self.names):
            return loop
        raise ValueError(f"unknown loop {loop!r} (the loops are {', '.join(self.names)})")

    def positions(self, order: Iterable[str | int] | None) -> tuple[int, ...]:
        """Loop positions of ``order`` (loop names or positions, outermost first; None: the nest's order)."""
        pos = tuple(range(len(self.names))) if order is None else tuple(self.position(o) for o in order)
        if sorted(pos) != list(range(len(self.names))):
            raise ValueError(f"order {tuple(order)!r} is not a permutation of the loops {self.names}")
        return pos

    def bounds(self) -> dict[str, tuple[tuple[int, int], ...]]:
        """Per array, the (lowest, highest) index each dimension reaches over the iteration space."""
        out: dict[str, list[tuple[int, int]]] = {}
        for access in self.accesses():
            reach = [(const + sum(min(0, c * (n - 1)) for c, n in zip(coeffs, self.extents)),
                      const + sum(max(0, c * (n - 1)) for c, n in zip(coeffs, self.extents)))
                     for coeffs, const in access.index]
            old = out.setdefault(access.array, reach)
            out[access.array] = [(min(a[0], b[0]), max(a[1], b[1])) for a, b in zip(old, reach)]
        return {name: tuple(b) for name, b in out.items()}

    def shapes(self) -> dict[str, tuple[int, ...]]:
        """Per array, the shape that holds every element the nest touches (index ``lowest`` stored at 0)."""
        return {name: tuple(hi - lo + 1 for lo, hi in b) for name, b in self.bounds().items()}

    def __str__(self) -> str:
        lines = [f"{'  ' * d}for {n} in range({e}):" for d, (n, e) in enumerate(zip(self.names, self.extents))]
        return "\n".join(lines + [f"{'  ' * len(self.names)}{s.text}" for s in self.statements])


class Dependence(NamedTuple):
    """``source`` access runs ``distance`` iterations before ``sink``; kind: flow, anti or output."""

    kind: str
    array: str
    source: str
    sink: str
    distance: tuple[int, ...]


def _distances(nest: LoopNest, x: Access, y: Access) -> list[tuple[int, ...]]:
    """All d with x at p and y at p + d touching one element, for p and p + d inside the nest."""
    coeffs = np.array([c for c, _ in x.index], dtype=np.int64).reshape(len(x.index), len(nest.names))
    if any(cx != cy for (cx, _), (cy, _) in zip(x.index, y.index)):
        raise ValueError(f"not a uniform dependence: {x.text} and {y.text} use different loop coefficients; "
                         f"this analysis handles indices that differ by constants only")
    delta = np.array([kx - ky for (_, kx), (_, ky) in zip(x.index, y.index)], dtype=np.int64)
    box = np.array(list(itertools.product(*(range(1 - n, n) for n in nest.extents))), dtype=np.int64)
    return [tuple(int(v) for v in d) for d in box[(box @ coeffs.T == delta).all(axis=1)]]


def dependences(nest: LoopNest) -> list[Dependence]:
    """Every loop-carried dependence of ``nest``, one per (kind, array, source, sink, distance), sorted."""
    accesses = [(a, k == 0) for s in nest.statements for k, a in enumerate((s.write, *s.reads))]
    kinds = {(True, False): "flow", (False, True): "anti", (True, True): "output"}
    found = set()
    for (x, x_writes), (y, y_writes) in itertools.combinations_with_replacement(accesses, 2):
        if x.array != y.array or not (x_writes or y_writes):
            continue
        for d in _distances(nest, x, y):
            if lexicographically_positive(d):
                found.add(Dependence(kinds[x_writes, y_writes], x.array, x.text, y.text, d))
            elif any(d):
                found.add(Dependence(kinds[y_writes, x_writes], x.array, y.text, x.text, tuple(-v for v in d)))
    return sorted(found)


def dependence_vectors(nest: LoopNest) -> set[tuple[int, ...]]:
    """The distance vectors of ``nest``'s loop-carried dependences (zero vector dropped), each realised
    by some pair of iterations inside the loop extents. A loop that an array's index leaves out adds
    every distance its extent allows: ``C[i, j]`` under loops i, j, k of 4 gives (0, 0, 1) .. (0, 0, 3)."""
    return {dep.distance for dep in dependences(nest)}


def lexicographically_positive(vector: Sequence[int]) -> bool:
    """True when the first non-zero entry is positive (False for the zero vector)."""
    return next((v > 0 for v in vector if v != 0), False)


def carried_by(vector: Sequence[int]) -> int | None:
    """Position of the loop that carries the dependence: its first non-zero entry (None: zero vector)."""
    return next((k for k, v in enumerate(vector) if v != 0), None)


def _checked(vectors: Iterable[Sequence[int]], depth: int | None = None) -> list[tuple[int, ...]]:
    out = [tuple(v) for v in vectors]
    depth = len(out[0]) if depth is None and out else depth
    for v in out:
        if len(v) != depth or not lexicographically_positive(v):
            raise ValueError(f"distance vector {v} must have {depth} entries and be lexicographically positive")
    return out


def permutation_is_legal(vectors: Iterable[Sequence[int]], order: Sequence[int]) -> bool:
    """May the loops run in ``order`` (``order[k]`` = old position of the new k-th loop)? Yes iff every
    permuted distance vector stays lexicographically positive."""
    if sorted(order) != list(range(len(order))):
        raise ValueError(f"order {tuple(order)} is not a permutation of 0..{len(order) - 1}")
    return all(lexicographically_positive([v[k] for k in order]) for v in _checked(vectors, len(order)))


def parallel_is_legal(vectors: Iterable[Sequence[int]], position: int) -> bool:
    """May the loop at ``position`` (0 = outermost) run its iterations in parallel (in any order)?
    Yes iff it carries no dependence."""
    vectors = _checked(vectors)
    depth = len(vectors[0]) if vectors else math.inf
    if not 0 <= position < depth:
        raise ValueError(f"loop position {position} is outside the nest (positions 0..{depth - 1})")
    return all(carried_by(v) != position for v in vectors)


def tiling_is_legal(vectors: Iterable[Sequence[int]], band: tuple[int, int] | None = None) -> bool:
    """May loops ``band = (start, stop)`` (default: all) be tiled, whatever the tile sizes? Yes iff they are
    fully permutable: each vector not carried outside the band (zero before ``start``) is non-negative on
    the band. (Particular sizes may work anyway: with distance (2, -1) and tiles 2 wide along the first
    loop, source and sink never share a tile row, so tiling keeps their order.)"""
    vectors = _checked(vectors)
    depth = len(vectors[0]) if vectors else math.inf
    start, stop = band if band is not None else (0, depth)
    if not 0 <= start < stop <= depth:
        raise ValueError(f"band {band} is not a range (start, stop) of loop positions 0..{depth - 1}")
    return all(any(v[:start]) or min(v[start:stop]) >= 0 for v in vectors)


def random_arrays(nest: LoopNest, seed: int = 0) -> dict[str, np.ndarray]:
    """float64 arrays, uniform in [0.5, 1.5), just large enough for every access of ``nest``."""
    rng = np.random.default_rng(seed)
    return {name: rng.uniform(0.5, 1.5, size=shape) for name, shape in nest.shapes().items()}


def run_nest(nest: LoopNest, order: Iterable[str | int] | None, arrays: Mapping[str, np.ndarray], *,
             tile: Mapping[str, int] | None = None, reverse: Iterable[str] = (),
             trace: dict | None = None) -> dict[str, np.ndarray]:
    """Execute ``nest`` on copies of ``arrays`` (shapes as :func:`random_arrays`; index ``lo`` of
    :meth:`LoopNest.bounds` is stored at 0), loops in ``order`` (names or positions; None: as written).

    tile: {loop: size}, loops adjacent in ``order``: strip-mined, their tile loops moved outside the band.
    reverse: loops that run backwards (a loop that carries no dependence may run in any order).
    A statement writes ``sum_t w_t * prod(reads of term t)`` (plus the old value for ``+=``), ``w_t``
    distinct constants, so running a dependent pair the other way round changes the numbers.
    trace: a dict to fill with ``{(statement number, iteration vector): value written}``.
    """
    pos, tile = nest.positions(order), dict(tile or {})
    if not all(isinstance(s, int) and s >= 1 for s in tile.values()):
        raise ValueError(f"tile sizes must be positive integers, got {tile}")
    flip = {nest.position(n) for n in ([reverse] if isinstance(reverse, str) else reverse)}
    sizes = {nest.position(n): s for n, s in tile.items()}
    band = [k for k, p in enumerate(pos) if p in sizes]
    if band and band != list(range(band[0], band[-1] + 1)):
        raise ValueError(f"tiled loops {list(tile)} must be adjacent in the order {[nest.names[p] for p in pos]}")

    def key(point: tuple[int, ...]) -> tuple[int, ...]:
        coords = [-point[p] if p in flip else point[p] for p in pos]
        start = band[0] if band else 0
        return tuple(coords[:start] + [coords[k] // sizes[pos[k]] for k in band] + coords[start:])

    bounds = nest.bounds()
    out = {name: np.array(arrays[name], dtype=np.float64) for name in bounds}
    for name, shape in nest.shapes().items():
        if out[name].shape != shape:
            raise ValueError(f"array {name} has shape {out[name].shape}, the nest needs {shape}")

    def at(access: Access, point: tuple[int, ...]) -> tuple[int, ...]:
        return tuple(e - lo for e, (lo, _) in zip(access.element(point), bounds[access.array]))

    for point in sorted(itertools.product(*(range(n) for n in nest.extents)), key=key):
        for number, s in enumerate(nest.statements):
            value = sum(math.prod(out[a.array][at(a, point)] for a in term) / (t + 1.5)
                        for t, term in enumerate(s.terms))
            target = at(s.write, point)
            out[s.write.array][target] = value + out[s.write.array][target] if s.accumulate else value
            if trace is not None:
                trace[number, point] = out[s.write.array][target]
    return out


def legal_by_execution(nest: LoopNest, order: Iterable[str | int] | None = None, *,
                       tile: Mapping[str, int] | None = None, reverse: Iterable[str] = (), seed: int = 0) -> bool:
    """Brute force: on random data, does this schedule make every statement instance write bit-for-bit the
    value it writes in the original order, and leave the same arrays?

    It compares results, not the order of accesses. Every schedule that keeps each dependence's direction
    passes (each instance reads the same values, and the same write comes last). The converse fails where
    a reversed dependence changes no number: in ``A[i + j] = B[i + j]`` the two writes of an element store
    the same value, so interchanging i and j reverses the output dependence (1, -1), which
    :func:`permutation_is_legal` refuses, and this returns True. With distinct values (random data, each
    term weighted differently) a reversed dependence almost always changes a value read or which write
    comes last. (Equal final arrays alone can hide a reversed dependence whose value is overwritten later:
    hence every written value is compared.)"""
    arrays, before, after = random_arrays(nest, seed), {}, {}
    start = run_nest(nest, None, arrays, trace=before)
    end = run_nest(nest, order, arrays, tile=tile, reverse=reverse, trace=after)
    return before == after and all(np.array_equal(start[name], end[name]) for name in start)

"""Randomness an answer must take from the generator it is given, and results compared bit for bit.

An answer that draws from NumPy's global RNG (``np.random.permutation``) instead of the ``rng`` passed
in still returns plausible results, so a test that checks only their statistics passes it; the
student's experiment is then not reproducible from its seed. :func:`deterministic` runs the answer
twice with the same seed and once with another, and checks the global generators were not touched.
"""

from __future__ import annotations

import contextlib
import math
import random
import struct
from typing import Any, Callable, Iterator

import numpy as np


def _bits(value: float) -> bytes:
    return struct.pack("<d", value)


def _difference(actual: Any, expected: Any, where: str) -> str | None:
    """Where ``actual`` and ``expected`` first differ (types, shapes, dtypes, bits), or None."""
    if type(actual) is not type(expected):
        return f"{where}: {type(actual).__name__} vs {type(expected).__name__}"
    if isinstance(actual, np.ndarray):
        if actual.dtype != expected.dtype or actual.shape != expected.shape:
            return f"{where}: {actual.dtype}{actual.shape} vs {expected.dtype}{expected.shape}"
        if actual.dtype.hasobject:
            return _difference(actual.tolist(), expected.tolist(), where)
        items = lambda a: np.ascontiguousarray(a).reshape(-1).view(np.uint8).reshape(a.size, a.dtype.itemsize)
        differs = np.flatnonzero((items(actual) != items(expected)).any(axis=1))
        if differs.size:
            first = int(differs[0])
            return f"{where}: element {first} differs ({actual.reshape(-1)[first]!r} vs {expected.reshape(-1)[first]!r})"
        return None
    if isinstance(actual, (list, tuple)):
        if len(actual) != len(expected):
            return f"{where}: length {len(actual)} vs {len(expected)}"
        for i, (a, e) in enumerate(zip(actual, expected)):
            found = _difference(a, e, f"{where}[{i}]")
            if found:
                return found
        return None
    if isinstance(actual, dict):
        if list(actual) != list(expected):
            return f"{where}: keys {list(actual)} vs {list(expected)}"
        for key in actual:
            found = _difference(actual[key], expected[key], f"{where}[{key!r}]")
            if found:
                return found
        return None
    if isinstance(actual, (float, np.floating)):
        same = _bits(float(actual)) == _bits(float(expected)) and np.dtype(type(actual)) == np.dtype(type(expected))
        return None if same else f"{where}: {actual!r} vs {expected!r}"
    return None if actual == expected else f"{where}: {actual!r} vs {expected!r}"


def assert_identical(actual: Any, expected: Any, what: str = "the result") -> None:
    """Fail unless the two are the same bit for bit: types, dtypes and shapes, every element's bits
    (so ``-0.0`` differs from ``0.0`` and NaN payloads count), recursively through lists, tuples, dicts."""
    found = _difference(actual, expected, what)
    if found:
        raise AssertionError(f"not identical: {found}")


def identical(actual: Any, expected: Any) -> bool:
    """True if :func:`assert_identical` would pass."""
    return _difference(actual, expected, "") is None


def _global_states() -> tuple:
    kind, keys, pos, has_gauss, cached = np.random.get_state()
    return (kind, keys.tobytes(), pos, has_gauss, cached if not math.isnan(cached) else "nan"), random.getstate()


@contextlib.contextmanager
def global_rng_untouched() -> Iterator[None]:
    """Fail if the block draws from (or seeds) NumPy's global RNG or Python's ``random`` module."""
    before = _global_states()
    yield
    after = _global_states()
    if after[0] != before[0]:
        raise AssertionError("the answer draws from NumPy's global RNG (np.random.*): draw from the generator "
                             "it is given instead, so that its seed decides the result")
    if after[1] != before[1]:
        raise AssertionError("the answer draws from Python's global `random` module: draw from the generator "
                             "it is given instead, so that its seed decides the result")


def deterministic(run: Callable[[Any], Any], rng_factory: Callable[[int], Any] = np.random.default_rng,
                  seeds: tuple[int, int] = (0, 1), *, seed_matters: bool = True, what: str = "the result") -> Any:
    """``run(rng_factory(seeds[0]))``, after checking the answer's randomness comes from that generator.

    ``run`` calls the answer with the generator it is given and returns what the test compares. The
    checks: two runs with the same seed give identical results (:func:`assert_identical`), NumPy's and
    Python's global generators are untouched (:func:`global_rng_untouched`), and, if ``seed_matters``,
    a run with ``seeds[1]`` gives a different result. Returns the first run's result.
    """
    with global_rng_untouched():
        first = run(rng_factory(seeds[0]))
        again = run(rng_factory(seeds[0]))
        other = run(rng_factory(seeds[1])) if seed_matters else None
    found = _difference(again, first, what)
    if found:
        raise AssertionError(f"two runs with the same seed differ ({found}): take every random draw from the "
                             "generator passed in")
    if seed_matters and identical(other, first):
        raise AssertionError(f"{what} is the same for seeds {seeds[0]} and {seeds[1]}: the generator passed in "
                             "is not used")
    return first

"""Exact result types: a test compares a result only once it knows what the result is.

An answer can return an object whose ``==`` always agrees (a subclass of ``int`` or ``tuple`` with
its own ``__eq__``, or any object at all), and a test that only compares would pass it. These
checks accept exactly the built-in or numpy types an exercise asks for, never a subclass, and hand
back a plain value that compares honestly.
"""

from __future__ import annotations

import numpy as np

#: Integer types an exercise asking for "an int" accepts (bool is not one).
INTEGERS = (int, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64)
#: Floating types an exercise asking for "a float" accepts.
FLOATS = (float, np.float16, np.float32, np.float64)


def exactly(value, *types: type, what: str = "the result"):
    """``value`` if its type is one of ``types`` (identity, not ``isinstance``); else ``AssertionError``."""
    if not any(type(value) is kind for kind in types):
        names = " or ".join(kind.__name__ for kind in types)
        raise AssertionError(f"{what} must be {names}, got {type(value).__name__}")
    return value


def int_tuple(value, what: str = "the result") -> tuple[int, ...]:
    """``value`` as a plain tuple of plain ints, if it is a tuple of integers; else ``AssertionError``."""
    exactly(value, tuple, what=what)
    return tuple(int(exactly(item, *INTEGERS, what=f"{what}[{i}]")) for i, item in enumerate(value))

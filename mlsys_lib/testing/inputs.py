"""Inputs an answer must leave alone, and results that must not share their memory.

A function that updates the caller's arrays in place often returns the right values: the test that
only compares results passes it, and the student's training loop, which still holds the old array,
breaks later. :func:`frozen` makes the inputs read-only while the answer runs, so the first write
raises where it happens; :func:`assert_unaliased` checks that a result is a new array and not a view
of an input the caller may change next.
"""

from __future__ import annotations

import ast
import contextlib
import linecache
import types
from typing import Any, Iterator

import numpy as np

#: Fragments of the errors numpy (``x[...] = v``, ``x -= v``, ``out=x``) and Numba (a write in an
#: ``@njit`` function) raise when an array is read-only.
_READ_ONLY_ERRORS = ("read-only", "readonly")


def arrays_in(value: Any) -> Iterator[np.ndarray]:
    """Every numpy array ``value`` holds: itself, the items of lists, tuples, sets and dicts (recursively),
    and the array attributes of any other object (one level: a strided array's ``storage``, a tensor's
    ``value``)."""
    if isinstance(value, np.ndarray):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from arrays_in(item)
    elif isinstance(value, (list, tuple, set, frozenset)):
        for item in value:
            yield from arrays_in(item)
    elif not isinstance(value, (type, types.ModuleType, types.FunctionType)):
        for item in _attributes(value):
            if isinstance(item, np.ndarray):
                yield item


def _attributes(value: Any) -> list:
    """The values of an object's instance attributes, in its ``__dict__`` and its ``__slots__``."""
    found = list(getattr(value, "__dict__", {}).values())
    for kind in type(value).__mro__:
        slots = kind.__dict__.get("__slots__", ())
        for name in [slots] if isinstance(slots, str) else slots:
            if name not in ("__dict__", "__weakref__") and hasattr(value, name):
                found.append(getattr(value, name))
    return found


def _owner(array: np.ndarray, inputs: dict[str, list[np.ndarray]]) -> str | None:
    """The name of the input whose memory ``array`` shares, if any."""
    for name, arrays in inputs.items():
        if any(np.shares_memory(array, held) for held in arrays if held.size and array.size):
            return name
    return None


def _written_name(entry: types.TracebackType, inputs: dict[str, list[np.ndarray]]) -> tuple[str | None, str]:
    """(the input the failing line writes into, the line), read from the innermost frame of the answer."""
    frame = entry.tb_frame
    line = linecache.getline(frame.f_code.co_filename, entry.tb_lineno).strip()
    try:
        statement = ast.parse(line).body[0]
    except (SyntaxError, IndexError):
        return None, line
    targets = {ast.Assign: lambda s: s.targets, ast.AugAssign: lambda s: [s.target]}.get(type(statement))
    names = []
    for target in (targets(statement) if targets else []):
        while isinstance(target, (ast.Subscript, ast.Attribute)):
            target = target.value
        if isinstance(target, ast.Name):
            names.append(target.id)
    if isinstance(statement, ast.Expr):  # np.add(a, b, out=x), x.fill(0), np.copyto(x, ...)
        names += [node.id for node in ast.walk(statement) if isinstance(node, ast.Name)]
    for name in names:
        candidate = frame.f_locals.get(name, frame.f_globals.get(name))
        for array in arrays_in(candidate):
            owner = _owner(array, inputs)
            if owner is not None:
                return owner, line
    return None, line


def _innermost_answer_entry(traceback: types.TracebackType | None) -> types.TracebackType | None:
    """The innermost entry of the traceback whose frame is not numpy's or Numba's own code."""
    entry = None
    while traceback is not None:
        module = traceback.tb_frame.f_globals.get("__name__", "")
        if not module.startswith(("numpy", "numba")):
            entry = traceback
        traceback = traceback.tb_next
    return entry


@contextlib.contextmanager
def frozen(**inputs: Any) -> Iterator[None]:
    """Inside the block the arrays of each named input are read-only; a write fails the test, naming it.

    ``inputs`` maps the argument's name, as the exercise calls it, to the value passed (an array, a
    list or dict of arrays, an object holding arrays: see :func:`arrays_in`). A write into any of them
    (``x -= y``, ``x[i] = v``, ``out=x``, a write in an ``@njit`` function) raises ``AssertionError``
    naming the input and quoting the line. The arrays are writeable again after the block. Example::

        with frozen(param=theta, grad=g):
            new_theta = sgd_step(theta, g, lr=0.1)   # fails if sgd_step does theta -= lr * g
    """
    held = {name: list(arrays_in(value)) for name, value in inputs.items()}
    arrays = {id(a): a for group in held.values() for a in group}.values()
    was_writeable = [(array, array.flags.writeable) for array in arrays]
    for array, _ in was_writeable:
        array.flags.writeable = False
    try:
        yield
    except Exception as error:  # numpy raises ValueError, Numba its TypingError at compile time
        if not any(fragment in str(error) for fragment in _READ_ONLY_ERRORS):
            raise
        entry = _innermost_answer_entry(error.__traceback__)
        name, line = _written_name(entry, held) if entry is not None else (None, "")
        which = f"its input {name!r}" if name else f"one of its inputs ({', '.join(held)})"
        where = f" at `{line}`" if line else ""
        raise AssertionError(f"the answer writes into {which}{where}; it must leave the caller's arrays "
                             f"unmodified (work on a copy, or build a new array)") from error
    finally:
        # arrays that own their memory first: numpy refuses to make a view writeable while its base is read-only
        for array, writeable in sorted(was_writeable, key=lambda item: item[0].base is not None):
            if writeable:
                array.flags.writeable = True


def assert_unaliased(result: Any, what: str = "the result", **inputs: Any) -> None:
    """Fail if any array of ``result`` shares memory with an array of a named input.

    A view of the input looks right until the caller changes the input (the next optimizer step, the
    next rank's buffer) and the "result" changes with it.
    """
    held = {name: list(arrays_in(value)) for name, value in inputs.items()}
    for array in arrays_in(result):
        owner = _owner(array, held)
        if owner is not None:
            raise AssertionError(f"{what} shares memory with the input {owner!r}: return a new array, "
                                 "not a view of an argument")

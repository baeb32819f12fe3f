"""The reference guard: an exercise's answer must not merely call the library's reference.

``mlsys_lib`` holds finished implementations of what the labs ask for. While a test grades an
exercise it wraps the calls in ``with reference_guard(ref, ...):``; inside, each reference raises
:class:`ReferenceUsedError`. The guard swaps the function's *code object*, so it also catches an
answer that imported the reference under another name before the test ran.
"""

from __future__ import annotations

import contextlib
import types
from typing import Callable, Iterator


class ReferenceUsedError(AssertionError):
    """An exercise answer called the library's finished implementation instead of its own."""


def _qualified_name(func: types.FunctionType) -> str:
    return f"{func.__module__}.{func.__qualname__}"


def _raising_code(func: types.FunctionType) -> types.CodeType:
    """A code object that raises ReferenceUsedError naming ``func``, with ``func``'s free variables."""
    message = (f"this answer calls the library's reference {_qualified_name(func)}; "
               "the exercise asks you to write it yourself")
    freevars = func.__code__.co_freevars  # the new code must close over as many cells
    lines = ["def _outer():", *(f"    {name} = None" for name in freevars),
             "    def guarded(*args, **kwargs):", *(f"        {name}" for name in freevars),
             f"        raise __import__('mlsys_lib.testing.guard', fromlist=['_']).ReferenceUsedError({message!r})",
             "    return guarded"]
    source = "\n".join(lines) + "\n"
    namespace: dict = {}
    exec(compile(source, f"<reference guard of {_qualified_name(func)}>", "exec"), namespace)
    return namespace["_outer"]().__code__


def _as_function(reference: Callable) -> types.FunctionType:
    func = getattr(reference, "__func__", reference)  # bound or class methods
    if isinstance(func, property):
        func = func.fget
    if not isinstance(func, types.FunctionType):
        raise TypeError(f"reference_guard guards plain Python functions, not {type(reference).__name__}: "
                        f"{reference!r} (wrap a compiled kernel in a Python function and guard that)")
    return func


@contextlib.contextmanager
def reference_guard(*references: Callable) -> Iterator[None]:
    """Make every function in ``references`` raise :class:`ReferenceUsedError` inside the block.

    Example::

        with reference_guard(mlsys_lib.tensor.compact_strides):
            assert compact_strides((2, 3)) == (3, 1)   # the student's function
    """
    functions = [_as_function(r) for r in references]
    saved = [f.__code__ for f in functions]
    try:
        for func in functions:
            func.__code__ = _raising_code(func)
        yield
    finally:
        for func, code in zip(functions, saved):
            func.__code__ = code

"""The reference guard: an exercise's answer must not merely call the library's reference.

``mlsys_lib`` holds finished implementations of what the labs ask for. While a test grades an
exercise it wraps the calls in ``with reference_guard(ref, ...):``; inside, each reference raises
:class:`ReferenceUsedError`. The guard swaps the function's *code object*, so it also catches an
answer that imported the reference under another name before the test ran.

When exercise B builds on exercise A (``compact`` calls ``compact_strides``), B's tests grade B on
the *reference* A with ``with reference_parts(compact, compact_strides=T.compact_strides):``, so a
mistake in A costs A's points once and not B's as well.
"""

from __future__ import annotations

import contextlib
import functools
import types
from typing import Callable, Iterator


class ReferenceUsedError(AssertionError):
    """An exercise answer called the library's finished implementation instead of its own."""


def _qualified_name(func: types.FunctionType) -> str:
    return f"{func.__module__}.{func.__qualname__}"


def _raising_code(func: types.FunctionType) -> types.CodeType:
    """A code object that raises ReferenceUsedError naming ``func``, with ``func``'s free variables."""
    return _raising_code_for(_qualified_name(func), func.__code__.co_freevars)


@functools.cache
def _raising_code_for(name: str, freevars: tuple[str, ...]) -> types.CodeType:
    """:func:`_raising_code` of the function called ``name`` closing over ``freevars``, compiled once:
    a test that enters the guard in a loop (Lab 10's speculative sampling, thousands of draws) spent
    most of its time compiling it again."""
    message = f"this answer calls the library's reference {name}; the exercise asks you to write it yourself"
    lines = ["def _outer():", *(f"    {var} = None" for var in freevars),
             "    def guarded(*args, **kwargs):", *(f"        {var}" for var in freevars),
             f"        raise __import__('mlsys_lib.testing.guard', fromlist=['_']).ReferenceUsedError({message!r})",
             "    return guarded"]
    source = "\n".join(lines) + "\n"
    namespace: dict = {}
    exec(compile(source, f"<reference guard of {name}>", "exec"), namespace)
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


def _working_copy(reference: Callable) -> Callable:
    """A copy of ``reference`` holding its code now, so a ``reference_guard`` entered later spares it."""
    func = getattr(reference, "__func__", reference)
    if not isinstance(func, types.FunctionType):
        return reference
    copy = types.FunctionType(func.__code__, func.__globals__, func.__name__, func.__defaults__, func.__closure__)
    copy.__kwdefaults__, copy.__qualname__, copy.__doc__ = func.__kwdefaults__, func.__qualname__, func.__doc__
    copy.__module__ = func.__module__
    return copy


@contextlib.contextmanager
def reference_parts(answer: Callable, **parts: Callable) -> Iterator[None]:
    """Inside the block, the global names ``answer`` calls (other exercises' answers) are the given references.

    ``answer`` is the function under test; ``parts`` maps the names of the exercises it builds on to
    the library's references for them. The names are set in ``answer``'s module globals (the
    notebook's namespace) and put back afterwards, also when the block raises; a name the notebook
    did not define is removed again. Each reference is replaced by a copy made on entry, so a
    ``reference_guard`` inside the block, which may guard the same reference against *direct* calls,
    leaves the copy working. Example::

        with reference_parts(compact, compact_strides=T.compact_strides):
            y = compact(x)   # the student's compact, on the library's compact_strides
    """
    namespace = getattr(getattr(answer, "__func__", answer), "__globals__", None)
    if namespace is None:
        raise TypeError(f"reference_parts needs a Python function to grade, not {type(answer).__name__}: {answer!r}")
    missing = object()
    saved = {name: namespace.get(name, missing) for name in parts}
    try:
        namespace.update({name: _working_copy(part) for name, part in parts.items()})
        yield
    finally:
        for name, value in saved.items():
            if value is missing:
                namespace.pop(name, None)
            else:
                namespace[name] = value

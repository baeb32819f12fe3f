"""Static checks of an answer's code: what it calls, not what it returns.

An answer can hide work in the functions it calls: an ``@njit`` helper that does ``A @ B``, a
helper of that helper, a kernel imported from ``mlsys_lib``. :func:`called_functions` follows
every name the answer's code reads from its globals or closure cells to the Python function
behind it (a Numba dispatcher stands for its ``py_func``), recursively, so the checks read all
the code that runs, not only the answer's own.
"""

from __future__ import annotations

import dis
import operator
import types
from typing import Any, Iterator

import numpy as np

#: numpy/BLAS entry points that would do a matmul exercise's work for it, by attribute name.
LIBRARY_MATMULS = frozenset({"dot", "matmul", "einsum", "tensordot", "inner", "vdot", "multi_dot"})
#: The same functions as objects, caught also when imported under another name (``from numpy import dot as d``).
_MATMUL_OBJECTS = (np.dot, np.matmul, np.einsum, np.tensordot, np.inner, np.vdot, np.linalg.multi_dot,
                   operator.matmul, operator.imatmul)


def _code_objects(code: types.CodeType):
    yield code
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from _code_objects(const)


def python_function(value: Any) -> types.FunctionType | None:
    """The Python function behind ``value``: itself, a Numba dispatcher's ``py_func``, else None."""
    if isinstance(value, types.FunctionType):
        return value
    inner = getattr(value, "py_func", None)
    return inner if isinstance(inner, types.FunctionType) else None


def references(func: types.FunctionType) -> Iterator[tuple[dict | types.CellType, str, Any]]:
    """``(holder, name, value)`` for each global and closure cell the code of ``func`` reads.

    ``holder`` is ``func.__globals__`` (``holder[name]`` is the value) or the closure cell
    (``holder.cell_contents``). Names the code uses as attributes are included where a global of that
    name exists: reading too much is safe, missing a callee is not.
    """
    names = set().union(*(code.co_names for code in _code_objects(func.__code__)))
    for name in sorted(names & func.__globals__.keys()):
        yield func.__globals__, name, func.__globals__[name]
    for name, cell in zip(func.__code__.co_freevars, func.__closure__ or ()):
        try:
            yield cell, name, cell.cell_contents
        except ValueError:  # a cell not yet filled
            continue


def called_functions(func: Any) -> list[types.FunctionType]:
    """The Python function of ``func`` and of everything it can call, each once (cycles included).

    Followed: the globals and closure cells its code reads that are Python functions or Numba
    dispatchers, recursively. Not followed: methods, functions held in containers, builtins.
    """
    found: dict[int, types.FunctionType] = {}
    pending = [python_function(func)]
    while pending:
        current = pending.pop()
        if current is None or id(current) in found:
            continue
        found[id(current)] = current
        pending.extend(python_function(value) for _, _, value in references(current))
    return list(found.values())


def assert_loops_only(func) -> None:
    """Fail unless ``func`` is Numba-compiled and computes its product without ``@`` or a library matmul.

    Reads ``func``'s code and that of every function it calls (:func:`called_functions`); a call
    into ``mlsys_lib`` itself fails too. Raises ``AssertionError`` naming what was found and where.
    """
    python_func = getattr(func, "py_func", None)
    if python_func is None:
        raise AssertionError(f"{getattr(func, '__name__', func)} must be compiled with numba's @njit")
    for callee in called_functions(func):
        where = python_func.__name__
        if callee is not python_func:
            where = f"{python_func.__name__} calls {callee.__name__}, which"
            if (callee.__module__ or "").split(".")[0] == "mlsys_lib":
                raise AssertionError(f"{python_func.__name__} calls the library's {callee.__module__}."
                                     f"{callee.__qualname__}: write the loops yourself")
        for code in _code_objects(callee.__code__):
            used = LIBRARY_MATMULS.intersection(code.co_names)
            if used:
                raise AssertionError(f"{where} calls {', '.join(sorted(used))}: write the loops yourself")
            if any(i.opname == "BINARY_OP" and i.argrepr in ("@", "@=") for i in dis.get_instructions(code)):
                raise AssertionError(f"{where} uses the @ operator: write the loops yourself")
        for _, name, value in references(callee):
            if any(value is matmul for matmul in _MATMUL_OBJECTS):
                raise AssertionError(f"{where} calls {name}, numpy's {getattr(value, '__name__', name)}: "
                                     "write the loops yourself")

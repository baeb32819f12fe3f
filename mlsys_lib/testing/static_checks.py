"""Static checks of an answer's code: what it calls, not what it returns."""

from __future__ import annotations

import dis
import types

#: numpy/BLAS entry points that would do a matmul exercise's work for it.
LIBRARY_MATMULS = frozenset({"dot", "matmul", "einsum", "tensordot", "inner", "vdot", "multi_dot"})


def _code_objects(code: types.CodeType):
    yield code
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from _code_objects(const)


def assert_loops_only(func) -> None:
    """Fail unless ``func`` is Numba-compiled and computes its product without ``@`` or a library matmul.

    Raises ``AssertionError`` naming what was found.
    """
    python_func = getattr(func, "py_func", None)
    if python_func is None:
        raise AssertionError(f"{getattr(func, '__name__', func)} must be compiled with numba's @njit")
    for code in _code_objects(python_func.__code__):
        used = LIBRARY_MATMULS.intersection(code.co_names)
        if used:
            raise AssertionError(f"{python_func.__name__} calls {', '.join(sorted(used))}: write the loops yourself")
        if any(i.opname == "BINARY_OP" and i.argrepr in ("@", "@=") for i in dis.get_instructions(code)):
            raise AssertionError(f"{python_func.__name__} uses the @ operator: write the loops yourself")

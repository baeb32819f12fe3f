"""Counted cache traffic of an answer's loops: the cost a tiling exercise is about, not only its values.

A "tiled" loop nest that ignores its tile computes the right values; only its memory traffic tells
it apart. :func:`count_misses` runs the *Python* code of a Numba answer (``py_func``) on arrays that
report every element they read or write to a model cache (:class:`~mlsys_lib.tensor.cache.LineCache`),
and returns the cache with its counted misses. The arrays the answer allocates through ``np``
(``np.zeros``, ``np.empty``, ...) report too; so do the arrays seen through the ``@njit`` helpers it
calls, which run as Python as well. Python runs about a million accesses a second: count small sizes.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import types
from typing import Any, Iterator

import numpy as np

from ..tensor.cache import LineCache
from .static_checks import called_functions, python_function, references

#: numpy functions whose new array reports its accesses (the answer's output, its local buffers).
_ALLOCATORS = frozenset({"zeros", "empty", "ones", "full", "zeros_like", "empty_like", "ones_like", "full_like"})


class LoggedArray(np.lib.mixins.NDArrayOperatorsMixin):
    """A numpy array (``.array``) that reports each element read or written to ``cache``.

    ``x[i, j]`` reads one element; ``x[key] = v`` writes every element ``key`` selects; ``x[i]`` or
    ``x[a:b]`` is a logged view that touches nothing until its elements are read (``x[i][j]`` reads one
    element, as ``x[i, j]`` does); arithmetic on a logged array reads all of it and writes all of an
    ``out=`` or ``+=`` target. Elements are touched at their row-major byte address in the array
    called ``name``. Other attributes (``shape``, ``dtype``, ``T``, ``sum()``, ...) are the array's and
    report nothing.
    """

    def __init__(self, array: np.ndarray, name: str, cache: LineCache, positions: np.ndarray | None = None):
        if positions is None:  # a new array: positions 0, 1, ... in row-major order
            array = np.array(array, order="C")
            positions = np.arange(array.size).reshape(array.shape)
        self.array, self._positions, self._name, self._cache = array, positions, name, cache

    def _touch(self, key: Any = Ellipsis) -> None:
        itemsize, positions = self.array.itemsize, self._positions
        if type(key) is tuple and len(key) == positions.ndim:  # one element: the fast path
            try:
                self._cache.touch(self._name, positions.item(*key) * itemsize)
                return
            except TypeError:  # a slice in the key
                pass
        for position in np.ravel(positions[key]):
            self._cache.touch(self._name, int(position) * itemsize)

    def __getitem__(self, key: Any) -> Any:
        value = self.array[key]
        if isinstance(value, np.ndarray):
            return LoggedArray(value, self._name, self._cache, self._positions[key])
        self._touch(key)
        return value

    def __setitem__(self, key: Any, value: Any) -> None:
        self._touch(key)
        self.array[key] = value

    def __len__(self) -> int:
        return len(self.array)

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        self._touch()
        return self.array if dtype is None else self.array.astype(dtype)

    def __array_ufunc__(self, ufunc: np.ufunc, method: str, *inputs: Any, out: tuple | None = None, **kwargs: Any):
        inputs = tuple(np.asarray(x) if isinstance(x, LoggedArray) else x for x in inputs)  # reads them
        if out is not None:
            for target in out:
                if isinstance(target, LoggedArray):
                    target._touch()
            kwargs["out"] = tuple(t.array if isinstance(t, LoggedArray) else t for t in out)
        result = getattr(ufunc, method)(*inputs, **kwargs)
        return out[0] if out is not None and len(out) == 1 else result

    def __getattr__(self, name: str) -> Any:
        # Not numpy's protocols (``__array_interface__`` would hand numpy the memory unlogged), and not
        # ``array`` itself while a copy is being made.
        if name.startswith("__") or name == "array":
            raise AttributeError(name)
        return getattr(self.array, name)


class _LoggingNumpy:
    """``numpy`` as the answer sees it while counted: the allocators return :class:`LoggedArray`s."""

    def __init__(self, cache: LineCache):
        self._cache, self._made = cache, 0

    def __getattr__(self, name: str) -> Any:
        value = getattr(np, name)
        return functools.partial(self._allocate, value) if name in _ALLOCATORS else value

    def _allocate(self, make, *args, **kwargs) -> LoggedArray:
        args = [arg.array if isinstance(arg, LoggedArray) else arg for arg in args]
        self._made += 1
        return LoggedArray(make(*args, **kwargs), f"new{self._made}", self._cache)


@contextlib.contextmanager
def _as_python(func: Any, numpy_stand_in: Any) -> Iterator[None]:
    """Inside the block, the functions ``func`` calls see Python functions for their Numba dispatchers
    and ``numpy_stand_in`` for ``numpy``, in their globals and closure cells; all put back after."""
    saved = []
    for function in called_functions(func):
        for holder, name, value in references(function):
            if value is np:
                replacement = numpy_stand_in
            elif not isinstance(value, types.FunctionType) and python_function(value) is not None:
                replacement = python_function(value)
            else:
                continue
            saved.append((holder, name, value))
            _set(holder, name, replacement)
    try:
        yield
    finally:
        for holder, name, value in reversed(saved):
            _set(holder, name, value)


def _set(holder: dict | types.CellType, name: str, value: Any) -> None:
    if isinstance(holder, dict):
        holder[name] = value
    else:
        holder.cell_contents = value


def count_misses(func: Any, *args: Any, cache_bytes: int, line_bytes: int = 64) -> LineCache:
    """Run ``func``'s Python code on ``args`` against an LRU cache; the cache, with its counted misses.

    ``func`` is a Numba dispatcher (its ``py_func`` runs) or a Python function. Each numpy array in
    ``args`` is copied into a :class:`LoggedArray` named after its parameter (``cache.misses["B"]``);
    arrays made by ``np.zeros`` and the like are ``"new1"``, ``"new2"``, ... in the order made. What an
    answer reads some other way (through ``A.T``, ``A.copy()``, ``A.sum()``, or an array made by a
    ``zeros`` imported from numpy by name) is not counted: the count errs low, never high. Example::

        cache = count_misses(matmul_tiled, A, B, 8, cache_bytes=4096)
        assert cache.total_misses <= budget
    """
    cache = LineCache(cache_bytes, line_bytes)
    python = python_function(func)
    names = list(inspect.signature(python).bind(*args).arguments)
    logged = [LoggedArray(arg, name, cache) if isinstance(arg, np.ndarray) else arg for name, arg in zip(names, args)]
    with _as_python(func, _LoggingNumpy(cache)):
        python(*logged)
    return cache

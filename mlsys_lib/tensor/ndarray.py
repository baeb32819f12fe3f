"""NDArray: the lecture's tensor data structure, a strided view over flat storage.

::

    A[i0, ..., i_{n-1}] = A.storage[A.offset + i0*A.strides[0] + ... + i_{n-1}*A.strides[n-1]]

Views -- :meth:`~NDArray.reshape`, :meth:`~NDArray.permute`, :meth:`~NDArray.transpose`,
:attr:`~NDArray.T`, :meth:`~NDArray.broadcast_to`, indexing ``A[key]``, :meth:`~NDArray.as_strided`
-- build a new ``(shape, strides, offset)`` over the *same* storage object and never copy. A view
can be non-contiguous; :meth:`~NDArray.compact` copies its elements into fresh row-major storage.

Arithmetic (``+ - * / **``, comparisons, ``exp``/``log``/``tanh``, reductions) runs the Numba kernels
of :mod:`~mlsys_lib.tensor.kernels`, which read strided, broadcast operands without copying them.
``@`` uses :func:`~mlsys_lib.tensor.matmul.matmul_tiled`. Dtypes are promoted as numpy does; Python
scalars take the array's dtype when they fit (numpy 2's rules).
"""

from __future__ import annotations

import functools
import math
import operator
from typing import Any, Callable, Iterable, Iterator

import numpy as np

from . import kernels
from .matmul import matmul_tiled
from .strides import (as_shape, broadcast_shape, broadcast_strides, compact_strides, is_compact,
                      reshape_strides, slice_params)

__all__ = ["NDArray", "array", "from_numpy", "maximum", "minimum", "DTYPES"]

#: The dtypes an NDArray's storage may have.
DTYPES = tuple(np.dtype(t) for t in (np.bool_, np.int32, np.int64, np.float32, np.float64))
_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))


def _check_dtype(dtype: Any) -> np.dtype:
    dtype = np.dtype(dtype)
    if dtype not in DTYPES:
        raise TypeError(f"NDArray supports dtypes {', '.join(map(str, DTYPES))}; got {dtype}")
    return dtype


def _int64s(values: Iterable[int]) -> np.ndarray:
    """Shapes and strides as the kernels take them: a 1-D int64 array (length ndim)."""
    return np.array(tuple(values), dtype=np.int64)


def _normalize_axis(axis: Any, ndim: int) -> int:
    axis = operator.index(axis)
    if not -ndim <= axis < ndim:
        raise ValueError(f"axis {axis} is out of bounds for an array of dimension {ndim}")
    return axis % ndim


def _varargs(args: tuple) -> tuple:
    """Accept both ``f(2, 3)`` and ``f((2, 3))``."""
    return tuple(args[0]) if len(args) == 1 and isinstance(args[0], Iterable) else args


class NDArray:
    """An n-dimensional strided view: ``storage`` (1-D numpy array), ``shape``, ``strides``, ``offset``.

    Strides and offset count elements, not bytes. ``NDArray(storage, shape, strides=None, offset=0)``
    (or :meth:`make`) checks that every element the view can reach lies inside the storage;
    ``strides=None`` means compact (row-major). Negative and zero strides are allowed.
    """

    __slots__ = ("_storage", "_shape", "_strides", "_offset")
    __array_ufunc__ = None  # numpy operators defer to NDArray's reflected methods (np_array + A)
    __hash__ = None  # == is elementwise

    def __init__(self, storage: np.ndarray, shape: Iterable[int], strides: Iterable[int] | None = None,
                 offset: int = 0):
        if not isinstance(storage, np.ndarray):
            raise TypeError(f"storage must be a 1-D numpy array, got {type(storage).__name__}")
        if storage.ndim != 1 or not storage.flags.c_contiguous:
            raise ValueError(f"storage must be a contiguous 1-D numpy array, got shape {storage.shape} "
                             f"with byte strides {storage.strides}")
        _check_dtype(storage.dtype)
        shape = as_shape(shape)
        strides = compact_strides(shape) if strides is None else tuple(operator.index(s) for s in strides)
        offset = operator.index(offset)
        if len(strides) != len(shape):
            raise ValueError(f"strides {strides} must have one entry per axis of shape {shape}")
        where = f"shape {shape}, strides {strides}, offset {offset}"
        if math.prod(shape) == 0:
            if not 0 <= offset <= storage.size:
                raise ValueError(f"the view ({where}) starts outside a storage of size {storage.size}")
        else:
            low = offset + sum(min(0, (n - 1) * s) for n, s in zip(shape, strides))
            high = offset + sum(max(0, (n - 1) * s) for n, s in zip(shape, strides))
            if low < 0 or high >= storage.size:
                raise ValueError(f"the view ({where}) reaches storage positions {low}..{high}, outside "
                                 f"a storage of size {storage.size} (valid positions 0..{storage.size - 1})")
        self._storage, self._shape, self._strides, self._offset = storage, shape, strides, offset

    @classmethod
    def make(cls, storage: np.ndarray, shape: Iterable[int], strides: Iterable[int] | None = None,
             offset: int = 0) -> NDArray:
        """The lecture's constructor name; same as ``NDArray(storage, shape, strides, offset)``."""
        return cls(storage, shape, strides, offset)

    # ---- the data structure -------------------------------------------------------------------

    @property
    def storage(self) -> np.ndarray:
        """The flat 1-D numpy array that holds the elements (shared by all views of it)."""
        return self._storage

    @property
    def shape(self) -> tuple[int, ...]:
        return self._shape

    @property
    def strides(self) -> tuple[int, ...]:
        """Steps through storage per axis, in elements."""
        return self._strides

    @property
    def offset(self) -> int:
        """Storage position of element ``[0, 0, ..., 0]``."""
        return self._offset

    @property
    def dtype(self) -> np.dtype:
        return self._storage.dtype

    @property
    def ndim(self) -> int:
        return len(self._shape)

    @property
    def size(self) -> int:
        """Number of elements of the view."""
        return math.prod(self._shape)

    @property
    def itemsize(self) -> int:
        """Bytes per element."""
        return self._storage.itemsize

    @property
    def nbytes(self) -> int:
        """Bytes of the view's elements (``size * itemsize``), not of the whole storage."""
        return self.size * self.itemsize

    def is_compact(self) -> bool:
        """True if the elements fill one row-major run of storage (numpy's C-contiguous rule)."""
        return is_compact(self._shape, self._strides)

    # ---- views: new (shape, strides, offset), same storage ------------------------------------

    def as_strided(self, shape: Iterable[int], strides: Iterable[int], offset: int | None = None) -> NDArray:
        """The view of this storage with the given shape, strides and offset (default: this offset)."""
        return NDArray(self._storage, shape, strides, self._offset if offset is None else offset)

    def reshape(self, *shape: int) -> NDArray:
        """The same elements (row-major order) as ``shape``; one size may be -1 (inferred). No copy.

        ValueError if this view cannot be reshaped without a copy; then ``.compact().reshape(...)``.
        """
        new_shape = _infer_shape(_varargs(shape), self._shape)
        strides = reshape_strides(self._shape, self._strides, new_shape)
        if strides is None:
            raise ValueError(f"cannot reshape the view of shape {self._shape} with strides {self._strides} "
                             f"into {new_shape} without a copy: the view is not compact; "
                             "call .compact() first")
        return self.as_strided(new_shape, strides)

    def permute(self, *order: int) -> NDArray:
        """Axis ``d`` of the result is axis ``order[d]`` of this array: the strides are permuted. No copy."""
        order = tuple(_normalize_axis(d, self.ndim) for d in _varargs(order))
        if sorted(order) != list(range(self.ndim)):
            raise ValueError(f"permute order {_varargs(order)} is not a permutation of the axes "
                             f"0..{self.ndim - 1} of an array of shape {self._shape}")
        return self.as_strided(tuple(self._shape[d] for d in order), tuple(self._strides[d] for d in order))

    def transpose(self, dim0: int = -2, dim1: int = -1) -> NDArray:
        """Swap two axes (default: the last two), like ``torch.transpose``. No copy."""
        order = list(range(self.ndim))
        dim0, dim1 = _normalize_axis(dim0, self.ndim), _normalize_axis(dim1, self.ndim)
        order[dim0], order[dim1] = order[dim1], order[dim0]
        return self.permute(order)

    @property
    def T(self) -> NDArray:
        """All axes reversed. No copy."""
        return self.permute(tuple(reversed(range(self.ndim))))

    def broadcast_to(self, shape: Iterable[int]) -> NDArray:
        """This array seen as ``shape`` (numpy's broadcasting): expanded axes get stride 0. No copy."""
        shape = as_shape(shape)
        return self.as_strided(shape, broadcast_strides(self._shape, self._strides, shape))

    def __getitem__(self, key: Any) -> NDArray:
        """Basic indexing (ints, slices with any step, ``...``, ``None``): a view, never a copy.

        Indexing every axis with an int gives a 0-d NDArray (use :meth:`item` for the scalar).
        """
        return self.as_strided(*slice_params(self._shape, self._strides, self._offset, key))

    # ---- copies ---------------------------------------------------------------------------------

    def astype(self, dtype: Any) -> NDArray:
        """A compact copy with elements cast to ``dtype`` (a Numba strided-copy kernel)."""
        out = np.empty(self.size, _check_dtype(dtype))
        kernels.copy(self._storage, _int64s(self._strides), self._offset, _int64s(self._shape),
                     out, _int64s(compact_strides(self._shape)), 0)
        return NDArray(out, self._shape)

    def compact(self) -> NDArray:
        """A compact (row-major, offset 0) copy in fresh storage, always a new array."""
        return self.astype(self.dtype)

    def __setitem__(self, key: Any, value: Any) -> None:
        """Write ``value`` (scalar, numpy array or NDArray, broadcast to ``self[key]``) through the view."""
        view = self[key]
        if not self._storage.flags.writeable:
            raise ValueError("assignment destination is read-only (the storage is not writeable)")
        source = value if isinstance(value, NDArray) else _to_ndarray(value, self.dtype)
        while source.ndim > view.ndim and source.shape[0] == 1:  # numpy drops leading size-1 axes
            source = source[0]
        if np.may_share_memory(source.storage, view.storage):  # overlapping copies must read first
            source = source.compact()
        strides = broadcast_strides(source.shape, source.strides, view.shape)
        kernels.copy(source.storage, _int64s(strides), source.offset, _int64s(view.shape),
                     view.storage, _int64s(view.strides), view.offset)

    def numpy(self, dtype: Any = None) -> np.ndarray:
        """A compact numpy copy of shape ``self.shape`` (cast to ``dtype`` if given)."""
        return self.astype(self.dtype if dtype is None else dtype).storage.reshape(self._shape)

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        """``np.asarray(A)``: a compact copy; with ``copy=False`` numpy's own view of the same storage."""
        if copy is False:
            if dtype is not None and np.dtype(dtype) != self.dtype:
                raise ValueError(f"cannot view an NDArray of dtype {self.dtype} as {np.dtype(dtype)} without a copy")
            return np.ndarray(self._shape, self.dtype, buffer=self._storage, offset=self._offset * self.itemsize,
                              strides=tuple(s * self.itemsize for s in self._strides))
        return self.numpy(dtype)

    def tolist(self) -> Any:
        """Nested Python lists (a Python scalar for a 0-d array)."""
        return self.numpy().tolist()

    def item(self) -> Any:
        """The single element as a Python scalar; ValueError unless ``size == 1``."""
        if self.size != 1:
            raise ValueError(f"item() needs an array of size 1, got shape {self._shape}")
        return self.numpy().reshape(-1)[0].item()

    def __len__(self) -> int:
        if not self._shape:
            raise TypeError("len() of a 0-d NDArray")
        return self._shape[0]

    def __iter__(self) -> Iterator[NDArray]:
        return (self[i] for i in range(len(self)))

    def __bool__(self) -> bool:
        if self.size != 1:
            raise ValueError(f"the truth value of an NDArray of shape {self._shape} is ambiguous; "
                             "use (A == B).min().item() or similar")
        return bool(self.item())

    def __repr__(self) -> str:
        values = np.array2string(self.numpy(), separator=", ", prefix="NDArray(")
        return (f"NDArray({values}, dtype={self.dtype}, shape={self._shape}, strides={self._strides}, "
                f"offset={self._offset})")

    # ---- arithmetic (defined below the class) ---------------------------------------------------

    def exp(self) -> NDArray:
        """Elementwise e**x."""
        return _unary(kernels.EXP, self)

    def log(self) -> NDArray:
        """Elementwise natural logarithm."""
        return _unary(kernels.LOG, self)

    def tanh(self) -> NDArray:
        """Elementwise hyperbolic tangent."""
        return _unary(kernels.TANH, self)

    def __neg__(self) -> NDArray:
        return _unary(kernels.NEG, self)

    def __abs__(self) -> NDArray:
        return _unary(kernels.ABS, self)

    def sum(self, axis: int | tuple[int, ...] | None = None, keepdims: bool = False) -> NDArray:
        """Sum over ``axis`` (None: all axes; negative axes count from the end)."""
        return _reduce(kernels.SUM, self, axis, keepdims)

    def mean(self, axis: int | tuple[int, ...] | None = None, keepdims: bool = False) -> NDArray:
        """Mean over ``axis``."""
        return _reduce(kernels.MEAN, self, axis, keepdims)

    def max(self, axis: int | tuple[int, ...] | None = None, keepdims: bool = False) -> NDArray:
        """Maximum over ``axis``; ValueError if a reduced axis is empty."""
        return _reduce(kernels.MAX, self, axis, keepdims)

    def min(self, axis: int | tuple[int, ...] | None = None, keepdims: bool = False) -> NDArray:
        """Minimum over ``axis``; ValueError if a reduced axis is empty."""
        return _reduce(kernels.MIN, self, axis, keepdims)


def array(data: Any, dtype: Any = None) -> NDArray:
    """A new compact NDArray holding a copy of ``data`` (nested lists, scalars, numpy arrays, NDArrays).

    The dtype is numpy's inference (Python floats -> float64, ints -> int64) unless ``dtype`` is given.
    """
    if isinstance(data, NDArray):
        return data.astype(data.dtype if dtype is None else dtype)
    values = np.array(data, dtype=dtype, order="C")
    _check_dtype(values.dtype)
    return NDArray(values.reshape(-1), values.shape)


def from_numpy(values: np.ndarray) -> NDArray:
    """An NDArray of a numpy array: it shares memory when ``values`` is C-contiguous, else copies."""
    if not isinstance(values, np.ndarray):
        raise TypeError(f"from_numpy expects a numpy array, got {type(values).__name__}")
    if not values.flags.c_contiguous:
        return array(values)
    _check_dtype(values.dtype)
    return NDArray(values.reshape(-1), values.shape)


def _to_ndarray(value: Any, like: np.dtype) -> NDArray:
    """An operand as an NDArray. Python scalars are weak: they take ``like``'s dtype when they fit."""
    if isinstance(value, NDArray):
        return value
    if isinstance(value, (bool, int, float)):
        return array(value, dtype=np.result_type(like, value))
    if isinstance(value, (np.ndarray, np.generic)):
        return from_numpy(np.asarray(value))
    if isinstance(value, (list, tuple)):
        return array(value)
    raise TypeError(f"cannot use a {type(value).__name__} as an NDArray operand")


def _operands(a: Any, b: Any) -> tuple[NDArray, NDArray]:
    """Both operands as NDArrays; a Python scalar takes the other operand's dtype when it fits."""
    if not isinstance(a, NDArray) and not isinstance(b, NDArray):
        a = array(a)
    like = a.dtype if isinstance(a, NDArray) else b.dtype
    return _to_ndarray(a, like), _to_ndarray(b, like)


def _elementwise(op: int, a: NDArray, b: NDArray) -> NDArray:
    """``op(a, b)`` with numpy broadcasting, computed by the binary-map kernel into a new compact array."""
    shape = broadcast_shape(a.shape, b.shape)
    if op in kernels.COMPARISONS:
        dtype = np.dtype(np.bool_)
    else:
        dtype = np.result_type(a.dtype, b.dtype)
        if op == kernels.DIV and dtype not in _FLOATS:
            dtype = np.dtype(np.float64)
    out = np.empty(math.prod(shape), dtype)
    kernels.binary_map(op, a.storage, _int64s(broadcast_strides(a.shape, a.strides, shape)), a.offset,
                       b.storage, _int64s(broadcast_strides(b.shape, b.strides, shape)), b.offset,
                       _int64s(shape), out)
    return NDArray(out, shape)


def maximum(a: Any, b: Any) -> NDArray:
    """Elementwise maximum with broadcasting (NaN wins, as in numpy)."""
    return _elementwise(kernels.MAXIMUM, *_operands(a, b))


def minimum(a: Any, b: Any) -> NDArray:
    """Elementwise minimum with broadcasting (NaN wins, as in numpy)."""
    return _elementwise(kernels.MINIMUM, *_operands(a, b))


def _unary(op: int, a: NDArray) -> NDArray:
    """``op(a)`` elementwise by the unary-map kernel: exp/log/tanh give floats (float64 for ints)."""
    if op == kernels.NEG and a.dtype == np.bool_:
        raise TypeError("negating a bool NDArray is not supported; use (A == False) instead")
    dtype = a.dtype if op in (kernels.NEG, kernels.ABS) or a.dtype in _FLOATS else np.dtype(np.float64)
    out = np.empty(a.size, dtype)
    kernels.unary_map(op, a.storage, _int64s(a.strides), a.offset, _int64s(a.shape), out)
    return NDArray(out, a.shape)


_REDUCTION_NAMES = {kernels.SUM: "sum", kernels.MEAN: "mean", kernels.MAX: "max", kernels.MIN: "min"}


def _reduce(op: int, a: NDArray, axis: int | Iterable[int] | None, keepdims: bool) -> NDArray:
    """Reduce ``a`` over ``axis`` with the reduce kernel; sums of ints and bools are int64, means float."""
    if axis is None:
        axes = tuple(range(a.ndim))
    else:
        axes = tuple(_normalize_axis(d, a.ndim) for d in (axis if isinstance(axis, Iterable) else (axis,)))
        if len(set(axes)) != len(axes):
            raise ValueError(f"duplicate axis in {axis} for an array of dimension {a.ndim}")
    kept = [d for d in range(a.ndim) if d not in axes]
    reduced_shape = tuple(a.shape[d] for d in axes)
    if op in (kernels.MAX, kernels.MIN) and math.prod(reduced_shape) == 0:
        raise ValueError(f"{_REDUCTION_NAMES[op]} over axes {axes} of shape {a.shape}: an empty reduction "
                         "has no identity")
    if op == kernels.SUM and a.dtype not in _FLOATS:
        dtype = np.dtype(np.int64)
    elif op == kernels.MEAN and a.dtype not in _FLOATS:
        dtype = np.dtype(np.float64)
    else:
        dtype = a.dtype
    out_shape = tuple(a.shape[d] for d in kept)
    out = np.empty(math.prod(out_shape), dtype)
    kernels.reduce(op, a.storage, a.offset, _int64s(out_shape), _int64s(a.strides[d] for d in kept),
                   _int64s(reduced_shape), _int64s(a.strides[d] for d in axes), out)
    result = NDArray(out, out_shape)
    if keepdims:
        result = result.reshape(tuple(1 if d in axes else n for d, n in enumerate(a.shape)))
    return result


def _infer_shape(shape: tuple, old_shape: tuple[int, ...]) -> tuple[int, ...]:
    """``shape`` with its one allowed -1 replaced by the size that keeps the element count."""
    shape = [operator.index(n) for n in shape]
    size = math.prod(old_shape)
    unknown = [d for d, n in enumerate(shape) if n == -1]
    if len(unknown) > 1 or any(n < -1 for n in shape):
        raise ValueError(f"invalid shape {tuple(shape)}: sizes must be >= 0, with at most one -1")
    if unknown:
        known = math.prod(n for n in shape if n != -1)
        if known == 0 or size % known:
            raise ValueError(f"cannot reshape an array of shape {old_shape} (size {size}) into shape {tuple(shape)}")
        shape[unknown[0]] = size // known
    return tuple(shape)


def _matmul(a: NDArray, b: NDArray) -> NDArray:
    """``a @ b`` with numpy's rules: 1-D operands become a row / a column, leading batch axes broadcast.

    Each (m, n) @ (n, p) product is :func:`~mlsys_lib.tensor.matmul.matmul_tiled`.
    """
    if a.ndim == 0 or b.ndim == 0:
        raise ValueError(f"matmul needs operands with at least one axis, got shapes {a.shape} and {b.shape}")
    dtype = np.result_type(a.dtype, b.dtype)
    if dtype not in _FLOATS:
        raise TypeError(f"matmul supports float32 and float64 NDArrays, got {a.dtype} and {b.dtype}")
    rows = a[None, :] if a.ndim == 1 else a  # (..., m, n)
    cols = b[:, None] if b.ndim == 1 else b  # (..., n, p)
    if rows.shape[-1] != cols.shape[-2]:
        raise ValueError(f"matmul: shapes {a.shape} and {b.shape} do not match in the inner dimension "
                         f"({rows.shape[-1]} != {cols.shape[-2]})")
    try:
        batch = broadcast_shape(rows.shape[:-2], cols.shape[:-2])
    except ValueError:
        raise ValueError(f"matmul: the batch axes of shapes {a.shape} and {b.shape} cannot be broadcast") from None
    rows = rows.broadcast_to(batch + rows.shape[-2:])
    cols = cols.broadcast_to(batch + cols.shape[-2:])
    out = np.empty(batch + (rows.shape[-2], cols.shape[-1]), dtype)
    for index in np.ndindex(*batch):
        out[index] = matmul_tiled(rows[index].numpy(dtype), cols[index].numpy(dtype))
    result = from_numpy(out)
    if a.ndim == 1:
        result = result[..., 0, :]
    if b.ndim == 1:
        result = result[..., 0]
    return result


def _operator(name: str, compute: Callable[[NDArray, NDArray], NDArray],
              reflected: bool = False) -> Callable[[NDArray, Any], NDArray]:
    """The method ``__name__`` (``__rname__`` if reflected): convert the other operand, then compute."""
    def method(self: NDArray, other: Any) -> NDArray:
        try:
            a, b = _operands(other, self) if reflected else _operands(self, other)
        except TypeError:
            return NotImplemented
        return compute(a, b)
    method.__name__ = f"__{'r' if reflected else ''}{name}__"
    method.__doc__ = f"``{name}`` with numpy broadcasting{' (reflected)' if reflected else ''}."
    return method


for _name, _op in [("add", kernels.ADD), ("sub", kernels.SUB), ("mul", kernels.MUL),
                   ("truediv", kernels.DIV), ("pow", kernels.POW)]:
    setattr(NDArray, f"__{_name}__", _operator(_name, functools.partial(_elementwise, _op)))
    setattr(NDArray, f"__r{_name}__", _operator(_name, functools.partial(_elementwise, _op), reflected=True))
for _name, _op in [("eq", kernels.EQ), ("ne", kernels.NE), ("lt", kernels.LT), ("le", kernels.LE),
                   ("gt", kernels.GT), ("ge", kernels.GE)]:  # Python reflects comparisons itself
    setattr(NDArray, f"__{_name}__", _operator(_name, functools.partial(_elementwise, _op)))
NDArray.__matmul__ = _operator("matmul", _matmul)
NDArray.__rmatmul__ = _operator("matmul", _matmul, reflected=True)

"""The operator set of the graph IR: for each op, its shape/dtype rule, numpy reference, FLOP count and traits.

Every op is one :class:`OpDef` in :data:`OPS`; everything else (graph construction, evaluation, the
cost model, the passes, substitution discovery) looks ops up here, so adding an op is adding one entry.

Conventions: elementwise ops broadcast like numpy; ``conv2d`` is NCHW (cross-correlation, as in every
DL framework: ``Y[n,k,h,w] = Σ_{c,r,s} X[n,c,h·stride+r, w·stride+s] W[k,c,r,s] + B[k]``); ``batch_norm`` is
the *inference* form with fixed statistics, normalizing axis 1; ``slice`` is one output of a split.
FLOPs: one per output element of an elementwise op (``exp`` included); ``2·m·k·n`` per matmul;
``2·C·R·S`` per conv output element (+1 with bias); 2 per batch-norm element (scale and shift).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from mlsys_lib.autodiff.shapes import broadcast_shapes

Shape = tuple[int, ...]
Attrs = Mapping[str, Any]
Infer = Callable[[Attrs, Sequence[Shape], Sequence[np.dtype]], "tuple[Shape, np.dtype]"]


@dataclass(frozen=True)
class OpDef:
    """One operator.

    arity: the allowed numbers of inputs (None: one or more).
    infer(attrs, input shapes, input dtypes) -> (shape, dtype); raises ValueError (without the node's
        name: :func:`~mlsys_lib.graph.ir.make_node` adds it) for invalid inputs or attributes.
    compute(attrs, *arrays) -> ndarray: the numpy reference.
    flops(attrs, input shapes, output shape) -> int.
    attributes: the names of its attributes; defaults(input shapes) -> the values of those that may be
        left unset (``transpose``'s perm: the reversed axes).
    elementwise: output element i depends on input elements i only (broadcasting): fusable.
    commutative: a binary op whose operands may be swapped (CSE and pattern matching use it).
    exact: on integer inputs the result is exactly the integer result (the verifier's exact check).
    kernel: running it launches a kernel that moves data (False: inputs, constants, reshape views).
    """

    name: str
    arity: tuple[int, ...] | None
    infer: Infer
    compute: Callable[..., np.ndarray]
    flops: Callable[[Attrs, Sequence[Shape], Shape], int]
    attributes: tuple[str, ...] = ()
    defaults: Callable[[Sequence[Shape]], dict[str, Any]] = lambda shapes: {}
    elementwise: bool = False
    commutative: bool = False
    exact: bool = True
    kernel: bool = True


def _same_dtype(dtypes: Sequence[np.dtype]) -> np.dtype:
    return dtypes[0] if all(d == dtypes[0] for d in dtypes) else np.result_type(*dtypes)


def _float_dtype(dtypes: Sequence[np.dtype]) -> np.dtype:
    """Division and exp give floats: the inputs' float type, or float64 for integer inputs."""
    dtype = np.result_type(*dtypes)
    return dtype if np.issubdtype(dtype, np.inexact) else np.dtype(np.float64)


def _relu(x: np.ndarray) -> np.ndarray:
    return np.maximum(x, np.zeros((), x.dtype))


class Elementwise(NamedTuple):
    """An elementwise op's numpy function, number of operands, traits and dtype rule."""

    fn: Callable[..., np.ndarray]
    arity: int
    commutative: bool
    exact: bool
    dtype: Callable[[Sequence[np.dtype]], np.dtype]


ELEMENTWISE: dict[str, Elementwise] = {
    "add": Elementwise(np.add, 2, True, True, _same_dtype),
    "sub": Elementwise(np.subtract, 2, False, True, _same_dtype),
    "mul": Elementwise(np.multiply, 2, True, True, _same_dtype),
    "div": Elementwise(np.true_divide, 2, False, False, _float_dtype),
    "neg": Elementwise(np.negative, 1, False, True, _same_dtype),
    "relu": Elementwise(_relu, 1, False, True, _same_dtype),
    "exp": Elementwise(np.exp, 1, False, False, _float_dtype),
}


def elementwise_shape(op: str, shapes: Sequence[Shape]) -> Shape:
    """The broadcast shape of an elementwise op's inputs (ValueError naming ``op`` if they do not broadcast)."""
    return broadcast_shapes(op, *shapes)


def _elementwise(name: str) -> OpDef:
    op = ELEMENTWISE[name]
    return OpDef(
        name, (op.arity,),
        infer=lambda attrs, shapes, dtypes: (elementwise_shape(name, shapes), op.dtype(dtypes)),
        compute=lambda attrs, *xs: op.fn(*xs),
        flops=lambda attrs, shapes, out: math.prod(out),
        elementwise=True, commutative=op.commutative, exact=op.exact)


# -- sources ------------------------------------------------------------------------------------
def _infer_input(attrs, shapes, dtypes):
    return tuple(int(n) for n in attrs["shape"]), np.dtype(attrs["dtype"])


def _infer_const(attrs, shapes, dtypes):
    return attrs["value"].shape, attrs["value"].dtype


def _no_compute(attrs, *xs):
    raise ValueError("an input node has no computation: its value comes from the feeds")


# -- linear algebra and layout ------------------------------------------------------------------
def _infer_matmul(attrs, shapes, dtypes):
    a, b = shapes
    if len(a) < 2 or len(b) < 2:
        raise ValueError(f"operands must be at least 2-D, got {a} @ {b}")
    if a[-1] != b[-2]:
        raise ValueError(f"inner dimensions differ: {a} @ {b} ({a[-1]} != {b[-2]})")
    return broadcast_shapes("matmul", a[:-2], b[:-2]) + (a[-2], b[-1]), _same_dtype(dtypes)


def _infer_transpose(attrs, shapes, dtypes):
    (shape,), perm = shapes, attrs["perm"]
    if sorted(perm) != list(range(len(shape))):
        raise ValueError(f"perm {perm} is not a permutation of the {len(shape)} axes of {shape}")
    return tuple(shape[a] for a in perm), dtypes[0]


def _infer_reshape(attrs, shapes, dtypes):
    (shape,), target = shapes, attrs["shape"]
    if math.prod(target) != math.prod(shape) or any(n < 0 for n in target):
        raise ValueError(f"cannot reshape {shape} into {target}")
    return target, dtypes[0]


def _infer_concat(attrs, shapes, dtypes):
    axis, first = attrs["axis"], shapes[0]
    if not 0 <= axis < len(first):
        raise ValueError(f"axis {axis} is out of range for {len(first)}-D inputs")
    for s in shapes[1:]:
        if len(s) != len(first) or any(m != n for i, (m, n) in enumerate(zip(s, first)) if i != axis):
            raise ValueError(f"inputs {first} and {s} differ outside axis {axis}")
    return first[:axis] + (sum(s[axis] for s in shapes),) + first[axis + 1:], _same_dtype(dtypes)


def _infer_slice(attrs, shapes, dtypes):
    (shape,), axis, start, stop = shapes, attrs["axis"], attrs["start"], attrs["stop"]
    if not 0 <= axis < len(shape) or not 0 <= start < stop <= shape[axis]:
        raise ValueError(f"slice [{start}:{stop}] on axis {axis} is out of range for {shape}")
    return shape[:axis] + (stop - start,) + shape[axis + 1:], dtypes[0]


def _compute_slice(attrs, x):
    index = [slice(None)] * x.ndim
    index[attrs["axis"]] = slice(attrs["start"], attrs["stop"])
    return x[tuple(index)]


# -- convolution and batch norm -----------------------------------------------------------------
def _infer_conv2d(attrs, shapes, dtypes):
    x, w = shapes[0], shapes[1]
    stride, padding = attrs["stride"], attrs["padding"]
    if len(x) != 4 or len(w) != 4 or x[1] != w[1]:
        raise ValueError(f"expects x (N, C, H, W) and w (K, C, R, S) with equal C, got x {x}, w {w}")
    if len(shapes) == 3 and shapes[2] != (w[0],):
        raise ValueError(f"bias must have shape ({w[0]},), got {shapes[2]}")
    if stride < 1 or padding < 0:
        raise ValueError(f"stride must be >= 1 and padding >= 0, got stride {stride}, padding {padding}")
    h, v = x[2] + 2 * padding - w[2], x[3] + 2 * padding - w[3]
    if h < 0 or v < 0:
        raise ValueError(f"kernel {w[2:]} is larger than the padded input {x[2:]} (padding {padding})")
    return (x[0], w[0], h // stride + 1, v // stride + 1), _same_dtype(dtypes)


def conv2d_reference(x: np.ndarray, w: np.ndarray, b: np.ndarray | None = None, stride: int = 1,
                     padding: int = 0) -> np.ndarray:
    """NCHW cross-correlation: x (N, C, H, W), w (K, C, R, S), b (K,) or None -> (N, K, H', W'),
    H' = (H + 2·padding - R) // stride + 1. Sliding windows of the zero-padded input, contracted with einsum."""
    pad = ((0, 0), (0, 0), (padding, padding), (padding, padding))
    windows = sliding_window_view(np.pad(x, pad), w.shape[2:], axis=(2, 3))[:, :, ::stride, ::stride]
    out = np.einsum("nchwrs,kcrs->nkhw", windows, w, optimize=True)
    return out if b is None else out + b[:, None, None]


def _flops_conv2d(attrs, shapes, out):
    k, c, r, s = shapes[1]
    return math.prod(out) * (2 * c * r * s + (len(shapes) == 3))


def _infer_batch_norm(attrs, shapes, dtypes):
    x = shapes[0]
    if len(x) < 2 or any(s != (x[1],) for s in shapes[1:]):
        raise ValueError(f"expects x (N, C, ...) and gamma, beta, mean, var of shape (C,), got {list(shapes)}")
    return x, _float_dtype(dtypes)


def batch_norm_scale_shift(gamma: np.ndarray, beta: np.ndarray, mean: np.ndarray, var: np.ndarray,
                           eps: float) -> tuple[np.ndarray, np.ndarray]:
    """Inference batch norm as a per-channel affine map y = x·R + P (the lecture's R and P), each (C,):
    ``R = γ / √(σ² + ε)``, ``P = β − μ·R``."""
    scale = gamma / np.sqrt(var + eps)
    return scale, beta - mean * scale


def _compute_batch_norm(attrs, x, gamma, beta, mean, var):
    scale, shift = batch_norm_scale_shift(gamma, beta, mean, var, attrs["eps"])
    per_channel = (-1,) + (1,) * (x.ndim - 2)
    return x * scale.reshape(per_channel) + shift.reshape(per_channel)


# -- fused elementwise kernels ------------------------------------------------------------------
def fused_shapes(program: Sequence[tuple[str, tuple[int, ...]]], shapes: Sequence[Shape]) -> list[Shape]:
    """The shape of every value of a fused program: the inputs', then one per step.

    program: steps ``(op, operand indices)``; index i < len(shapes) is input i, larger ones earlier steps.
    """
    values = list(shapes)
    for op, args in program:
        if op not in ELEMENTWISE or any(not 0 <= i < len(values) for i in args):
            raise ValueError(f"invalid fused step {op}{args} at step {len(values) - len(shapes)}")
        values.append(elementwise_shape(op, [values[i] for i in args]))
    return values


def _infer_fused(attrs, shapes, dtypes):
    program = attrs["program"]
    shape = fused_shapes(program, shapes)[-1]  # validates the program
    values = list(dtypes)
    for op, args in program:
        values.append(ELEMENTWISE[op].dtype([values[i] for i in args]))
    return shape, values[-1]


def _compute_fused(attrs, *xs):
    values = list(xs)
    for op, args in attrs["program"]:
        values.append(ELEMENTWISE[op].fn(*[values[i] for i in args]))
    return values[-1]


def _flops_fused(attrs, shapes, out):
    return sum(math.prod(s) for s in fused_shapes(attrs["program"], shapes)[len(shapes):])


def _zero_flops(attrs, shapes, out) -> int:
    return 0


OPS: dict[str, OpDef] = {name: _elementwise(name) for name in ELEMENTWISE}
OPS.update({
    "input": OpDef("input", (0,), _infer_input, _no_compute, _zero_flops, ("shape", "dtype"), kernel=False),
    "const": OpDef("const", (0,), _infer_const, lambda attrs: attrs["value"], _zero_flops, ("value",),
                   kernel=False),
    "matmul": OpDef("matmul", (2,), _infer_matmul, lambda attrs, a, b: a @ b,
                    lambda attrs, shapes, out: 2 * math.prod(out) * shapes[0][-1]),
    "transpose": OpDef("transpose", (1,), _infer_transpose, lambda attrs, x: np.transpose(x, attrs["perm"]),
                       _zero_flops, ("perm",), lambda shapes: {"perm": tuple(reversed(range(len(shapes[0]))))}),
    "reshape": OpDef("reshape", (1,), _infer_reshape, lambda attrs, x: x.reshape(attrs["shape"]),
                     _zero_flops, ("shape",), kernel=False),
    "concat": OpDef("concat", None, _infer_concat, lambda attrs, *xs: np.concatenate(xs, axis=attrs["axis"]),
                    _zero_flops, ("axis",)),
    "slice": OpDef("slice", (1,), _infer_slice, _compute_slice, _zero_flops, ("axis", "start", "stop")),
    "conv2d": OpDef("conv2d", (2, 3), _infer_conv2d,
                    lambda attrs, x, w, b=None: conv2d_reference(x, w, b, attrs["stride"], attrs["padding"]),
                    _flops_conv2d, ("stride", "padding"), lambda shapes: {"stride": 1, "padding": 0}),
    "batch_norm": OpDef("batch_norm", (5,), _infer_batch_norm, _compute_batch_norm,
                        lambda attrs, shapes, out: 2 * math.prod(out), ("eps",), lambda shapes: {"eps": 1e-5},
                        exact=False),
    "fused": OpDef("fused", None, _infer_fused, _compute_fused, _flops_fused, ("program",), exact=False),
})

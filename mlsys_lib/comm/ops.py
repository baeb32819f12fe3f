"""Reduction operators of the collectives: "sum", "prod", "max", "min" and "mean".

Each is an associative, commutative numpy ufunc applied elementwise; "mean" reduces with "sum" and
the collective divides by the number of ranks at the end (floating and complex dtypes only).
"""

from __future__ import annotations

import numpy as np

REDUCE_OPS: dict[str, np.ufunc] = {
    "sum": np.add,
    "prod": np.multiply,
    "max": np.maximum,
    "min": np.minimum,
    "mean": np.add,
}


def check_op(op: str, dtype: np.dtype) -> None:
    """Raise ValueError/TypeError unless ``op`` names a reduction usable on arrays of ``dtype``."""
    if op not in REDUCE_OPS:
        raise ValueError(f"unknown reduction op {op!r}: expected one of {', '.join(REDUCE_OPS)}")
    if op == "mean" and dtype.kind not in "fc":
        raise TypeError(f"op='mean' needs a floating or complex dtype, got {dtype}; use 'sum' and divide")
    if op in ("max", "min") and dtype.kind == "c":
        raise TypeError(f"op={op!r} is not defined for complex dtype {dtype}")


def combine(acc: np.ndarray, x: np.ndarray, op: str) -> None:
    """``acc <- op(acc, x)`` elementwise, in place. Shapes (n,) and (n,) or any equal shapes."""
    REDUCE_OPS[op](acc, x, out=acc)

"""Arrays and blocks: the collectives cut a flat 1-D buffer of n elements into p contiguous blocks.

``bounds`` is a list of p+1 element offsets; block i is ``buf[bounds[i]:bounds[i+1]]``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np


def as_array(x: Any, what: str) -> np.ndarray:
    """``x`` as a numpy array of a bool or numeric dtype, else TypeError naming ``what``."""
    arr = np.asarray(x)
    if arr.dtype.kind not in "biufc":
        raise TypeError(f"{what} must be a numeric numpy array, got dtype {arr.dtype}")
    return arr


def bounds_from_sizes(sizes: Sequence[int]) -> list[int]:
    """Offsets ``[0, s0, s0+s1, ...]`` (length p+1) of consecutive blocks of ``sizes`` elements."""
    return [0, *np.cumsum(sizes, dtype=np.int64).tolist()]


def split_sizes(n: int, p: int) -> list[int]:
    """Sizes of ``np.array_split`` of n items into p parts: the first ``n % p`` parts get one more."""
    return [n // p + (1 if i < n % p else 0) for i in range(p)]


def even_bounds(n: int, p: int) -> list[int]:
    """Bounds of n elements split into p nearly equal blocks (as ``np.array_split``)."""
    return bounds_from_sizes(split_sizes(n, p))


def block(buf: np.ndarray, bounds: Sequence[int], i: int) -> np.ndarray:
    """Block i of the 1-D ``buf`` (a view), shape ``(bounds[i+1] - bounds[i],)``."""
    return buf[bounds[i]:bounds[i + 1]]

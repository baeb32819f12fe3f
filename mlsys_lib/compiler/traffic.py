"""Counted memory traffic of a schedule: its loops run in Python against a model cache.

:func:`count_traffic` runs the trace that :func:`~.codegen.lower` generates with ``trace=True``
(the kernel's loops, in the schedule's order, calling ``_touch(tensor, index)`` for every element
read or written; a ``cache_write`` buffer is registers and is not counted) through a fully
associative LRU cache of ``cache_bytes`` in lines of ``line_bytes``
(:class:`~mlsys_lib.tensor.cache.LineCache`). Every miss moves one line between memory and the cache:
``bytes = misses * line_bytes``. Python runs about a million accesses per second: count on small
sizes (a 64×64×64 matmul is 786 432 accesses).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..tensor.cache import LineCache
from .codegen import lower
from .schedule import Schedule


@dataclass(frozen=True)
class Traffic:
    """Accesses made, lines missed (in total and per tensor) and the bytes those misses moved."""
    accesses: int
    misses: int
    bytes: int
    per_tensor: dict[str, int]


def count_traffic(schedule: Schedule, cache_bytes: int = 32 * 1024, line_bytes: int = 64) -> Traffic:
    """The misses of ``schedule``'s accesses in an LRU cache of ``cache_bytes`` (``line_bytes`` lines)."""
    try:
        cache = LineCache(cache_bytes, line_bytes)
    except ValueError as error:
        raise ValueError(f"count_traffic: {error}") from None
    layout = {t.name: (np.dtype(t.dtype).itemsize, _strides(t.shape)) for t in schedule.tensors}

    def touch(name: str, index: tuple) -> None:
        itemsize, strides = layout[name]
        cache.touch(name, sum(i * s for i, s in zip(index, strides)) * itemsize)

    namespace: dict = {"np": np, "max": max, "min": min}
    exec(compile(lower(schedule, trace=True), "<mlsys_lib.compiler trace>", "exec"), namespace)  # noqa: S102
    namespace["trace"](touch)
    total = cache.total_misses
    return Traffic(cache.accesses, total, total * line_bytes, dict(cache.misses))


def _strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    strides, step = [], 1
    for n in reversed(shape):
        strides.append(step)
        step *= n
    return tuple(reversed(strides))

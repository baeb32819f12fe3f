"""Counted memory traffic of a schedule: its loops run in Python against a model cache.

:func:`count_traffic` runs the trace that :func:`~.codegen.lower` generates with ``trace=True``
(the kernel's loops, in the schedule's order, calling ``_touch(tensor, index)`` for every element
read or written; a ``cache_write`` buffer is registers and is not counted) through a fully
associative LRU cache of ``cache_bytes`` in lines of ``line_bytes``. Every miss moves one line
between memory and the cache: ``bytes = misses * line_bytes``. Python runs about a million
accesses per second: count on small sizes (a 64×64×64 matmul is 786 432 accesses).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

import numpy as np

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
    for what, value in (("cache_bytes", cache_bytes), ("line_bytes", line_bytes)):
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise ValueError(f"count_traffic: {what} must be a positive int, got {value!r}")
    if cache_bytes < line_bytes:
        raise ValueError(f"count_traffic: a cache of {cache_bytes} bytes cannot hold one {line_bytes}-byte line")
    capacity = cache_bytes // line_bytes
    layout = {t.name: (np.dtype(t.dtype).itemsize, _strides(t.shape)) for t in schedule.tensors}
    cache: OrderedDict = OrderedDict()
    counts = {"accesses": 0}
    misses = {name: 0 for name in layout}

    def touch(name: str, index: tuple) -> None:
        itemsize, strides = layout[name]
        line = (name, sum(i * s for i, s in zip(index, strides)) * itemsize // line_bytes)
        counts["accesses"] += 1
        if line in cache:
            cache.move_to_end(line)
            return
        misses[name] += 1
        cache[line] = None
        if len(cache) > capacity:
            cache.popitem(last=False)

    namespace: dict = {"np": np, "max": max, "min": min}
    exec(compile(lower(schedule, trace=True), "<mlsys_lib.compiler trace>", "exec"), namespace)  # noqa: S102
    namespace["trace"](touch)
    total = sum(misses.values())
    return Traffic(counts["accesses"], total, total * line_bytes, {k: v for k, v in misses.items() if v})


def _strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    strides, step = [], 1
    for n in reversed(shape):
        strides.append(step)
        step *= n
    return tuple(reversed(strides))

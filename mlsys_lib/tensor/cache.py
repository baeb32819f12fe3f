"""A model cache for counting memory traffic: fully associative, least recently used, in lines.

Memory moves between DRAM and the cache in *lines* (64 bytes on most CPUs). A kernel's traffic is
the number of lines it misses: every access names an array and a byte address in it, the cache
keeps the ``cache_bytes // line_bytes`` lines touched most recently, and each access to a line it
does not hold is a miss that brings the line in (evicting the least recently used one). Each array
starts at a line boundary. Lab 1 replays a matmul's element accesses through it
(:func:`mlsys_lib.testing.count_misses`), the compiler's :func:`~mlsys_lib.compiler.count_traffic`
a schedule's.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Hashable

__all__ = ["LineCache"]


class LineCache:
    """An LRU cache of ``cache_bytes`` in lines of ``line_bytes``; :meth:`touch` each access.

    ``accesses`` counts the accesses, ``misses`` maps each array's name to the lines it missed;
    ``total_misses * line_bytes`` is the traffic in bytes.
    """

    def __init__(self, cache_bytes: int = 32 * 1024, line_bytes: int = 64):
        for what, value in (("cache_bytes", cache_bytes), ("line_bytes", line_bytes)):
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ValueError(f"{what} must be a positive int, got {value!r}")
        if cache_bytes < line_bytes:
            raise ValueError(f"a cache of {cache_bytes} bytes cannot hold one {line_bytes}-byte line")
        self.line_bytes = line_bytes
        self.capacity = cache_bytes // line_bytes  # lines
        self.accesses = 0
        self.misses: dict[Hashable, int] = {}
        self._lines: OrderedDict = OrderedDict()  # (name, line number), least recently used first

    def touch(self, name: Hashable, byte_address: int) -> bool:
        """Access byte ``byte_address`` of array ``name``; True if it missed."""
        self.accesses += 1
        line = (name, byte_address // self.line_bytes)
        if line in self._lines:
            self._lines.move_to_end(line)
            return False
        self.misses[name] = self.misses.get(name, 0) + 1
        self._lines[line] = None
        if len(self._lines) > self.capacity:
            self._lines.popitem(last=False)
        return True

    @property
    def total_misses(self) -> int:
        """Lines missed by all arrays together."""
        return sum(self.misses.values())

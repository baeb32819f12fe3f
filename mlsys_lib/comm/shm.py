"""Shared-memory segments that carry the sim backend's message payloads (``multiprocessing.shared_memory``).

A segment belongs to the rank that created it and is reused for later messages once its receiver
has copied the payload out. Names are ``mlsys_<token>_<rank>_<index>`` with indices 0, 1, 2, ...
per rank; ranks never unlink, so the launcher can remove every segment of a run by trying the
indices in order until one is missing — also after a rank died.

Python's resource tracker is told to forget each segment (Python < 3.13 registers even segments a
process only attaches to, and would unlink or warn about them when that process ends).
"""

from __future__ import annotations

import sys
from multiprocessing import resource_tracker
from multiprocessing.shared_memory import SharedMemory

PREFIX = "mlsys_"
PAGE = 4096


def segment_name(token: str, rank: int, index: int) -> str:
    """The name of segment ``index`` of ``rank`` in the run ``token``."""
    return f"{PREFIX}{token}_{rank}_{index}"


def _untracked(name: str, create: bool, size: int = 0) -> SharedMemory:
    if sys.version_info >= (3, 13):
        return SharedMemory(name, create=create, size=size, track=False)
    shm = SharedMemory(name, create=create, size=size)
    resource_tracker.unregister(shm._name, "shared_memory")  # noqa: SLF001 - the tracker's key
    return shm


def create(name: str, size: int) -> SharedMemory:
    """A new segment of at least ``size`` bytes (rounded up to whole pages), not tracked."""
    return _untracked(name, True, -(-max(size, 1) // PAGE) * PAGE)


def attach(name: str) -> SharedMemory:
    """Map an existing segment, not tracked."""
    return _untracked(name, False)


def unlink_run(token: str, world_size: int) -> int:
    """Unlink every segment of the run ``token``; return how many there were."""
    removed = 0
    for rank in range(world_size):
        index = 0
        while True:
            try:
                shm = SharedMemory(segment_name(token, rank, index))
            except FileNotFoundError:
                break
            shm.close()
            shm.unlink()
            removed += 1
            index += 1
    return removed


class SegmentPool:
    """One rank's segments: take a free one big enough (or create one), give it back when freed."""

    def __init__(self, token: str, rank: int) -> None:
        self._token, self._rank = token, rank
        self._segments: dict[str, SharedMemory] = {}
        self._free: set[str] = set()

    def take(self, nbytes: int) -> SharedMemory:
        """A free segment of at least ``nbytes`` bytes (the smallest such), now busy."""
        fitting = [n for n in self._free if self._segments[n].size >= nbytes]
        if fitting:
            name = min(fitting, key=lambda n: self._segments[n].size)
        else:
            name = segment_name(self._token, self._rank, len(self._segments))
            self._segments[name] = create(name, nbytes)
            self._free.add(name)
        self._free.remove(name)
        return self._segments[name]

    def has_free(self, nbytes: int) -> bool:
        """True if a free segment of at least ``nbytes`` bytes exists."""
        return any(self._segments[n].size >= nbytes for n in self._free)

    def give_back(self, name: str) -> None:
        """Mark segment ``name`` free again (its receiver has copied the payload out)."""
        self._free.add(name)

    def close(self) -> None:
        """Unmap every segment (the launcher unlinks them)."""
        for shm in self._segments.values():
            shm.close()
        self._segments.clear()
        self._free.clear()

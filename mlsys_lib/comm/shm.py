"""Shared-memory segments that carry the sim backend's message payloads (``multiprocessing.shared_memory``).

A segment belongs to the rank that created it and is reused for later messages once its receiver
has copied the payload out. Names are ``mlsys_<token>_<rank>_<index>`` with indices 0, 1, 2, ...
per rank; ranks never unlink, so the launcher can remove every segment of a run by trying the
indices in order until one is missing — also after a rank died.

A segment starts with ``HEADER`` bytes, the payload follows. Byte 0 says whether the segment is
busy: the sender sets it when it writes a payload, the receiver clears it (:func:`release`) once it
has copied the payload out, so the sender learns that it may reuse the segment without a message
(which would wake it up) and without a system call. The receiver clears it only after its copy has
returned and the interpreter has run on, so its reads of the payload are complete before the
sender can see the byte cleared and write again.

Python's resource tracker is told to forget each segment (Python < 3.13 registers even segments a
process only attaches to, and would unlink or warn about them when that process ends).
"""

from __future__ import annotations

import sys
from multiprocessing import resource_tracker
from multiprocessing.shared_memory import SharedMemory

import numpy as np

PREFIX = "mlsys_"
PAGE = 4096
HEADER = 64  # bytes before the payload (one cache line); byte 0 is the busy flag
FREE, BUSY = 0, 1


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


def payload_view(shm: SharedMemory, dtype: np.dtype, count: int) -> np.ndarray:
    """The segment's payload: ``count`` items of ``dtype`` after the header, as a flat array view."""
    return np.ndarray((count,), dtype, buffer=shm.buf, offset=HEADER)


def release(shm: SharedMemory) -> None:
    """Mark the segment free for its sender to reuse (call it once the payload has been copied out)."""
    shm.buf[0] = FREE


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
    """One rank's segments: take a free one big enough (or create one); its receiver releases it."""

    def __init__(self, token: str, rank: int) -> None:
        self._token, self._rank = token, rank
        self._segments: list[SharedMemory] = []  # index i is segment i of this rank

    def take(self, nbytes: int) -> SharedMemory:
        """A free segment with room for ``nbytes`` payload bytes (the smallest such), now busy."""
        fitting = [shm for shm in self._segments if shm.buf[0] == FREE and shm.size - HEADER >= nbytes]
        if fitting:
            shm = min(fitting, key=lambda segment: segment.size)
        else:
            shm = create(segment_name(self._token, self._rank, len(self._segments)), HEADER + nbytes)
            self._segments.append(shm)
        shm.buf[0] = BUSY
        return shm

    def close(self) -> None:
        """Unmap every segment (the launcher unlinks them)."""
        for shm in self._segments:
            shm.close()
        self._segments.clear()

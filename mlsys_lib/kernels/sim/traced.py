"""The probes of instrumented simulation: arrays that record each simulated thread's element accesses.

Numba's CUDA simulator runs every thread of a block as a Python thread and lets kernels index
numpy arrays. Under :func:`~mlsys_lib.kernels.instrument`, each kernel argument and each shared
array is a :class:`TracedArray` over the same data instead. On every element access it

1. checks the index against the shape (negative indices count as out of bounds: a CUDA kernel that
   computes ``i - 1`` at ``i = 0`` has a bug even though Numba would wrap it around);
2. adds one to the accessing thread's read or write counter for that array, and logs the access
   (site, epoch, how often this thread ran the site before in this epoch, array, load/store, byte
   address) for the warp-level analysis of :mod:`~mlsys_lib.kernels.sim.warps` at the end of the launch.
   The *site* is the source position the kernel's own frame is at: the subscript itself, or the call
   of the device function that made the access. Frames are looked up once per thread, not per
   access (``sys._getframe`` and ``frame.f_code`` raise audit events, which the grader's guard judges);
3. for shared memory, checks the address against a *shadow* entry ``[epoch, writer, reader,
   another reader]``: the epoch is how many ``syncthreads`` the thread has passed, so two accesses
   with the same epoch by different threads are unordered, and they race if one is a write.

A :class:`Recorder` holds the state of one launch and turns it into a
:class:`~mlsys_lib.kernels.sim.report.LaunchRecord`.
"""

from __future__ import annotations

import functools
import itertools
import linecache
import operator
import re
import sys
import threading
from typing import Any, Callable

import numpy as np

from .report import COUNT_KINDS, ArrayTraffic, LaunchRecord, OutOfBounds, Race, Requests
from .warps import analyze

_current_thread = threading.current_thread
_NONE = -1  # no thread in a shadow entry's writer / reader field


class ThreadProbe:
    """One simulated thread's counters (``counters[2 r]`` reads, ``counters[2 r + 1]`` writes of region r), epoch,
    and access log: ``log`` holds (site, epoch, occurrence, region, is_store, byte address) per access,
    ``seen`` how many times the thread ran each site in this epoch; ``frame`` and ``code`` are the
    kernel's frame in this thread and its code object."""

    __slots__ = ("block", "thread", "linear", "counters", "epoch", "log", "seen", "frame", "code")

    def __init__(self, block: tuple[int, int, int], thread: tuple[int, int, int], linear: int, regions: int,
                 frame: Any = None, code: Any = None) -> None:
        self.block = block
        self.thread = thread
        self.linear = linear
        self.counters = [0] * (2 * regions)
        self.epoch = 0
        self.log: list[tuple[int, int, int, int, int, int]] = []
        self.seen: dict[int, int] = {}
        self.frame = frame
        self.code = code

    def barrier(self) -> None:
        """The thread passed a ``syncthreads``: a new epoch, whose accesses start new requests."""
        self.epoch += 1
        self.seen.clear()


class Region:
    """An array the launch touches: a kernel argument ("global") or a shared-array declaration ("shared",
    ``nbytes`` per block)."""

    __slots__ = ("name", "memory", "slot", "itemsize", "nbytes")

    def __init__(self, name: str, memory: str, slot: int, itemsize: int, nbytes: int = 0) -> None:
        self.name = name
        self.memory = memory
        self.slot = slot
        self.itemsize = itemsize
        self.nbytes = nbytes


class Recorder:
    """The state of one instrumented launch of ``kernel`` over ``grid`` blocks of ``block`` threads."""

    def __init__(self, kernel: str, grid: tuple[int, int, int], block: tuple[int, int, int], limit: int,
                 code: Any = None) -> None:
        self.kernel = kernel
        self.code = code  # the kernel function's code object: its frame holds each thread's access sites
        self.grid = grid
        self.block = block
        self.limit = limit
        self.lock = threading.Lock()
        self.regions: list[Region] = []
        self.probes: list[ThreadProbe] = []
        self.sites: dict[tuple[Any, int], int] = {}  # (code object, bytecode offset) of an access -> site id
        self.positions: dict[tuple[Any, object], int] = {}  # (code object, source position) -> site id
        self.shared: dict[object, tuple[tuple[int, int, int], TracedArray]] = {}
        self.races: list[Race] = []
        self.race_count = 0
        self.out_of_bounds: list[OutOfBounds] = []
        self.out_of_bounds_count = 0

    # -- set-up ------------------------------------------------------------------------------
    def _region(self, name: str, memory: str, itemsize: int, nbytes: int = 0) -> Region:
        region = Region(name, memory, len(self.regions), itemsize, nbytes)
        self.regions.append(region)
        return region

    def argument(self, name: str, value: Any) -> Any:
        """A kernel argument as the kernel should see it: arrays traced as global memory, the rest unchanged."""
        data = getattr(value, "_ary", value)  # the simulator's device arrays wrap a numpy array
        if isinstance(data, np.ndarray) and data.ndim > 0:
            return TracedArray(data, self._region(name, "global", data.itemsize), self, None)
        return value

    def shared_array(self, site: object, name: str, make: Callable[[], np.ndarray]) -> TracedArray:
        """The calling block's shared array declared at ``site``; the first thread of a block makes it with ``make``.

        Blocks run one after the other, so each new block gets a fresh buffer and a fresh shadow.
        """
        block = tuple(_current_thread().blockIdx)
        with self.lock:
            current = self.shared.get(site)
            if current is None or current[0] != block:
                region = current[1].region if current is not None else None
                buffer = make()
                if region is None:
                    region = self._region(name, "shared", buffer.itemsize, buffer.nbytes)
                current = (block, TracedArray(buffer, region, self, {}))
                self.shared[site] = current
            return current[1]

    def register(self, thread: Any) -> ThreadProbe:
        """Attach a probe to a simulated thread (a ``BlockThread``) on its first access or syncthreads.

        The probe keeps the kernel's frame: the outermost frame of the kernel's code below the
        caller (the caller's own frame if the kernel's code is not found there).
        """
        caller = frame = sys._getframe(2)
        while frame is not None and frame.f_code is not self.code:
            frame = frame.f_back
        frame = frame or caller
        probe = ThreadProbe(tuple(thread.blockIdx), tuple(thread.threadIdx), thread.thread_id, len(self.regions),
                            frame, frame.f_code)
        thread._mlsys_probe = probe
        self.probes.append(probe)
        return probe

    def record(self, probe: ThreadProbe, region: int, store: int, address: int) -> None:
        """Log an access of ``region`` by ``probe``'s thread at the site its kernel frame is at."""
        key = (probe.code, probe.frame.f_lasti)
        site = self.sites.get(key)
        if site is None:  # the position, not the offset: Python 3.11 moves it once it specializes an instruction
            with self.lock:
                position = (probe.code, source_position(*key))
                site = self.sites[key] = self.positions.setdefault(position, len(self.positions))
        seen = probe.seen
        occurrence = seen.get(site, 0)
        seen[site] = occurrence + 1
        probe.log.append((site, probe.epoch, occurrence, region, store, address))

    # -- what the probes report ----------------------------------------------------------------
    def shared_access(self, probe: ThreadProbe, array: TracedArray, address: int, index: tuple, write: bool) -> None:
        """Check a shared access against the shadow entry of its address, then record it there."""
        me = probe.linear
        with self.lock:
            entry = array.shadow.get(address)
            if entry is None or entry[0] != probe.epoch:  # first access since the last syncthreads
                array.shadow[address] = [probe.epoch, me, _NONE, _NONE] if write else [probe.epoch, _NONE, me, _NONE]
                return
            _, writer, reader, another = entry
            other = _NONE
            if writer != _NONE and writer != me:
                kind, other = ("write-after-write" if write else "read-after-write"), writer
            elif write and reader != _NONE and (reader != me or another != _NONE):
                kind, other = "write-after-read", (reader if reader != me else another)
            if write:
                entry[1] = me
            elif reader == _NONE:
                entry[2] = me
            elif reader != me and another == _NONE:
                entry[3] = me
            if other != _NONE:
                self.race_count += 1
                if len(self.races) < self.limit:
                    self.races.append(Race(self.kernel, probe.block, probe.thread, self._dim3(other),
                                           array.region.name, _plain(index), kind))

    def bad_index(self, probe: ThreadProbe, array: TracedArray, index: tuple, access: str) -> None:
        """Record an out-of-bounds access."""
        with self.lock:
            self.out_of_bounds_count += 1
            if len(self.out_of_bounds) < self.limit:
                self.out_of_bounds.append(OutOfBounds(self.kernel, probe.block, probe.thread, array.region.name,
                                                      array.region.memory, _plain(index), array.shape, access))

    def _dim3(self, linear: int) -> tuple[int, int, int]:
        bx, by, _ = self.block
        return linear % bx, (linear // bx) % by, linear // (bx * by)

    # -- the result ----------------------------------------------------------------------------
    def finish(self) -> LaunchRecord:
        """The launch's counts per (block, thread), per array, and the problems found."""
        gx, gy, gz = self.grid
        bx, by, bz = self.block
        width = 2 * len(self.regions)
        per_probe = np.zeros((len(self.probes), width), dtype=np.int64)
        for row, probe in zip(per_probe, self.probes):
            row[:len(probe.counters)] = probe.counters
        blocks = np.array([x + gx * (y + gy * z) for x, y, z in (p.block for p in self.probes)], dtype=np.int64)
        threads = np.array([p.linear for p in self.probes], dtype=np.int64)
        counts = {}
        for kind in COUNT_KINDS:
            memory, op = kind.split("_")
            columns = [2 * r.slot + (op == "writes") for r in self.regions if r.memory == memory]
            grid = np.zeros((gx * gy * gz, bx * by * bz), dtype=np.int64)
            np.add.at(grid, (blocks, threads), per_probe[:, columns].sum(axis=1))
            counts[kind] = grid
        totals = per_probe.sum(axis=0)
        log = np.array(list(itertools.chain.from_iterable(p.log for p in self.probes)), dtype=np.int64).reshape(-1, 6)
        probe_of_row = np.repeat(np.arange(len(self.probes)), [len(p.log) for p in self.probes])
        requests, warps = analyze(np.column_stack([probe_of_row, log]), blocks, threads, bx * by * bz,
                                  [r.itemsize for r in self.regions], [r.memory == "shared" for r in self.regions])
        arrays = tuple(ArrayTraffic(r.name, r.memory, r.itemsize, int(totals[2 * r.slot]), int(totals[2 * r.slot + 1]),
                                    requests.get((r.slot, False), Requests()), requests.get((r.slot, True), Requests()))
                       for r in self.regions)
        return LaunchRecord(self.kernel, self.grid, self.block, counts, arrays, tuple(self.races), self.race_count,
                            tuple(self.out_of_bounds), self.out_of_bounds_count, warps,
                            sum(r.nbytes for r in self.regions))


class TracedArray:
    """A numpy array seen by a simulated kernel, counting and checking every element access.

    ``shadow`` is the race-detection state (dict address -> entry) of a shared array, None for
    global memory. Indexing with fewer indices than dimensions, or with slices, gives a traced
    view of the same region (their bounds follow numpy's rules); element accesses through the view
    are counted like any other.
    """

    __slots__ = ("data", "region", "recorder", "shadow", "offset", "shape", "ndim", "size", "dtype", "_strides",
                 "_fill", "_reads", "_writes")

    def __init__(self, data: np.ndarray, region: Region, recorder: Recorder, shadow: dict | None,
                 offset: int = 0) -> None:
        self.data = data
        self.region = region
        self.recorder = recorder
        self.shadow = shadow
        self.offset = offset  # byte address of data[0, ..., 0] in the region's buffer
        self.shape = data.shape
        self.ndim = data.ndim
        self.size = data.size
        self.dtype = data.dtype
        self._strides = data.strides
        self._fill = data.dtype.type(np.nan if data.dtype.kind in "fc" else 0)
        self._reads = 2 * region.slot
        self._writes = 2 * region.slot + 1

    def __len__(self) -> int:
        return self.shape[0]

    def __iter__(self) -> Any:  # ``for v in a`` in a kernel: without this Python would index past the end
        return (self[i] for i in range(self.shape[0]))

    def _address(self, index: Any) -> int | None:
        """Byte address of the element at ``index``; -1 if out of bounds; None if it is not one element."""
        if type(index) is not tuple:
            index = (index,)
        if len(index) != self.ndim:
            return None
        address = self.offset
        inside = True
        for i, n, stride in zip(index, self.shape, self._strides):
            if type(i) is not int:
                try:
                    i = operator.index(i)
                except TypeError:  # a slice: not one element
                    return None
            inside = inside and 0 <= i < n
            address += i * stride
        return address if inside else -1

    def _probe(self) -> ThreadProbe:
        thread = _current_thread()
        try:
            return thread._mlsys_probe
        except AttributeError:
            return self.recorder.register(thread)

    def _count(self, probe: ThreadProbe, column: int) -> None:
        try:
            probe.counters[column] += 1
        except IndexError:  # a shared array declared after this thread's first access
            probe.counters.extend([0] * (2 * len(self.recorder.regions) - len(probe.counters)))
            probe.counters[column] += 1

    def _view(self, index: Any) -> TracedArray:
        view = self.data[index]
        offset = self.offset + view.__array_interface__["data"][0] - self.data.__array_interface__["data"][0]
        return TracedArray(view, self.region, self.recorder, self.shadow, offset)

    def __getitem__(self, index: Any) -> Any:
        address = self._address(index)
        if address is None:
            return self._view(index)
        probe = self._probe()
        if address < 0:
            self.recorder.bad_index(probe, self, index, "read")
            return self._fill
        self._count(probe, self._reads)
        self.recorder.record(probe, self.region.slot, 0, address)
        if self.shadow is not None:
            self.recorder.shared_access(probe, self, address, index, False)
        return self.data[index]

    def __setitem__(self, index: Any, value: Any) -> None:
        address = self._address(index)
        if address is None:  # slice assignment: one write per element of the view
            view = self._view(index)
            values = np.broadcast_to(value, view.shape)
            for position in np.ndindex(*view.shape):
                view[position] = values[position]
            return
        probe = self._probe()
        if address < 0:
            self.recorder.bad_index(probe, self, index, "write")
            return
        self._count(probe, self._writes)
        self.recorder.record(probe, self.region.slot, 1, address)
        if self.shadow is not None:
            self.recorder.shared_access(probe, self, address, index, True)
        self.data[index] = value

    def atomic(self, operation: Callable[..., Any], index: Any, args: tuple) -> Any:
        """Run a simulator atomic ``operation(data, *args)`` at ``index``: one read and one write, never a race."""
        address = self._address(index)
        if address is None:
            raise TypeError(f"atomic operations take one element of {self.region.name}, got index {index!r}")
        probe = self._probe()
        if address < 0:
            self.recorder.bad_index(probe, self, index, "atomic")
            return self._fill
        self._count(probe, self._reads)
        self._count(probe, self._writes)
        return operation(self.data, *args)


def source_position(code: Any, offset: int) -> object:
    """(line, end line, column, end column) of the instruction at bytecode ``offset`` of ``code`` (its line
    before Python 3.11); the inline caches that follow an instruction share its position."""
    positions = getattr(code, "co_positions", None)
    if positions is None:
        return next(line for start, end, line in code.co_lines() if start <= offset < end)
    return next(itertools.islice(positions(), offset // 2, None))


def _plain(index: Any) -> tuple[int, ...]:
    """An index as a tuple of Python ints (numpy integers converted) for reports."""
    index = index if type(index) is tuple else (index,)
    return tuple(int(i) for i in index)


_ASSIGNED = re.compile(r"^\s*([A-Za-z_]\w*)\s*=")


@functools.lru_cache(maxsize=None)
def declared_name(filename: str, lineno: int) -> str:
    """The variable a shared array is assigned to on that source line (``sA = cuda.shared.array(...)`` -> "sA")."""
    match = _ASSIGNED.match(linecache.getline(filename, lineno))
    return match.group(1) if match else f"shared@{filename.rsplit('/', 1)[-1]}:{lineno}"

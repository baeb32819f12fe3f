"""What an instrumented simulation found: memory traffic per thread and per warp, shared-memory races,
out-of-bounds accesses.

:func:`mlsys_lib.kernels.instrument` fills a :class:`Report` with one :class:`LaunchRecord` per
kernel launch. Blocks and threads are named as CUDA names them, ``(x, y, z)`` tuples; where a
launch's counts are arrays, blocks and threads are numbered linearly with x fastest
(``x + X * (y + Y * z)``), as ``threadIdx``/``blockIdx`` linearize in CUDA.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..gpu.gpus import Occupancy, occupancy

Dim3 = tuple[int, int, int]

#: The four counters kept for every thread: element accesses of global and shared memory.
COUNT_KINDS = ("global_reads", "global_writes", "shared_reads", "shared_writes")


@dataclass(frozen=True)
class Race:
    """Two threads of one block touched a shared address between two syncthreads, at least one writing.

    ``thread`` made the access that exposed the race (``kind`` says which: ``read-after-write``,
    ``write-after-write`` or ``write-after-read``); ``other`` is the thread whose earlier access
    it conflicts with. Which of the two comes first depends on scheduling; that they conflict does not.
    """

    kernel: str
    block: Dim3
    thread: Dim3
    other: Dim3
    array: str
    index: tuple[int, ...]
    kind: str

    def __str__(self) -> str:
        verb = "read" if self.kind == "write-after-read" else "wrote"
        return (f"{self.kernel}: block {self.block} thread {self.thread}: {self.kind} race on shared "
                f"{self.array}{list(self.index)}: thread {self.other} {verb} it since the last syncthreads")


@dataclass(frozen=True)
class OutOfBounds:
    """An access outside an array: an index ``< 0`` or ``>= shape`` in some dimension.

    On a GPU it reads garbage or corrupts another allocation; under instrumentation a read returns
    NaN (0 for integer arrays) and a write is dropped, so the launch runs on and every bad access
    is reported.
    """

    kernel: str
    block: Dim3
    thread: Dim3
    array: str
    memory: str
    index: tuple[int, ...]
    shape: tuple[int, ...]
    access: str

    def __str__(self) -> str:
        return (f"{self.kernel}: block {self.block} thread {self.thread}: out-of-bounds {self.access} of "
                f"{self.memory} {self.array}{list(self.index)}, shape {self.shape}")


@dataclass(frozen=True)
class Requests:
    """Warp-level memory requests (loads or stores) as Nsight Compute counts them; see :mod:`.warps`.

    ``sectors`` (32-byte segments, summed over requests) is counted for global memory,
    ``wavefronts`` and ``bank_conflicts`` for shared memory; the other fields stay 0.
    """

    requests: int = 0
    sectors: int = 0
    wavefronts: int = 0
    bank_conflicts: int = 0

    def __add__(self, other: Requests) -> Requests:
        return Requests(self.requests + other.requests, self.sectors + other.sectors,
                        self.wavefronts + other.wavefronts, self.bank_conflicts + other.bank_conflicts)

    @property
    def sectors_per_request(self) -> float:
        """Average sectors per request (4 for a coalesced float32 warp, 32 for a stride of 32 floats); 0 if none."""
        return self.sectors / self.requests if self.requests else 0.0


@dataclass(frozen=True)
class WarpStats:
    """A launch's warp requests (every array, loads and stores) and the divergent ones among them.

    A request is divergent when only some of its warp's threads made it; ``divergent_warps``
    counts the warps with at least one divergent request.
    """

    requests: int = 0
    divergent_requests: int = 0
    divergent_warps: int = 0

    @property
    def branch_efficiency(self) -> float:
        """Fraction of requests the whole warp made (approximates Nsight's branch efficiency); 1 without requests."""
        return 1 - self.divergent_requests / self.requests if self.requests else 1.0


@dataclass(frozen=True)
class ArrayTraffic:
    """Element reads and writes of one array over a whole launch (``memory``: "global" or "shared"),
    and the warp requests they form (``loads``, ``stores``)."""

    name: str
    memory: str
    itemsize: int
    reads: int
    writes: int
    loads: Requests = Requests()
    stores: Requests = Requests()


@dataclass(frozen=True, eq=False)
class LaunchRecord:
    """One kernel launch; ``counts[kind]`` is int64 (n_blocks, threads_per_block) for each of :data:`COUNT_KINDS`.

    ``races`` and ``out_of_bounds`` keep the first reports (up to the ``limit`` given to
    ``instrument``); ``race_count`` and ``out_of_bounds_count`` count them all. ``warps`` counts
    warp requests and divergence; ``shared_bytes_per_block`` is the shared memory one block declared.
    """

    kernel: str
    grid: Dim3
    block: Dim3
    counts: dict[str, np.ndarray]
    arrays: tuple[ArrayTraffic, ...]
    races: tuple[Race, ...]
    race_count: int
    out_of_bounds: tuple[OutOfBounds, ...]
    out_of_bounds_count: int
    warps: WarpStats = WarpStats()
    shared_bytes_per_block: int = 0

    def total(self, kind: str) -> int:
        """Sum of ``counts[kind]`` over every thread of every block."""
        return int(self.counts[_kind(kind)].sum())

    def per_block(self, kind: str) -> np.ndarray:
        """``counts[kind]`` summed over each block's threads: int64 (n_blocks,)."""
        return self.counts[_kind(kind)].sum(axis=1)

    def array(self, name: str) -> ArrayTraffic:
        """The traffic of the argument or shared array called ``name``; KeyError lists the names."""
        for traffic in self.arrays:
            if traffic.name == name:
                return traffic
        raise KeyError(f"no array {name!r} in launch of {self.kernel}; arrays: {[a.name for a in self.arrays]}")

    @property
    def global_bytes(self) -> int:
        """Bytes moved to and from global memory: every element read or written, times its size."""
        return sum((a.reads + a.writes) * a.itemsize for a in self.arrays if a.memory == "global")

    def requests(self, memory: str, op: str) -> Requests:
        """Warp requests of every ``memory`` ("global" or "shared") array, ``op`` "loads" or "stores"."""
        _memory_op(memory, op)
        return sum((getattr(a, op) for a in self.arrays if a.memory == memory), Requests())

    @property
    def bank_conflicts(self) -> int:
        """Extra shared-memory wavefronts of loads and stores, all shared arrays."""
        return self.requests("shared", "loads").bank_conflicts + self.requests("shared", "stores").bank_conflicts

    def occupancy(self, registers_per_thread: int, gpu: str = "A100") -> Occupancy:
        """Theoretical occupancy of this launch's block size and shared memory on ``gpu``, at the registers given."""
        bx, by, bz = self.block
        return occupancy(bx * by * bz, registers_per_thread, self.shared_bytes_per_block, gpu)

    @property
    def ok(self) -> bool:
        """True when the launch neither raced on shared memory nor accessed out of bounds."""
        return self.race_count == 0 and self.out_of_bounds_count == 0


@dataclass
class Report:
    """Everything recorded while an ``instrument()`` block was active, one :class:`LaunchRecord` per launch."""

    launches: list[LaunchRecord] = field(default_factory=list)

    def total(self, kind: str) -> int:
        """A kind of :data:`COUNT_KINDS` summed over every launch."""
        return sum(launch.total(kind) for launch in self.launches)

    @property
    def global_reads(self) -> int:
        """Element reads of global memory, all launches."""
        return self.total("global_reads")

    @property
    def global_writes(self) -> int:
        """Element writes of global memory, all launches."""
        return self.total("global_writes")

    @property
    def shared_reads(self) -> int:
        """Element reads of shared memory, all launches."""
        return self.total("shared_reads")

    @property
    def shared_writes(self) -> int:
        """Element writes of shared memory, all launches."""
        return self.total("shared_writes")

    def requests(self, memory: str, op: str) -> Requests:
        """Warp requests of ``memory`` ("global" or "shared"), ``op`` "loads" or "stores", all launches."""
        _memory_op(memory, op)
        return sum((launch.requests(memory, op) for launch in self.launches), Requests())

    @property
    def global_load_sectors(self) -> int:
        """32-byte sectors the warps' global loads touched, all launches."""
        return self.requests("global", "loads").sectors

    @property
    def global_store_sectors(self) -> int:
        """32-byte sectors the warps' global stores touched, all launches."""
        return self.requests("global", "stores").sectors

    @property
    def bank_conflicts(self) -> int:
        """Extra shared-memory wavefronts caused by bank conflicts, all launches."""
        return sum(launch.bank_conflicts for launch in self.launches)

    @property
    def divergent_requests(self) -> int:
        """Warp requests made by only some of the warp's threads, all launches."""
        return sum(launch.warps.divergent_requests for launch in self.launches)

    @property
    def global_bytes(self) -> int:
        """Global-memory traffic of every launch [bytes]."""
        return sum(launch.global_bytes for launch in self.launches)

    @property
    def races(self) -> list[Race]:
        """The races kept from every launch, in launch order."""
        return [race for launch in self.launches for race in launch.races]

    @property
    def out_of_bounds(self) -> list[OutOfBounds]:
        """The out-of-bounds accesses kept from every launch, in launch order."""
        return [oob for launch in self.launches for oob in launch.out_of_bounds]

    @property
    def ok(self) -> bool:
        """True when no launch raced on shared memory or accessed out of bounds."""
        return all(launch.ok for launch in self.launches)

    def summary(self) -> str:
        """A few lines per launch: traffic totals, then the problems found (first five of each)."""
        lines = []
        for launch in self.launches:
            totals = ", ".join(f"{kind.replace('_', ' ')} {launch.total(kind)}" for kind in COUNT_KINDS)
            lines.append(f"{launch.kernel}[grid {launch.grid}, block {launch.block}]: {totals}")
            if launch.warps.requests:
                loads, stores = launch.requests("global", "loads"), launch.requests("global", "stores")
                lines.append(f"  warps: global sectors/request {loads.sectors_per_request:.1f} (loads), "
                             f"{stores.sectors_per_request:.1f} (stores); shared bank conflicts "
                             f"{launch.bank_conflicts}; divergent requests {launch.warps.divergent_requests} "
                             f"of {launch.warps.requests}")
            for problems, count, what in ((launch.races, launch.race_count, "races"),
                                          (launch.out_of_bounds, launch.out_of_bounds_count, "out-of-bounds accesses")):
                if count:
                    lines.append(f"  {count} {what}, first ones:")
                    lines.extend(f"    {problem}" for problem in problems[:5])
        return "\n".join(lines) if lines else "no kernel launched"


def _memory_op(memory: str, op: str) -> None:
    if memory not in ("global", "shared") or op not in ("loads", "stores"):
        raise ValueError(f"expected memory 'global' or 'shared' and op 'loads' or 'stores', got {memory!r}, {op!r}")


def _kind(kind: str) -> str:
    if kind not in COUNT_KINDS:
        raise ValueError(f"unknown count kind {kind!r}; expected one of {', '.join(COUNT_KINDS)}")
    return kind

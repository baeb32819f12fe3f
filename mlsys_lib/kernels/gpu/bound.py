"""What a launch can reach on a GPU, proved without one: occupancy, waves and the roofline bound.

For one launch of a :class:`~mlsys_lib.kernels.plan.KernelPlan` on a board of
:data:`~mlsys_lib.kernels.gpu.gpus.GPUS`, given what the compiled kernel uses (registers per
thread, static shared memory per block: :func:`mlsys_lib.kernels.gpu.targets.resources` reads them
from the cubin):

* **blocks per SM** and **occupancy** (:func:`~mlsys_lib.kernels.gpu.gpus.occupancy`);
* **waves** = grid blocks / (blocks per SM x SMs): how many rounds of resident blocks the launch
  takes. Under one full wave some SMs idle for the whole launch; a last partial wave idles some
  for its length, so a kernel wants several full waves;
* the **roofline bound** with *compulsory* traffic (every input read once, the result written
  once: ``plan.compulsory_bytes``): the shortest time any kernel could take,
  ``max(flops / peak FLOP/s, compulsory bytes / bandwidth)`` [s], i.e. the attainable
  ``min(peak, bandwidth x intensity)`` FLOP/s. A measured time is reported as a percentage of
  this bound; it can never exceed 100%, and the bandwidth achieved on compulsory bytes can never
  exceed the physical peak (re-reads the caches absorbed are not counted, unlike ``modeled_bytes``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..plan import KernelPlan
from .gpus import gpu_spec, occupancy


def roofline_seconds(flops: float, compulsory_bytes: float, peak_flops: float, bandwidth: float) -> float:
    """The roofline bound [s]: ``max(flops / peak_flops, compulsory_bytes / bandwidth)`` (FLOP, byte, FLOP/s, byte/s)."""
    if peak_flops <= 0 or bandwidth <= 0:
        raise ValueError(f"peaks must be positive, got {peak_flops} FLOP/s and {bandwidth} byte/s")
    if flops < 0 or compulsory_bytes <= 0:
        raise ValueError(f"need flops >= 0 and compulsory_bytes > 0, got {flops} and {compulsory_bytes}")
    return max(flops / peak_flops, compulsory_bytes / bandwidth)


def percent_of_bound(seconds: float, bound_seconds: float) -> float:
    """``100 x bound / measured``: how close a measured time [s] came to the roofline bound [s]."""
    if seconds <= 0:
        raise ValueError(f"a measured time must be positive, got {seconds} s")
    return 100.0 * bound_seconds / seconds


def compulsory_bytes(plan: KernelPlan) -> int:
    """``plan.compulsory_bytes``; ValueError if the plan's wrapper did not state it."""
    if plan.compulsory_bytes is None:
        raise ValueError(f"{plan.name}: its plan states no compulsory traffic")
    return plan.compulsory_bytes


@dataclass(frozen=True)
class LaunchReport:
    """One launch on one board: its resources, residency, waves and roofline bound.

    ``registers`` per thread, ``shared_bytes`` per block; ``waves`` = blocks / (``blocks_per_sm`` x SMs),
    ``full_waves`` its whole part; ``compulsory_bytes`` [byte], ``flops`` [FLOP], ``bound_seconds`` [s],
    ``compute_bound``: the bound is the FP32 peak (intensity at or past the ridge).
    """

    kernel: str
    gpu: str
    blocks: int
    block_threads: int
    registers: int
    shared_bytes: int
    blocks_per_sm: int
    occupancy: float
    limited_by: tuple[str, ...]
    waves: float
    flops: int
    compulsory_bytes: int
    bound_seconds: float
    compute_bound: bool

    @property
    def full_waves(self) -> int:
        return math.floor(self.waves)

    def line(self) -> str:
        roof = "FP32 peak" if self.compute_bound else "bandwidth"
        return (f"{self.kernel:<34} {self.gpu:<5} {self.blocks:>7} x {self.block_threads:<4} {self.registers:>4} "
                f"{self.shared_bytes:>7} {self.blocks_per_sm:>3} {100 * self.occupancy:>5.1f}% {self.waves:>7.2f} "
                f"{self.compulsory_bytes / 1e6:>9.1f} {self.bound_seconds * 1e3:>9.3f} {roof}")


HEADER = (f"{'kernel':<34} {'GPU':<5} {'blocks':>7} x {'thr':<4} {'regs':>4} {'shared':>7} {'/SM':>3} {'occ':>6} "
          f"{'waves':>7} {'MB compl':>9} {'bound ms':>9} limited by")


def main_step(plan: KernelPlan) -> int:
    """Index of ``plan``'s launch with the most blocks (its only one for most kernels): the one reported."""
    return max(range(len(plan.steps)), key=lambda i: math.prod(plan.steps[i].grid))


def launch_report(plan: KernelPlan, gpu: str, registers: int, shared_bytes: int) -> LaunchReport:
    """The :class:`LaunchReport` of ``plan``'s largest launch (:func:`main_step`) on ``gpu``.

    ``registers`` per thread and ``shared_bytes`` of static shared memory per block of that launch's
    kernel, as the cubin for the board's architecture says. The bound is the whole plan's (all launches).
    """
    step = plan.steps[main_step(plan)]
    spec = gpu_spec(gpu)
    threads = math.prod(step.block)
    occ = occupancy(threads, registers, shared_bytes, gpu)
    blocks = math.prod(step.grid)
    needed = compulsory_bytes(plan)
    bound = roofline_seconds(plan.flops, needed, spec.fp32_flops, spec.bandwidth)
    return LaunchReport(plan.name, gpu, blocks, threads, registers, shared_bytes, occ.active_blocks, occ.fraction,
                        occ.limited_by, blocks / (occ.active_blocks * spec.sms), plan.flops, needed, bound,
                        compute_bound=plan.flops / spec.fp32_flops >= needed / spec.bandwidth)


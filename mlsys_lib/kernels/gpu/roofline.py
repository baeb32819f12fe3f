"""Placing kernels on a roofline: FLOPs and bytes counted under the simulator, time measured on a GPU.

``measure(plan)`` gives a :class:`KernelMeasurement`:

* under the simulator the plan runs instrumented and ``bytes`` is the global traffic it *counted*;
  there is no meaningful time, so the roofline point sits on the roof at the kernel's intensity
  (the best the kernel could do: "the plots come from counted work instead of time");
* on a GPU the plan is timed with CUDA events and ``bytes`` is the plan's *modeled* traffic (the
  lecture's formula, which the tests check equals the simulator's count), so the point sits at
  the FLOP/s the kernel achieved.

``roofline_points`` turns measurements into the ``points`` that
:func:`mlsys_lib.viz.plot_roofline` draws.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Mapping

from ...tensor.roofline import Roofline, arithmetic_intensity
from .device import current_backend
from ..sim.instrumentation import instrument
from ..plan import KernelPlan
from .timing import time_plan


@dataclass(frozen=True)
class KernelMeasurement:
    """A kernel's useful work ``flops`` [FLOP], global traffic ``bytes`` [byte] and, on a GPU, ``seconds`` per run.

    ``source`` says where ``bytes`` comes from: "counted" (instrumented simulator) or "modeled".
    """

    name: str
    flops: int
    bytes: int
    seconds: float | None
    source: str

    @property
    def intensity(self) -> float:
        """Arithmetic intensity [FLOP/byte]."""
        return arithmetic_intensity(self.flops, self.bytes)

    @property
    def gflops(self) -> float | None:
        """Achieved GFLOP/s, None when not timed."""
        return None if self.seconds is None else self.flops / self.seconds / 1e9

    @property
    def gbps(self) -> float | None:
        """Achieved global-memory bandwidth [GB/s], None when not timed."""
        return None if self.seconds is None else self.bytes / self.seconds / 1e9


def measure(plan: KernelPlan, repeats: int = 10) -> KernelMeasurement:
    """Count ``plan``'s traffic under the simulator, or time it (``repeats`` runs, CUDA events) on a GPU."""
    if current_backend() == "sim":
        with instrument() as report:
            plan.run()
        return KernelMeasurement(plan.name, plan.flops, report.global_bytes, None, "counted")
    return KernelMeasurement(plan.name, plan.flops, plan.modeled_bytes, time_plan(plan, repeats), "modeled")


def roofline_points(measurements: Iterable[KernelMeasurement], roofline: Roofline
                    ) -> Mapping[str, tuple[float, float]]:
    """``{label: (intensity [FLOP/byte], FLOP/s)}`` for ``plot_roofline``.

    Timed kernels are placed at the FLOP/s they achieved; counted-only ones at ``roofline``'s
    attainable FLOP/s for their intensity. Labels repeat a name with ``#2``, ``#3``... when needed.
    """
    points: dict[str, tuple[float, float]] = {}
    for m in measurements:
        label = m.name
        copy = 2
        while label in points:
            label, copy = f"{m.name} #{copy}", copy + 1
        achieved = m.flops / m.seconds if m.seconds is not None else roofline.attainable(m.intensity)
        points[label] = (m.intensity, achieved)
    return points

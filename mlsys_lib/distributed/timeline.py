"""A rank's timeline on two lanes (compute, communication) and its Gantt chart."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from matplotlib.axes import Axes

__all__ = ["Interval", "Timeline", "plot_overlap"]

LANES = ("compute", "comm")
COLORS = {"F": "#4c72b0", "B": "#dd8452", "comm": "#55a868"}


@dataclass(frozen=True)
class Interval:
    """``label`` busy on ``lane`` ("compute" or "comm") from ``start`` to ``end`` seconds."""

    lane: str
    label: str
    start: float
    end: float


@dataclass
class Timeline:
    """The intervals of one rank, in the order they were scheduled."""

    rank: int
    intervals: list[Interval] = field(default_factory=list)

    def lane(self, lane: str) -> list[Interval]:
        """The intervals of ``lane`` ("compute" or "comm")."""
        if lane not in LANES:
            raise ValueError(f"unknown lane {lane!r}: expected one of {', '.join(LANES)}")
        return [i for i in self.intervals if i.lane == lane]

    def busy(self, lane: str) -> float:
        """Seconds ``lane`` is busy."""
        return sum(i.end - i.start for i in self.lane(lane))

    @property
    def step_time(self) -> float:
        """max(end of compute, end of the last communication), seconds."""
        return max((i.end for i in self.intervals), default=0.0)


def plot_overlap(timeline: Timeline, ax: Axes | None = None, title: str | None = None) -> Axes:
    """Gantt chart of ``timeline``: compute lane on top (forward blue, backward orange), all-reduces green below."""
    if ax is None:
        import matplotlib.pyplot as plt  # only when a new figure is wanted
        _, ax = plt.subplots(figsize=(10, 1.8), layout="constrained")
    for row, lane in enumerate(LANES):
        for interval in timeline.lane(lane):
            color = COLORS["comm"] if lane == "comm" else COLORS[interval.label[0]]
            ax.barh(row, interval.end - interval.start, left=interval.start, height=0.8, color=color,
                    edgecolor="white", linewidth=0.5)
    ax.set_ylim(len(LANES) - 0.5, -0.5)
    ax.set_yticks(range(len(LANES)), ["compute", "all-reduce"])
    ax.set_xlim(0, timeline.step_time or 1.0)
    ax.set_xlabel("time (s)")
    ax.set_title(title or f"rank {timeline.rank}: step {timeline.step_time * 1e3:.3g} ms, compute "
                 f"{timeline.busy('compute') * 1e3:.3g} ms, all-reduce {timeline.busy('comm') * 1e3:.3g} ms",
                 fontsize=9, loc="left")
    return ax

"""``simulate``: the timeline of a schedule for given F/B/W durations and send latency.

Returns a :class:`Timeline`: every action's start and end (seconds), the makespan, the bubble
fraction (idle share of p × makespan) and the peak in-flight activations of each stage.
"""

from __future__ import annotations

from dataclasses import dataclass

from .execution import execute
from .schedules import Action, Schedule
from .validation import validate


@dataclass(frozen=True)
class Interval:
    """``action`` ran on ``stage`` from ``start`` to ``end`` (seconds)."""

    stage: int
    action: Action
    start: float
    end: float


@dataclass(frozen=True)
class Timeline:
    """A simulated run: intervals in start order, makespan (s), busy time of each stage (s)."""

    schedule: Schedule
    intervals: tuple[Interval, ...]
    makespan: float
    busy: tuple[float, ...]

    @property
    def bubble_fraction(self) -> float:
        """Idle time over the whole area p × makespan: 1 − Σ busy / (p · makespan)."""
        return 1.0 - sum(self.busy) / (self.schedule.num_stages * self.makespan)

    @property
    def peak_activations(self) -> list[int]:
        """Per stage, the most chunk activations held at once (see ``Schedule.peak_activations``)."""
        return self.schedule.peak_activations()


def simulate(schedule: Schedule, forward: float = 1.0, backward: float = 1.0, weight: float = 0.0,
             latency: float = 0.0) -> Timeline:
    """Simulate ``schedule``: each action takes its duration, a result sent to another stage arrives
    ``latency`` seconds later.

    Durations are of one action (one microbatch through one chunk): ``forward`` (F); ``backward``
    the input gradient and ``weight`` the weight gradient. A split-backward schedule runs them as
    B and W; any other runs its B as the whole backward, ``backward + weight``. Raises ScheduleError
    for an invalid schedule, ValueError for a negative duration.
    """
    for name, value in (("forward", forward), ("backward", backward), ("weight", weight), ("latency", latency)):
        if not value >= 0:
            raise ValueError(f"{name} must be a duration >= 0 seconds, got {value!r}")
    validate(schedule)
    if schedule.split_backward:
        durations = {"F": forward, "B": backward, "W": weight}
    else:
        durations = {"F": forward, "B": backward + weight}
    times = execute(schedule, lambda action: durations[action.kind], latency)
    intervals = sorted((Interval(s, a, start, end) for (s, a), (start, end) in times.items()),
                       key=lambda i: (i.start, i.stage))
    busy = [0.0] * schedule.num_stages
    for interval in intervals:
        busy[interval.stage] += interval.end - interval.start
    makespan = max((i.end for i in intervals), default=0.0)
    return Timeline(schedule, tuple(intervals), makespan, tuple(busy))

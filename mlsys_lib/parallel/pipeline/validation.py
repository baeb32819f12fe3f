"""``validate``: a schedule is complete, runs each microbatch's F before its B (and B before W), and
cannot deadlock under blocking receives (see ``execution``)."""

from __future__ import annotations

from collections import Counter

from .execution import ScheduleError, execute
from .schedules import Action, Schedule


def expected_actions(schedule: Schedule) -> Counter[Action]:
    """Every action one stage must run exactly once: F and B (and W if split) of each microbatch and chunk."""
    kinds = "FBW" if schedule.split_backward else "FB"
    return Counter(Action(kind, i, c) for kind in kinds for i in range(schedule.num_microbatches)
                   for c in range(schedule.num_chunks))


def validate(schedule: Schedule) -> None:
    """Raise ScheduleError saying what is wrong, or return None for a valid schedule."""
    if len(schedule.stages) != schedule.num_stages:
        raise ScheduleError(f"{schedule.name}: {len(schedule.stages)} stage lists for {schedule.num_stages} stages")
    expected = expected_actions(schedule)
    for s, actions in enumerate(schedule.stages):
        counted = Counter(actions)
        if counted != expected:
            missing, extra = expected - counted, counted - expected
            raise ScheduleError(f"{schedule.name}: stage {s} is missing {sorted(map(str, missing))} and has "
                                f"unexpected or repeated {sorted(map(str, extra))}")
        position = {a: n for n, a in enumerate(actions)}
        for a in actions:
            before = {"B": "F", "W": "B"}.get(a.kind)
            if before and position[Action(before, a.microbatch, a.chunk)] > position[a]:
                raise ScheduleError(f"{schedule.name}: stage {s} runs {a} before "
                                    f"{Action(before, a.microbatch, a.chunk)}")
    execute(schedule, lambda action: 1.0)

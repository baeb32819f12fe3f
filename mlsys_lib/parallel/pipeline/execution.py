"""Running a schedule: what each action waits for, and the order-respecting execution of every stage.

Model (the runner's): each stage runs its actions in list order; before an action it *receives*
what it needs from other stages (blocking), and after it *sends* its result (without blocking, like
``isend``). So an action can start once the stage is free and every action it depends on is done
(plus the send latency when that action ran on another stage):

* ``F(i, c)`` on virtual stage k needs ``F(i)`` on virtual stage k − 1 (the activations);
* ``B(i, c)`` needs ``F(i, c)`` on its own stage and ``B(i)`` on virtual stage k + 1 (the gradient);
* ``W(i, c)`` needs ``B(i, c)`` on its own stage.

Virtual stage k = c·p + s is chunk c of stage s. :func:`execute` runs each stage as far as it can go;
a blocked stage resumes when what it waits for is done. If some stage can never run its next action,
the schedule deadlocks and it raises ScheduleError naming what each stuck stage waits for.
"""

from __future__ import annotations

from collections.abc import Callable

from .schedules import Action, Schedule


class ScheduleError(ValueError):
    """A schedule that is incomplete, out of order, or deadlocks."""


Placed = tuple[int, Action]  # (stage, action)


def dependencies(schedule: Schedule, stage: int, action: Action) -> list[Placed]:
    """The (stage, action) pairs that must be done before ``action`` can run on ``stage``."""
    p, i = schedule.num_stages, action.microbatch
    k = action.chunk * p + stage  # virtual stage
    last = p * schedule.num_chunks - 1
    if action.kind == "F":
        return [] if k == 0 else [((k - 1) % p, Action("F", i, (k - 1) // p))]
    if action.kind == "B":
        own = [(stage, Action("F", i, action.chunk))]
        return own if k == last else own + [((k + 1) % p, Action("B", i, (k + 1) // p))]
    return [(stage, Action("B", i, action.chunk))]


def execute(schedule: Schedule, duration: Callable[[Action], float],
            latency: float = 0.0) -> dict[Placed, tuple[float, float]]:
    """Start and end time of every action, each stage running its list in order (see the module).

    ``duration(action)``: seconds of an action; ``latency``: seconds between the end of an action
    and the start of one on another stage that needs it. Raises ScheduleError on a deadlock.
    """
    p = schedule.num_stages
    times: dict[Placed, tuple[float, float]] = {}
    position, free = [0] * p, [0.0] * p
    waiting: dict[Placed, list[int]] = {}  # an action not yet run -> the stages blocked on it
    runnable = list(range(p))
    while runnable:
        s = runnable.pop()
        actions = schedule.stages[s]
        while position[s] < len(actions):
            action = actions[position[s]]
            needs = dependencies(schedule, s, action)
            missing = next((need for need in needs if need not in times), None)
            if missing is not None:
                waiting.setdefault(missing, []).append(s)
                break
            start = max([free[s]] + [times[(t, a)][1] + (latency if t != s else 0.0) for t, a in needs])
            free[s] = start + duration(action)
            times[(s, action)] = (start, free[s])
            runnable += waiting.pop((s, action), [])
            position[s] += 1
    stuck = [(s, actions[position[s]]) for s, actions in enumerate(schedule.stages) if position[s] < len(actions)]
    if stuck:
        def missing(s: int, a: Action) -> str:
            return ", ".join(f"{b} on stage {t}" for t, b in dependencies(schedule, s, a) if (t, b) not in times)
        waits = "; ".join(f"stage {s} at {a} waits for {missing(s, a)}" for s, a in stuck)
        raise ScheduleError(f"{schedule.name}: deadlock: {waits}")
    return times

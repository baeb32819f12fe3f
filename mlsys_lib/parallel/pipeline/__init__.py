"""Pipeline parallelism: schedules as data, their validation and simulation, closed forms, a runner.

* ``make_schedule(name, num_stages, num_microbatches, num_chunks=1)`` -> :class:`Schedule` for the
  names in ``SCHEDULES`` ("naive", "gpipe", "1f1b", "interleaved_1f1b", "zb_h1"); :class:`Action`
  and its makers ``F``, ``B``, ``W``.
* ``validate(schedule)``: complete, F before B before W, no deadlock (``ScheduleError`` otherwise).
* ``simulate(schedule, forward, backward, weight, latency)`` -> :class:`Timeline` (intervals,
  makespan, ``bubble_fraction``, ``peak_activations``); draw it with ``mlsys_lib.viz.plot_timeline``.
* Closed forms: ``gpipe_bubble_fraction`` ((p−1)/(p−1+m), share of the total), ``bubble_ratio``
  ((1/v)(p−1)/m, relative to the ideal time), ``share_of_total``.
* ``pipeline_train(group, schedule, layers, X, Y, steps, lr)`` on ``mlsys_lib.comm`` ranks, against
  single-process ``train``; ``init_mlp``, ``split_layers``.
"""

from .bubbles import bubble_ratio, gpipe_bubble_fraction, share_of_total
from .execution import ScheduleError, dependencies
from .runner import init_mlp, pipeline_train, split_layers, train
from .schedules import SCHEDULES, Action, B, F, Schedule, W, make_schedule
from .simulator import Interval, Timeline, simulate
from .validation import validate

__all__ = [
    "SCHEDULES", "Action", "F", "B", "W", "Schedule", "make_schedule", "validate", "ScheduleError", "dependencies",
    "simulate", "Timeline", "Interval", "gpipe_bubble_fraction", "bubble_ratio", "share_of_total",
    "pipeline_train", "train", "init_mlp", "split_layers",
]

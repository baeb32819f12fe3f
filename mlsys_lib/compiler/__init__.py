"""ML compilation: tensor expressions, schedules, Numba code generation (Lab 9)."""

from . import expr as te
from .codegen import Kernel, build, lower
from .expr import Tensor, compute, placeholder, reduce_axis
from .interpret import evaluate
from .schedule import Loop, Schedule, ScheduleError, Stage, create_schedule

__all__ = ["te", "Tensor", "compute", "placeholder", "reduce_axis", "evaluate", "Loop", "Schedule",
           "ScheduleError", "Stage", "create_schedule", "Kernel", "build", "lower"]

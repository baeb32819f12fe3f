"""ML compilation: tensor expressions, schedules, Numba code generation (Lab 9)."""

from . import expr as te
from .codegen import Kernel, build, lower
from .expr import Tensor, compute, placeholder, reduce_axis
from .interpret import evaluate
from .schedule import Loop, Schedule, ScheduleError, Stage, create_schedule

__all__ = ["te", "Tensor", "compute", "placeholder", "reduce_axis", "evaluate", "Loop", "Schedule",
           "ScheduleError", "Stage", "create_schedule", "Kernel", "build", "lower"]
from .features import feature_names, footprints
from .measure import Measurement, TuningLog, time_config
from .space import Space, conv2d_space, matmul_space
from .tuner import evolutionary_search, model_guided_search, random_search, tune

__all__ += ["footprints", "feature_names", "Measurement", "TuningLog", "time_config", "Space", "matmul_space",
            "conv2d_space", "random_search", "evolutionary_search", "model_guided_search", "tune"]

"""ML compilation (Lab 9): from a tensor expression to a tuned kernel, and the JIT in front of it.

* **Algorithm** (:mod:`.expr`, :mod:`.ops`): ``placeholder``, ``compute``, ``reduce_axis`` and
  operator definitions (matmul, batch matmul, conv2d, bias+relu, softmax); :func:`evaluate` is
  their meaning in numpy (:mod:`.interpret`).
* **Schedule** (:mod:`.schedule`): split, tile, reorder, fuse, unroll, vectorize, parallel,
  cache_write, compute_at, compute_inline, each checked for legality (:class:`ScheduleError`);
  :func:`lower` prints the generated Python, :func:`build` compiles it with Numba (:mod:`.codegen`);
  :func:`count_traffic` runs it against a model cache (:mod:`.traffic`).
* **Legality by dependences** (:mod:`.dependence`): distance vectors, interchange, parallel loops, tiling.
* **Search** (:mod:`.space`, :mod:`.features`, :mod:`.measure`, :mod:`.tuner`): template spaces,
  loop-nest features, timing with a tuning log, random / evolutionary / model-guided search.
* **JIT** (:mod:`.guards`, :mod:`.jit`): trace autodiff functions into the graph IR, cache by guard keys
  with shape buckets, report graph breaks.
"""

from . import expr as te
from . import ops
from .codegen import Kernel, build, lower
from .dependence import LoopNest, dependence_vectors, legal_by_execution, parallel_is_legal, permutation_is_legal
from .expr import Tensor, compute, placeholder, reduce_axis
from .features import axis_reach, feature_names, footprints
from .guards import guard_key, next_power_of_two
from .interpret import evaluate
from .jit import Compiled, GraphBreak, jit
from .measure import Measurement, TuningLog, time_config
from .schedule import Loop, Schedule, ScheduleError, Stage, create_schedule
from .space import Space, conv2d_space, matmul_space
from .traffic import Traffic, count_traffic
from .tuner import evolutionary_search, model_guided_search, random_search, tune

__all__ = [
    "te", "ops", "Tensor", "compute", "placeholder", "reduce_axis", "evaluate",
    "Loop", "Schedule", "ScheduleError", "Stage", "create_schedule", "Kernel", "build", "lower",
    "Traffic", "count_traffic",
    "LoopNest", "dependence_vectors", "legal_by_execution", "permutation_is_legal", "parallel_is_legal",
    "axis_reach", "footprints", "feature_names", "Measurement", "TuningLog", "time_config",
    "Space", "matmul_space", "conv2d_space", "random_search", "evolutionary_search", "model_guided_search", "tune",
    "guard_key", "next_power_of_two", "jit", "Compiled", "GraphBreak",
]

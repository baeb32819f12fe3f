"""Data-parallel training beyond one all-reduce (Lab 11): overlap, sharding, staleness.

* **DDP** (:mod:`.ddp`, :mod:`.timeline`): :class:`DistributedDataParallel` packs gradients into buckets in
  reverse layer order (PyTorch's rule) and issues each one's non-blocking all-reduce as soon as its
  gradients are ready during backward; ``no_sync()`` accumulates without communicating. The overlap of
  compute and communication is measured on the group's α-β clock (its :class:`Timeline`, drawn by
  :func:`plot_overlap`); :class:`LaneClock` / :func:`simulate_step` are the same model without data and
  :func:`modelled_step_time` its closed form.
* **ZeRO** (:mod:`.zero`): :func:`zero_train` runs stages 0-3 on a ``comm`` group: Adam's states, then the
  gradients, then the parameters sharded per layer; bytes held tracked by :class:`MemoryTracker` and
  compared with Lab 4's calculator; bytes sent per step from the group's trace.
* **Parameter server** (:mod:`.param_server`): workers pull sharded parameters and push gradients under
  BSP, SSP (bounded staleness s) or ASP, with stragglers; a discrete-event :func:`schedule` on a modelled
  clock fixes the order, :func:`train` replays it in one process and :func:`train_on_group` on comm ranks.
"""

from .ddp import (DistributedDataParallel, LaneClock, LayerCost, all_reduce_gradients, assign_buckets, layer_costs,
                  modelled_step_time, simulate_step, step_time_vs_bucket_size)
from .param_server import (PSConfig, PSResult, convergence_curves, may_pull, plot_convergence, schedule,
                           synthetic_problem, train)
from .param_server import train_on_group
from .timeline import Interval, Timeline, plot_overlap
from .zero import MemoryTracker, ZeroResult, calculator_memory, check_stage, zero_train

__all__ = [
    "DistributedDataParallel", "all_reduce_gradients", "assign_buckets", "LayerCost", "layer_costs", "LaneClock",
    "simulate_step", "step_time_vs_bucket_size", "modelled_step_time", "Interval", "Timeline", "plot_overlap",
    "zero_train", "ZeroResult", "MemoryTracker", "calculator_memory", "check_stage",
    "PSConfig", "PSResult", "may_pull", "schedule", "train", "train_on_group", "convergence_curves", "plot_convergence",
    "synthetic_problem",
]

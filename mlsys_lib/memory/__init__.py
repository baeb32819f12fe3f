"""Memory: liveness, static memory planning, checkpointing, gradient accumulation, training-memory accounting.

* **Training graphs** (:mod:`.graph`, :mod:`.models`): :class:`TrainingGraph` of :class:`OpNode` reading and
  writing named tensors of known byte sizes; :class:`TrainingGraphBuilder` appends the backward pass to
  forward ops; :func:`mlp_graph`, :func:`transformer_graph`, :func:`resnet_graph` build whole networks.
* **Liveness** (:mod:`.liveness`): :func:`liveness` gives each tensor's :class:`Interval` (first and last
  step, bytes) in an execution order; :func:`live_bytes` per step; :func:`lower_bound`, the most live bytes.
* **Planning** (:mod:`.planning`): :class:`MemoryPlan` (offset per tensor, arena) from :func:`plan_no_reuse`,
  :func:`plan_first_fit`, :func:`plan_best_fit`, :func:`plan_inplace`; :func:`validate_plan`;
  :func:`plot_lifetimes` draws the time × address chart.
* **Checkpointing** (:mod:`.checkpoint`): :func:`checkpointed_gradients` keeps every k-th layer input and
  recomputes segments (peak memory, extra layer evaluations). **Accumulation** (:mod:`.accumulation`):
  :func:`accumulated_gradients` over micro-batches. **Swapping** (:mod:`.swap`): :func:`swap_in_timeline`.
* **Accounting** (:mod:`.accounting`): :func:`training_memory` (:class:`TrainingMemory`: parameters,
  gradients, optimizer states, activations per GPU; SGD/momentum/Adam, FP32/mixed, ZeRO 0-3) and
  :func:`transformer_layer_activation_bytes`.
"""

from .accounting import TrainingMemory, training_memory, transformer_layer_activation_bytes
from .accumulation import accumulated_gradients
from .chart import plot_lifetimes
from .checkpoint import CheckpointRun, checkpointed_gradients, layer_parameters
from .graph import OpNode, TrainingGraph, TrainingGraphBuilder
from .liveness import Interval, execution_order, live_bytes, liveness, lower_bound
from .models import mlp_graph, resnet_graph, transformer_graph
from .planning import MemoryPlan, plan_best_fit, plan_first_fit, plan_inplace, plan_no_reuse, validate_plan
from .swap import SwapTimeline, swap_in_timeline

__all__ = [
    "OpNode", "TrainingGraph", "TrainingGraphBuilder", "mlp_graph", "transformer_graph", "resnet_graph",
    "Interval", "liveness", "execution_order", "live_bytes", "lower_bound",
    "MemoryPlan", "plan_no_reuse", "plan_first_fit", "plan_best_fit", "plan_inplace", "validate_plan",
    "plot_lifetimes", "checkpointed_gradients", "CheckpointRun", "layer_parameters", "accumulated_gradients",
    "swap_in_timeline", "SwapTimeline", "TrainingMemory", "training_memory", "transformer_layer_activation_bytes",
]

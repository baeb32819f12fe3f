"""Tensor and pipeline parallelism, 3-D sizing, and automatic sharding (lecture 8).

* ``tensor``: Megatron's column- and row-parallel linear layers, MLP and head-split attention on
  autodiff Tensors over ``mlsys_lib.comm``, with the f/g operators and their all-reduce count; and the
  two layers' forward and backward by hand on numpy arrays (``column_parallel_forward``, ...).
* ``pipeline``: schedules as data (naive, GPipe, 1F1B, interleaved 1F1B, zero-bubble H1), a
  validator, a simulator, the bubble's closed forms, and a runner that trains an MLP over ``comm``.
* ``sizing``: for n GPUs split as (p, t, d): microbatches, bubble, communication per step and memory per GPU
  (import it as ``mlsys_lib.parallel.sizing``: it loads ``mlsys_lib.memory``, which the ranks of a launch
  running tensor-parallel layers do not need).
* ``autoparallel``: the cheapest sharding of each matmul of a chain, by dynamic programming.
"""

from . import autoparallel, pipeline, tensor
from .autoparallel import best_shardings, chain_cost, matmul_chain_costs
from .tensor import (ColumnParallelLinear, MegatronMLP, ParallelBlock, ParallelSelfAttention, RowParallelLinear,
                     TensorParallel)

__all__ = [
    "tensor", "pipeline", "autoparallel",
    "TensorParallel", "ColumnParallelLinear", "RowParallelLinear", "MegatronMLP", "ParallelSelfAttention",
    "ParallelBlock", "best_shardings", "chain_cost", "matmul_chain_costs",
]

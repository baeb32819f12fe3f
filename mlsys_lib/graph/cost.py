"""A roofline cost model for graphs: per-op FLOPs and bytes, time = launch + max(compute, memory).

An op that launches a kernel reads each distinct input once and writes its output once:
``bytes = Σ inputs' nbytes + output nbytes`` (for a fused kernel, only its external inputs). Its time
on a machine with roof (``peak_flops``, ``bandwidth``) is

    seconds = launch_overhead + max(flops / peak_flops, bytes / bandwidth)
            = launch_overhead + flops / attainable(intensity)      (for flops > 0)

with ``intensity = flops / bytes`` (:func:`~mlsys_lib.tensor.roofline.arithmetic_intensity`) and
``attainable`` the roofline :class:`~mlsys_lib.tensor.roofline.Roofline`'s. Inputs, constants and
reshape (a view) launch nothing and cost 0. A graph's cost is the sum over its nodes (kernels run one after another).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from mlsys_lib.tensor.roofline import Roofline, arithmetic_intensity

from .ir import Graph, Node
from .ops import OPS


@dataclass(frozen=True)
class OpCost:
    """The work of one node: ``flops`` [FLOP], ``bytes`` [byte] moved to or from memory, ``seconds`` [s]."""

    flops: int
    bytes: int
    seconds: float

    @property
    def intensity(self) -> float:
        """Arithmetic intensity [FLOP/byte] (ValueError for a node that moves no bytes)."""
        return arithmetic_intensity(self.flops, self.bytes)


def node_flops_bytes(graph: Graph, node: Node) -> tuple[int, int]:
    """(FLOPs, bytes moved) of ``node``'s kernel; (0, 0) for nodes that launch none."""
    opdef = OPS[node.op]
    if not opdef.kernel:
        return 0, 0
    inputs = [graph[i] for i in dict.fromkeys(node.inputs)]
    moved = sum(math.prod(x.shape) * x.dtype.itemsize for x in inputs) + math.prod(node.shape) * node.dtype.itemsize
    return opdef.flops(node.attrs, [graph[i].shape for i in node.inputs], node.shape), moved


def traffic(graph: Graph) -> tuple[int, int]:
    """(total FLOPs, total bytes) of every kernel of the graph: fusion keeps the first and lowers the second."""
    counts = [node_flops_bytes(graph, node) for node in graph]
    return sum(f for f, _ in counts), sum(b for _, b in counts)


@dataclass(frozen=True)
class CostModel:
    """Kernel times on a roofline, plus a fixed ``launch_overhead`` [s] per kernel.

    The default roof is an illustrative GPU: 15.7 TFLOP/s (FP32) and 900 GB/s (V100-class), 5 µs launch.
    """

    roofline: Roofline = field(default_factory=lambda: Roofline(peak_flops=15.7e12, bandwidth=900e9))
    launch_overhead: float = 5e-6

    def __post_init__(self) -> None:
        if self.launch_overhead < 0:
            raise ValueError(f"launch_overhead must be >= 0 seconds, got {self.launch_overhead}")

    def op_cost(self, graph: Graph, name: str) -> OpCost:
        """FLOPs, bytes and seconds of node ``name``."""
        node = graph[name]
        if not OPS[node.op].kernel:
            return OpCost(0, 0, 0.0)
        flops, moved = node_flops_bytes(graph, node)
        seconds = self.launch_overhead + max(flops / self.roofline.peak_flops, moved / self.roofline.bandwidth)
        return OpCost(flops, moved, seconds)

    def graph_cost(self, graph: Graph) -> float:
        """Estimated run time of the graph [s]: the sum of its nodes' times."""
        return sum(self.op_cost(graph, name).seconds for name in graph.nodes)

"""PassManager: run graph passes in rounds until none changes the graph (a fixed point).

A pass is any function ``Graph -> Graph`` that returns the same object when it changes nothing
(all passes of this package do), so "changed" is an identity test. Per-pass statistics (calls,
rounds in which it changed the graph, nodes removed, seconds) are kept for reports and benchmarks.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from .conv_bn import fold_conv_batch_norm
from .fusion import fuse_elementwise
from .ir import Graph
from .passes import constant_fold, cse, dce, simplify

Pass = Callable[[Graph], Graph]

INFERENCE_PASSES: tuple[Pass, ...] = (constant_fold, simplify, cse, fold_conv_batch_norm, dce, fuse_elementwise)
"""The default pipeline, in order. Fusion comes last in a round so that the other passes see plain ops first."""


@dataclass
class PassStats:
    """What one pass did over a run: ``calls``, ``changes`` (calls that returned a new graph),
    ``nodes_removed`` (net, over all calls) and ``seconds`` (total wall time)."""

    name: str
    calls: int = 0
    changes: int = 0
    nodes_removed: int = 0
    seconds: float = 0.0


@dataclass
class PassManager:
    """Runs ``passes`` in order, round after round, until a whole round changes nothing.

    ``max_rounds`` bounds the rounds; ``run`` raises RuntimeError if no fixed point is reached by then
    (a pair of passes undoing each other). ``stats`` holds the per-pass statistics of the last run.
    """

    passes: Sequence[Pass] = INFERENCE_PASSES
    max_rounds: int = 20
    stats: list[PassStats] = field(default_factory=list, init=False)
    rounds: int = field(default=0, init=False)

    def run(self, graph: Graph) -> Graph:
        """The graph at the fixed point of the passes (``graph`` itself if no pass changes it)."""
        self.stats = [PassStats(getattr(p, "__name__", repr(p))) for p in self.passes]
        for rounds in range(1, self.max_rounds + 1):
            self.rounds, changed = rounds, False
            for one_pass, stats in zip(self.passes, self.stats):
                start = time.perf_counter()
                result = one_pass(graph)
                stats.seconds += time.perf_counter() - start
                stats.calls += 1
                if result is not graph:
                    stats.changes += 1
                    stats.nodes_removed += len(graph) - len(result)
                    graph, changed = result, True
            if not changed:
                return graph
        raise RuntimeError(f"PassManager: no fixed point after {self.max_rounds} rounds; "
                           f"changes per pass: {[(s.name, s.changes) for s in self.stats]}")

    def report(self) -> str:
        """A table of the last run's per-pass statistics."""
        lines = [f"{'pass':<22}{'calls':>6}{'changed':>8}{'removed':>9}{'ms':>10}"]
        lines += [f"{s.name:<22}{s.calls:>6}{s.changes:>8}{s.nodes_removed:>9}{1e3 * s.seconds:>10.1f}"
                  for s in self.stats]
        lines.append(f"{'total':<22}{'':>6}{'':>8}{sum(s.nodes_removed for s in self.stats):>9}"
                     f"{1e3 * sum(s.seconds for s in self.stats):>10.1f}   ({self.rounds} rounds)")
        return "\n".join(lines)

"""Count the matmul FLOPs an autodiff computation actually executes: the oracle for ``llm.flops``.

    with count_flops() as counter:
        loss(params, config, tokens, targets).backward()
    counter.total            # FLOPs of every matmul of the forward and the backward pass
    counter.records          # each one: operand shapes, output shape, FLOPs

While the block runs, the numpy ``forward`` of the autodiff matmul ops (``MatMul`` and its subclass
``Linear``) is wrapped so that every call is recorded, wherever it comes from: the forward pass,
the VJPs of the backward pass (they are matmuls too), or a forward recomputed by checkpointing. A
matmul of A (..., m, k) and B (..., k, n) with output (..., m, n) costs 2·k·(elements of the output)
FLOPs, batch axes broadcast included (a bias add of ``Linear`` is not counted). Nothing in
``mlsys_lib.autodiff`` is edited: the class attributes are swapped for the block and restored after.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator
from dataclasses import dataclass, field

from ..autodiff.linalg import Linear, MatMul

COUNTED_OPS = (MatMul, Linear)  # every Op class that defines its own matmul forward


@dataclass(frozen=True)
class MatmulRecord:
    """One executed matmul: operand shapes a (..., m, k) and b (..., k, n), output shape (..., m, n)."""

    a_shape: tuple[int, ...]
    b_shape: tuple[int, ...]
    out_shape: tuple[int, ...]

    @property
    def flops(self) -> int:
        """2 · k · (elements of the output): one multiply and one add per term of each output sum."""
        return 2 * self.a_shape[-1] * math.prod(self.out_shape)


@dataclass
class FlopCounter:
    """The matmuls recorded inside one :func:`count_flops` block, in execution order."""

    records: list[MatmulRecord] = field(default_factory=list)

    @property
    def total(self) -> int:
        """Sum of the recorded FLOPs."""
        return sum(r.flops for r in self.records)


_active: list[FlopCounter] = []  # the counters of the blocks now open (blocks may nest)


def _counting(forward):
    """``forward`` of a matmul op, recording each call into every open counter."""
    def counted(self, a, b, *rest):
        out = forward(self, a, b, *rest)
        record = MatmulRecord(tuple(a.shape), tuple(b.shape), tuple(out.shape))
        for counter in _active:
            counter.records.append(record)
        return out
    return counted


@contextlib.contextmanager
def count_flops() -> Iterator[FlopCounter]:
    """Within the block, record every matmul the autodiff ops execute (forward, backward, recomputation)."""
    counter = FlopCounter()
    originals = {cls: cls.__dict__["forward"] for cls in COUNTED_OPS} if not _active else {}
    for cls, forward in originals.items():
        cls.forward = _counting(forward)
    _active.append(counter)
    try:
        yield counter
    finally:
        _active.remove(counter)
        for cls, forward in originals.items():
            cls.forward = forward

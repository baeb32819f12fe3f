"""Example graphs: :func:`random_graph` (reproducible random graphs that exercise every pass, for tests
and benchmarks) and :func:`matmul_chain` (where greedy search stops short and backtracking wins).

The graph is grown from motifs of a few nodes each: elementwise ops and matmuls on square matrices,
constant subexpressions and ``(x + c1) + c2`` chains (constant folding), identities such as ``x * 1``
and ``transpose(transpose(x))`` (simplification), repeated ops, and transposes that differ only in
their attributes (CSE must merge the first and keep the second apart), conv + batch-norm blocks on an
image input (folding), elementwise chains (fusion) and values no output uses (DCE). Every motif maps
values of magnitude <= 1 to values of magnitude <= 1 (conv blocks to about 1), so graphs of any
depth evaluate without overflow and passes can be compared with tight tolerances.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
from numpy.typing import DTypeLike

from .ir import Graph, GraphBuilder, Node


def random_graph(n_nodes: int, seed: int = 0, size: int = 3, dtype: DTypeLike = np.float64) -> Graph:
    """A random graph of at least ``n_nodes`` nodes over three (size, size) inputs ``x0, x1, x2`` and a
    (1, 2, 6, 6) input ``image``. Outputs: the last value, two random earlier ones, and every conv block."""
    rng = np.random.default_rng(seed)
    b = GraphBuilder()
    pool: list[Node] = [b.input(f"x{i}", (size, size), dtype) for i in range(3)]
    image = b.input("image", (1, 2, 6, 6), dtype)
    blocks: list[Node] = []

    def const(value) -> Node:
        return b.const(value, dtype)

    def uniform(bound: float, shape=()) -> Node:
        return const(rng.uniform(-bound, bound, shape))

    def pick() -> Node:  # recent values more often, so that the graph gets deep
        return pool[-1 - min(int(rng.exponential(4.0)), len(pool) - 1)]

    def half(v: Node) -> Node:
        return b.mul(v, const(0.5))

    def conv_block() -> Node:
        source = blocks[-1] if blocks and rng.random() < 0.5 else image
        channels = source.shape[1]
        bias = [uniform(0.5, (2,))] if rng.random() < 0.5 else []
        y = b.conv2d(source, uniform(0.1, (2, channels, 3, 3)), *bias, padding=1)
        gamma, beta, mean = uniform(0.3, (2,)), uniform(0.5, (2,)), uniform(0.5, (2,))
        return b.relu(b.batch_norm(y, gamma, beta, mean, const(rng.uniform(0.5, 1.5, (2,)))))

    def two(make: Callable[[Node, Node], Node]) -> Callable[[], Node]:
        return lambda: make(pick(), pick())

    def one(make: Callable[[Node], Node]) -> Callable[[], Node]:
        return lambda: make(pick())

    motifs: list[Callable[[], Node]] = [
        one(b.neg), one(b.relu), one(lambda v: b.exp(b.neg(b.relu(v)))),
        two(b.mul), two(lambda u, v: half(b.add(u, v))), two(lambda u, v: half(b.sub(u, v))),
        two(lambda u, v: b.mul(b.matmul(u, v), const(1.0 / size))),
        one(b.transpose),
        # constant folding: reassociation and constant subexpressions
        one(lambda v: half(b.add(b.add(v, uniform(0.3)), uniform(0.3)))),
        one(lambda v: b.mul(b.mul(uniform(1.0), v), uniform(1.0))),
        one(lambda v: b.mul(v, b.add(uniform(0.5), uniform(0.5)))),
        # simplification: identities
        one(lambda v: b.add(v, const(0.0))), one(lambda v: b.mul(const(1.0), v)),
        one(lambda v: b.div(v, const(1.0))), one(lambda v: b.neg(b.neg(v))),
        one(lambda v: b.transpose(b.transpose(v))),
        one(lambda v: b.reshape(b.reshape(v, shape=(size * size,)), shape=(size, size))),
        two(lambda u, v: half(b.sub(u, b.neg(v)))),
        # CSE: a repeated op is merged; transposes with different perms are not
        one(lambda v: b.mul(b.relu(v), b.relu(v))),
        one(lambda v: half(b.add(b.transpose(v), b.transpose(v, perm=(0, 1))))),
        conv_block,
    ]
    while len(b) < n_nodes:
        motif = motifs[rng.integers(len(motifs))]
        if motif is conv_block:
            blocks.append(conv_block())
        else:
            pool.append(motif())
    outputs = [pool[-1], pick(), pool[rng.integers(len(pool))]] + blocks
    return b.build(list({o.name: o for o in outputs}.values()))


LOW_RANK_CHAIN = (64, 4, 64, 4096, 4096)
"""Dimensions of :func:`matmul_chain`'s example: A (64, 4), B (4, 64), C (64, 4096), D (4096, 4096)."""


def matmul_chain(dims: Sequence[int] = LOW_RANK_CHAIN, dtype: DTypeLike = np.float32) -> Graph:
    """``y = ((A @ B) @ C) @ D`` with A (d0, d1), B (d1, d2), C (d2, d3), D (d3, d4).

    With the default dimensions ``A @ B`` has rank 4, and the cheapest order is ``A @ ((B @ C) @ D)``,
    which multiplies the big D by a 4-row matrix instead of a 64-row one. Associativity reaches it in
    two rewrites, but neither rewrite possible at the start helps on the default cost model:
    ``(A @ B) @ (C @ D)`` costs the same and ``(A @ (B @ C)) @ D`` 0.07% more. Greedy stops at the
    start; backtracking with alpha = 1.05 accepts the slightly worse graph and ends 40% cheaper.
    """
    b = GraphBuilder()
    a, b_, c, d = (b.input(name, (dims[i], dims[i + 1]), dtype) for i, name in enumerate("ABCD"))
    return b.build([b.matmul(b.matmul(b.matmul(a, b_), c), d, name="y")])

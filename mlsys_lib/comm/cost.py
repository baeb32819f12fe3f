"""The α-β-γ cost model of the lecture and its closed forms for every collective and algorithm.

A message of n bytes costs ``α + n·β`` seconds (α: latency in s, β = 1/bandwidth in s/byte); a local
reduction of n bytes costs ``n·γ`` seconds. Ranks are fully connected; each rank sends one message at
a time and receives one message at a time, and can send and receive at once ("single port, full
duplex", as in Chan et al., *Collective communication: theory, practice, and experience*, 2007).

In :func:`closed_form`, ``n`` is the size in bytes of the *whole* vector: the input of broadcast,
reduce, all_reduce and reduce_scatter; the root's data of scatter; the result of gather and
all_gather; the p chunks one rank passes to all_to_all (its own included). With ``L = ⌈log2 p⌉``
(the lecture writes log p):

==============  ===================  ===============  ==================================
collective      naive (via root)     tree (binomial)  ring (bandwidth optimal)
==============  ===================  ===============  ==================================
broadcast       (p−1)(α + nβ)        L(α + nβ)        scatter (tree) + all_gather (ring)
reduce          (p−1)(α + nβ + nγ)   L(α + nβ + nγ)   reduce_scatter (ring) + gather (tree)
scatter         (p−1)α + (p−1)/p·nβ  Lα + (p−1)/p·nβ  —
gather          (p−1)α + (p−1)/p·nβ  Lα + (p−1)/p·nβ  —
all_gather      gather + broadcast   same as naive    (p−1)α + (p−1)/p·nβ
reduce_scatter  reduce + scatter     same as naive    (p−1)α + (p−1)/p·n(β + γ)
all_reduce      reduce + broadcast   same as naive    2(p−1)α + 2(p−1)/p·nβ + (p−1)/p·nγ
==============  ===================  ===============  ==================================

all_to_all has its own two algorithms (p equal chunks of n/p bytes on every rank):

* "pairwise" (round s: send to r+s, receive from r−s): (p−1)(α + (n/p)β), each chunk sent once;
* "ring" (store and forward along r → r+1, step s carries p−s chunks):
  (p−1)α + (n/p)β·p(p−1)/2 = (p−1)α + (p−1)/2·nβ.

("same as naive": the same composition through rank 0, of the tree's primitives.) Conditions: n
divisible by p (equal blocks); for the tree's scatter, gather and reduce, and what is built on them,
p a power of two (otherwise the binomial tree is unbalanced and the traced time can be lower). The
ring, naive, pairwise and tree-broadcast formulas hold for every p.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .collectives import ALGORITHMS


@dataclass(frozen=True)
class CostModel:
    """α (s per message), β (s per byte sent), γ (s per byte reduced); defaults: a 1 GB/s network."""

    alpha: float = 1e-5
    beta: float = 1e-9
    gamma: float = 1e-10

    def __post_init__(self) -> None:
        for name in ("alpha", "beta", "gamma"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or not value >= 0:
                raise ValueError(f"CostModel.{name} must be a number >= 0, got {value!r}")

    def message(self, nbytes: int) -> float:
        """Seconds to move one message of ``nbytes`` bytes: α + nβ."""
        return self.alpha + nbytes * self.beta

    def reduction(self, nbytes: int) -> float:
        """Seconds to combine ``nbytes`` bytes into a local accumulator: nγ."""
        return nbytes * self.gamma


def _primitive(op: str, algorithm: str, n: float, p: int, a: float, b: float, g: float) -> float:
    """The four rooted primitives (broadcast, reduce, scatter, gather) for "naive" and "tree"."""
    steps = p - 1 if algorithm == "naive" else math.ceil(math.log2(p))
    share = (p - 1) / p * n  # bytes that leave (scatter) or reach (gather) the root
    if op == "broadcast":
        return steps * (a + n * b)
    if op == "reduce":
        return steps * (a + n * b + n * g)
    return steps * a + share * b  # scatter, gather


def closed_form(op: str, algorithm: str, n: float, p: int, alpha: float, beta: float,
                gamma: float = 0.0) -> float:
    """Time in seconds of collective ``op`` with ``algorithm`` on ``p`` ranks and ``n`` bytes.

    ``op``: broadcast, reduce, scatter, gather, all_gather, reduce_scatter, all_reduce,
    all_to_all; ``algorithm``: "naive", "tree" or "ring", and "pairwise" or "ring" for all_to_all
    (see the module's table and its conditions).
    """
    if op not in ALGORITHMS:
        raise ValueError(f"unknown collective {op!r}: expected one of {', '.join(ALGORITHMS)}")
    if algorithm not in ALGORITHMS[op]:
        raise ValueError(f"{op} has no {algorithm!r} algorithm: expected one of {', '.join(ALGORITHMS[op])}")
    if not isinstance(p, int) or p < 1:
        raise ValueError(f"p must be an int >= 1, got {p!r}")
    if n < 0 or alpha < 0 or beta < 0 or gamma < 0:
        raise ValueError("n, alpha, beta and gamma must be >= 0")
    a, b, g = alpha, beta, gamma
    if p == 1:
        return 0.0
    if op == "all_to_all":
        chunk = n / p
        if algorithm == "pairwise":
            return (p - 1) * (a + chunk * b)
        return (p - 1) * a + chunk * b * p * (p - 1) / 2  # ring: step s sends p−s chunks
    if algorithm == "ring":
        if op == "all_gather":
            return (p - 1) * a + (p - 1) / p * n * b
        if op == "reduce_scatter":
            return (p - 1) * a + (p - 1) / p * n * (b + g)
        if op == "all_reduce":
            return closed_form("reduce_scatter", "ring", n, p, a, b, g) + closed_form("all_gather", "ring", n, p, a, b)
        if op == "broadcast":
            return closed_form("scatter", "tree", n, p, a, b) + closed_form("all_gather", "ring", n, p, a, b)
        return closed_form("reduce_scatter", "ring", n, p, a, b, g) + closed_form("gather", "tree", n, p, a, b)
    composite = {"all_gather": ("gather", "broadcast"), "reduce_scatter": ("reduce", "scatter"),
                 "all_reduce": ("reduce", "broadcast")}
    if op in composite:
        first, second = composite[op]
        return _primitive(first, algorithm, n, p, a, b, g) + _primitive(second, algorithm, n, p, a, b, g)
    return _primitive(op, algorithm, n, p, a, b, g)

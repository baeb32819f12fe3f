"""Mixture of Experts: top-k routing, expert capacity and dropped tokens, load balancing, expert parallelism.

Shapes: T tokens of width d, E experts. An expert is a function ``expert(x (m, d)) -> (m, d)``.

* :func:`route_top_k`: each token's k experts with the largest router logits (ties: the lower
  expert index) and its gate weights, a softmax over those k logits.
* :func:`capacity`: each expert takes at most C = ⌈k·T·capacity_factor / E⌉ tokens;
  :func:`dispatch` fills the experts' slots in token order and drops the overflow.
* :func:`moe_forward`: y_t = Σ_j gate_tj · expert_{e_tj}(x_t) over the token's kept choices; a
  dropped choice adds 0, so a token with every choice dropped has y_t = 0 and, through the
  block's residual connection x + y, passes through unchanged.
* :func:`load_balancing_loss`: the Switch Transformer's auxiliary loss E · Σ_e f_e · P_e.
* :func:`expert_parallel_forward`: the same layer with the experts spread over the ranks of a
  :mod:`mlsys_lib.comm` group, tokens sent to their experts' ranks and back with ``all_to_all``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from mlsys_lib.comm import ProcessGroup

Expert = Callable[[np.ndarray], np.ndarray]


def _check_k(k: int, n_experts: int) -> int:
    if not isinstance(k, (int, np.integer)) or isinstance(k, bool) or not 1 <= k <= n_experts:
        raise ValueError(f"k (experts per token) must be an int in 1..{n_experts} (the number of experts), got {k!r}")
    return int(k)


def _matrix(a: object, what: str) -> np.ndarray:
    arr = np.asarray(a)
    if arr.ndim != 2 or arr.dtype.kind not in "fiu":
        raise ValueError(f"{what} must be a 2-D real array, got shape {arr.shape} and dtype {arr.dtype}")
    if arr.dtype.kind == "f" and not np.all(np.isfinite(arr)):
        raise ValueError(f"{what} must be finite (no NaN or inf)")
    return arr


def softmax(logits: np.ndarray) -> np.ndarray:
    """Softmax along the last axis (the maximum subtracted first)."""
    z = np.exp(logits - logits.max(axis=-1, keepdims=True))
    return z / z.sum(axis=-1, keepdims=True)


def route_top_k(logits: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Each token's top-k experts and gate weights: ``(expert_ids (T, k) int64, gates (T, k))``.

    ``logits``: router scores (T, E). Experts are listed by decreasing logit, equal logits by
    increasing expert index; the gates are the softmax of the k chosen logits (each row sums to 1).
    """
    logits = _matrix(logits, "logits").astype(np.float64)
    k = _check_k(k, logits.shape[1])
    expert_ids = np.argsort(-logits, axis=1, kind="stable")[:, :k]  # stable: ties keep the lower index first
    return expert_ids.astype(np.int64), softmax(np.take_along_axis(logits, expert_ids, axis=1))


def capacity(n_tokens: int, n_experts: int, k: int, capacity_factor: float) -> int:
    """Tokens one expert can take: ⌈k · n_tokens · capacity_factor / n_experts⌉.

    Computed exactly on the decimal value of ``capacity_factor`` as written (1.1 is 11/10, so
    ``capacity(10, 1, 1, 1.1)`` is 11, not 12 as the binary float 1.1000000000000000888 would give).
    """
    if not isinstance(n_tokens, (int, np.integer)) or n_tokens < 0:
        raise ValueError(f"n_tokens must be an int >= 0, got {n_tokens!r}")
    if not isinstance(n_experts, (int, np.integer)) or n_experts < 1:
        raise ValueError(f"n_experts must be an int >= 1, got {n_experts!r}")
    k = _check_k(k, int(n_experts))
    if not isinstance(capacity_factor, (int, float, Fraction)) or not 0 < capacity_factor < math.inf:
        raise ValueError(f"capacity_factor must be a finite number > 0, got {capacity_factor!r}")
    factor = Fraction(repr(float(capacity_factor)))
    return math.ceil(k * int(n_tokens) * factor / int(n_experts))


@dataclass(frozen=True)
class Dispatch:
    """Where each (token, choice) went.

    ``slots`` (T, k) int64: the slot of token t's j-th expert in that expert's buffer, or −1 when
    dropped; ``counts`` (E,) int64: tokens each expert takes (≤ capacity); ``dropped``: the
    (token, expert) pairs over capacity, in token order.
    """

    slots: np.ndarray
    counts: np.ndarray
    dropped: list[tuple[int, int]]


def _expert_ids(expert_ids: object, n_experts: int) -> np.ndarray:
    ids = _matrix(expert_ids, "expert_ids")
    if ids.dtype.kind not in "iu" or (ids.size and not (ids.min() >= 0 and ids.max() < n_experts)):
        raise ValueError(f"expert_ids must be ints in 0..{n_experts - 1}")
    if any(len(set(row)) < len(row) for row in ids.tolist()):
        raise ValueError("expert_ids must name k different experts for every token")
    return ids.astype(np.int64)


def dispatch(expert_ids: np.ndarray, n_experts: int, capacity: int) -> Dispatch:
    """Assign each token's choices to expert slots in token order; choices past ``capacity`` are dropped.

    ``expert_ids`` (T, k): the experts of each token (as from :func:`route_top_k`).
    """
    if not isinstance(capacity, (int, np.integer)) or capacity < 0:
        raise ValueError(f"capacity must be an int >= 0, got {capacity!r}")
    ids = _expert_ids(expert_ids, n_experts)
    slots = np.full(ids.shape, -1, dtype=np.int64)
    counts = np.zeros(n_experts, dtype=np.int64)
    dropped = []
    for t, row in enumerate(ids.tolist()):
        for j, e in enumerate(row):
            if counts[e] < capacity:
                slots[t, j] = counts[e]
                counts[e] += 1
            else:
                dropped.append((t, e))
    return Dispatch(slots, counts, dropped)


def load_balancing_loss(router_probs: np.ndarray, expert_ids: np.ndarray) -> float:
    """Switch Transformer's auxiliary loss: n_experts · Σ_e f_e · P_e (1 when perfectly balanced).

    ``router_probs`` (T, E): the softmax of the router logits over all experts; P_e is its mean
    over the tokens. ``expert_ids`` (T, k): f_e is the fraction of the T·k choices that name
    expert e (before any token is dropped for capacity).
    """
    probs = _matrix(router_probs, "router_probs").astype(np.float64)
    if probs.min(initial=0) < 0 or not np.allclose(probs.sum(axis=1), 1.0, rtol=0, atol=1e-6):
        raise ValueError("router_probs must have nonnegative rows that sum to 1 (a softmax over the experts)")
    n_tokens, n_experts = probs.shape
    ids = _expert_ids(expert_ids, n_experts)
    if ids.shape[0] != n_tokens or n_tokens == 0:
        raise ValueError(f"router_probs and expert_ids must describe the same T >= 1 tokens, "
                         f"got {n_tokens} and {ids.shape[0]}")
    f = np.bincount(ids.reshape(-1), minlength=n_experts) / ids.size
    return float(n_experts * np.sum(f * probs.mean(axis=0)))


def _combine(gates: np.ndarray, outputs: np.ndarray) -> np.ndarray:
    """y_t = Σ_j gates[t, j] · outputs[t, j]: (T, k) and (T, k, d) -> (T, d), summed in choice order."""
    return (gates[:, :, None] * outputs).sum(axis=1)


def _run_expert(expert: Expert, batch: np.ndarray) -> np.ndarray:
    out = np.asarray(expert(batch))
    if out.shape != batch.shape:
        raise ValueError(f"an expert must map (m, d) to (m, d): got {out.shape} for input {batch.shape}")
    return out


def _layer_inputs(x: object, router_w: object, n_experts: int) -> tuple[np.ndarray, np.ndarray]:
    x, router_w = _matrix(x, "x"), _matrix(router_w, "router_w")
    if router_w.shape != (x.shape[1], n_experts):
        raise ValueError(f"router_w must be (d, n_experts) = ({x.shape[1]}, {n_experts}), got {router_w.shape}")
    return x, router_w


def moe_forward(x: np.ndarray, router_w: np.ndarray, experts: Sequence[Expert], k: int,
                capacity_factor: float) -> np.ndarray:
    """The MoE layer on one process: (T, d) -> (T, d), without the residual connection.

    ``router_w`` (d, E): logits = x @ router_w; ``experts``: E functions (m, d) -> (m, d). Each
    expert runs once on the batch of tokens it keeps, in token order; dropped choices add 0.
    """
    x, router_w = _layer_inputs(x, router_w, len(experts))
    expert_ids, gates = route_top_k(x @ router_w, k)
    plan = dispatch(expert_ids, len(experts), capacity(len(x), len(experts), k, capacity_factor))
    outputs = np.zeros((*expert_ids.shape, x.shape[1]), dtype=np.result_type(x, np.float64))
    for e, expert in enumerate(experts):
        tokens, choices = np.nonzero((expert_ids == e) & (plan.slots >= 0))  # kept, in token order
        if tokens.size:
            outputs[tokens, choices] = _run_expert(expert, x[tokens])
    return _combine(gates, outputs)


def expert_parallel_forward(group: ProcessGroup, x_local: np.ndarray, router_w: np.ndarray,
                            local_experts: Sequence[Expert], k: int, capacity_factor: float,
                            algorithm: str = "pairwise") -> np.ndarray:
    """:func:`moe_forward` with the experts spread over the ranks: (T_local, d) -> (T_local, d).

    Rank r holds experts r·E_r .. (r+1)·E_r − 1 (``local_experts``, E_r = E / world_size) and its
    own tokens ``x_local``; the layer's tokens are the ranks' tokens in rank order, and the result
    equals ``moe_forward`` of them. Three ``all_to_all`` (with ``algorithm``): how many tokens go
    to each expert (Megatron's token dispatcher sends these counts first), the tokens, sorted by
    expert, and the experts' outputs back to the tokens' ranks. An expert keeps the first
    ``capacity`` tokens in rank order, then token order: the single process's token order.
    """
    p, n_local = group.world_size, len(local_experts)
    x_local, router_w = _layer_inputs(x_local, router_w, n_local * p)
    n_tokens = int(group.all_reduce(np.array([len(x_local)]))[0])
    room = capacity(n_tokens, n_local * p, k, capacity_factor)
    expert_ids, gates = route_top_k(x_local @ router_w, k)
    sent, counts, rows = [], [], []
    for rank in range(p):  # the (token, choice) pairs for rank's experts, sorted by expert, then token
        tokens, choices = np.nonzero(expert_ids // n_local == rank)
        order = np.argsort(expert_ids[tokens, choices], kind="stable")
        sent.append((tokens[order], choices[order]))
        counts.append(np.bincount(expert_ids[tokens, choices] - rank * n_local, minlength=n_local))
        rows.append(x_local[tokens[order]])
    received = group.all_to_all(rows, algorithm)
    returned = _run_local_experts(local_experts, group.all_to_all(counts, algorithm), received, room)
    back = group.all_to_all(returned, algorithm)
    outputs = np.zeros((*expert_ids.shape, x_local.shape[1]), dtype=np.result_type(x_local, np.float64))
    for (tokens, choices), y in zip(sent, back):
        outputs[tokens, choices] = y
    return _combine(gates, outputs)


def _run_local_experts(local_experts: Sequence[Expert], counts: list[np.ndarray], received: list[np.ndarray],
                       room: int) -> list[np.ndarray]:
    """Each local expert on the first ``room`` rows sent to it (source rank order); outputs laid out as received.

    ``counts[i][e]``: rows from rank i for local expert e, which are consecutive in ``received[i]``.
    Rows over capacity get output 0.
    """
    dtype = np.result_type(*received, np.float64)
    returned = [np.zeros(rows.shape, dtype) for rows in received]
    starts = [np.concatenate([[0], np.cumsum(c)]) for c in counts]
    for e, expert in enumerate(local_experts):
        pieces = [(i, starts[i][e], starts[i][e + 1]) for i in range(len(received))]
        batch = np.concatenate([received[i][lo:hi] for i, lo, hi in pieces])[:room]
        if not len(batch):
            continue
        y, done = _run_expert(expert, batch), 0
        for i, lo, hi in pieces:
            kept = min(hi - lo, len(y) - done)
            returned[i][lo:lo + kept] = y[done:done + kept]
            done += kept
    return returned

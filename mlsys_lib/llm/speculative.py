"""Speculative sampling: a cheap draft model proposes, the target model verifies, the output is the target's.

The algorithm box of Leviathan et al., *Fast inference from transformers via speculative decoding*
(ICML 2023, Algorithm 1), also Chen et al., *Accelerating large language model decoding with
speculative sampling* (2023, Algorithm 2), line for line in :func:`speculative_step`:

1. the draft proposes k tokens autoregressively, x_i ~ q_i = q(· | prefix, x_1..x_{i−1});
2. the target scores all k+1 positions in one forward pass: p_1, ..., p_{k+1};
3. draft token x_i is accepted with probability min(1, p_i(x_i) / q_i(x_i)), in order;
4. at the first rejection, i, a token is sampled from the residual norm(max(0, p_i − q_i)) and the
   step ends; if all k are accepted, a bonus token is sampled from p_{k+1}.

Each emitted token is then distributed exactly as the target's p, whatever the draft. With
α = Σ_x min(p(x), q(x)) the same at every position (:func:`acceptance_rate`), a step emits
(1 − α^{k+1}) / (1 − α) tokens on average for one target call and k draft calls
(:func:`expected_tokens_per_call`), which is a wall-time speed-up of that over 1 + k·c when a draft
call costs c target calls (:func:`expected_speedup`, Leviathan's Theorem 3.8).

A model is a function ``probs(prefix) -> (V,)``: next-token probabilities after the tuple of token
ids ``prefix``. :class:`CountedModel` wraps one and counts its forward passes ("calls").
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

PROB_TOL = 1e-6  # how far from 1 a probability vector may sum before it is refused

Probs = Callable[[tuple[int, ...]], np.ndarray]


def check_probs(probs: object, what: str = "probs") -> np.ndarray:
    """``probs`` as a float64 vector (V,) renormalized to sum to 1.

    Raises ValueError naming ``what`` unless it is 1-D, non-empty, finite, nonnegative and sums
    to 1 within :data:`PROB_TOL`.
    """
    p = np.asarray(probs, dtype=np.float64)
    if p.ndim != 1 or p.size == 0:
        raise ValueError(f"{what} must be a non-empty 1-D vector of probabilities, got shape {p.shape}")
    total, low = p.sum(), p.min()
    if not (low >= 0 and np.isfinite(total)):  # a NaN fails the first test, an inf the second
        raise ValueError(f"{what} must be finite and nonnegative, got min {low!r} and sum {total!r}")
    if abs(total - 1.0) > PROB_TOL:
        raise ValueError(f"{what} must sum to 1 (within {PROB_TOL}), got {total!r}")
    return p / total


def sample(probs: np.ndarray, rng: np.random.Generator) -> int:
    """One token id drawn from the probability vector ``probs`` (V,); never one of probability 0."""
    cdf = np.cumsum(probs)
    cdf /= cdf[-1]
    return int(np.searchsorted(cdf, rng.random(), side="right"))


def residual_distribution(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    """norm(max(0, p − q)) (V,): where a rejected position resamples, so that the result is p.

    A rejection happens only where q(x) > p(x), so the residual has mass Σ max(0, p − q) = 1 − α > 0.
    It is all zero only when p ≤ q everywhere, which for two distributions means p == q (up to
    rounding): then no rejection is possible in exact arithmetic and p itself is returned.
    """
    p, q = check_probs(p, "p"), check_probs(q, "q")
    if p.shape != q.shape:
        raise ValueError(f"p and q must have the same vocabulary, got sizes {p.size} and {q.size}")
    residual = np.maximum(p - q, 0.0)
    total = residual.sum()
    return residual / total if total > 0 else p


class CountedModel:
    """A language model ``probs(prefix) -> (V,)`` that counts its forward passes in :attr:`calls`.

    ``model(prefix)``: the next-token probabilities after ``prefix``, one call.
    ``model.score(prefix, tokens)``: the probabilities at every position of ``tokens`` and after
    it, ``(len(tokens) + 1, V)``, also one call: a transformer scores a whole sequence in one pass.
    """

    def __init__(self, probs: Probs, name: str = "model") -> None:
        if not callable(probs):
            raise TypeError(f"{name} must be a function probs(prefix) -> (V,), got {type(probs).__name__}")
        self.probs, self.name, self.calls = probs, name, 0

    def __call__(self, prefix: Sequence[int]) -> np.ndarray:
        return self._score(_as_prefix(prefix), ())[0]

    def score(self, prefix: Sequence[int], tokens: Sequence[int]) -> np.ndarray:
        return self._score(_as_prefix(prefix), _as_prefix(tokens))

    def _score(self, prefix: tuple[int, ...], tokens: tuple[int, ...]) -> np.ndarray:
        """:meth:`score` of token ids already checked (one call)."""
        self.calls += 1
        full, rows = prefix + tokens, []
        for end in range(len(prefix), len(full) + 1):
            try:
                rows.append(check_probs(self.probs(full[:end])))
            except ValueError as exc:
                raise ValueError(f"{self.name}({full[:end]}): {exc}") from None
        return np.stack(rows)


def _as_prefix(tokens: Sequence[int]) -> tuple[int, ...]:
    out = tuple(tokens)
    if not all(isinstance(t, (int, np.integer)) and not isinstance(t, bool) and t >= 0 for t in out):
        raise ValueError(f"token ids must be ints >= 0, got {out!r}")
    return tuple(int(t) for t in out)


def _counted(model: CountedModel | Probs, name: str) -> CountedModel:
    return model if isinstance(model, CountedModel) else CountedModel(model, name)


def _check_k(k: int) -> int:
    if not isinstance(k, (int, np.integer)) or isinstance(k, bool) or k < 0:
        raise ValueError(f"k (draft tokens per step) must be an int >= 0, got {k!r}")
    return int(k)


def speculative_step(prefix: Sequence[int], draft: CountedModel | Probs, target: CountedModel | Probs, k: int,
                     rng: np.random.Generator) -> tuple[list[int], int]:
    """One step of speculative sampling: ``(new tokens, number of draft tokens accepted)``.

    Makes k draft calls and 1 target call (counted when the models are :class:`CountedModel`)
    and returns between 1 and k+1 tokens. ``k = 0`` is plain autoregressive sampling from the
    target. The draft and target must share the vocabulary.
    """
    return _step(_as_prefix(prefix), _counted(draft, "draft"), _counted(target, "target"), _check_k(k), rng)


def _step(prefix: tuple[int, ...], draft: CountedModel, target: CountedModel, k: int,
          rng: np.random.Generator) -> tuple[list[int], int]:
    """:func:`speculative_step` on checked arguments."""
    drafted: list[int] = []
    q = []
    for _ in range(k):  # 1. the draft proposes k tokens
        q.append(draft._score(prefix + tuple(drafted), ())[0])
        drafted.append(sample(q[-1], rng))
    p = target._score(prefix, tuple(drafted))  # 2. one target call scores the k+1 positions
    if q and q[0].size != p.shape[1]:
        raise ValueError(f"the draft and the target must share the vocabulary: sizes {q[0].size} and {p.shape[1]}")
    r = rng.random(k)
    for i, x in enumerate(drafted):  # 3. accept x_i with probability min(1, p_i(x_i) / q_i(x_i))
        if not r[i] < p[i, x] / q[i][x]:
            return drafted[:i] + [sample(residual_distribution(p[i], q[i]), rng)], i  # 4. resample
    return drafted + [sample(p[k], rng)], k  # 4. all accepted: a bonus token from p_{k+1}


@dataclass(frozen=True)
class Generation:
    """What :func:`speculative_generate` produced and what it cost.

    ``tokens``: the new token ids; ``accepted``: draft tokens accepted at each step;
    ``target_calls`` and ``draft_calls``: forward passes of each model.
    """

    tokens: list[int]
    accepted: list[int]
    target_calls: int
    draft_calls: int

    def modelled_time(self, c: float) -> float:
        """Time in target-call units when a draft call costs ``c`` target calls."""
        return self.target_calls + c * self.draft_calls

    def speedup(self, c: float) -> float:
        """Over autoregressive sampling from the target (one target call per token), in modelled time."""
        return len(self.tokens) / self.modelled_time(c)


def speculative_generate(prefix: Sequence[int], draft: CountedModel | Probs, target: CountedModel | Probs,
                         n_tokens: int, k: int, rng: np.random.Generator) -> Generation:
    """``n_tokens`` new tokens after ``prefix`` by repeated :func:`speculative_step`.

    A step drafts at most ``n_tokens − 1 − (tokens so far)`` tokens, so nothing is drafted past the
    end; ``k = 0`` gives autoregressive sampling (the baseline: ``n_tokens`` target calls).
    """
    if not isinstance(n_tokens, (int, np.integer)) or isinstance(n_tokens, bool) or n_tokens < 0:
        raise ValueError(f"n_tokens must be an int >= 0, got {n_tokens!r}")
    k = _check_k(k)
    draft, target = _counted(draft, "draft"), _counted(target, "target")
    calls_before = target.calls, draft.calls
    context = _as_prefix(prefix)
    tokens: list[int] = []
    accepted: list[int] = []
    while len(tokens) < n_tokens:
        new, n_accepted = _step(context + tuple(tokens), draft, target, min(k, n_tokens - len(tokens) - 1), rng)
        tokens += new
        accepted.append(n_accepted)
    return Generation(tokens, accepted, target.calls - calls_before[0], draft.calls - calls_before[1])


def acceptance_rate(p: np.ndarray, q: np.ndarray) -> float:
    """α = Σ_x min(p(x), q(x)): the probability that a draft token is accepted.

    ``p`` (target) and ``q`` (draft): (V,), or (positions, V) for the rows at several contexts, of
    which the mean α is returned (α = 1 − total variation distance between p and q).
    """
    p, q = np.atleast_2d(p, q)
    if p.shape != q.shape or p.ndim != 2 or len(p) == 0:
        raise ValueError(f"p and q must both be (V,) or (positions, V) of one shape, got {p.shape} and {q.shape}")
    alphas = [np.minimum(check_probs(a, f"p[{i}]"), check_probs(b, f"q[{i}]")).sum()
              for i, (a, b) in enumerate(zip(p, q))]
    return float(np.mean(alphas))


def _check_alpha(alpha: float) -> float:
    if not isinstance(alpha, (int, float, np.floating)) or not 0 <= alpha <= 1:
        raise ValueError(f"alpha (the acceptance rate) must be a number in [0, 1], got {alpha!r}")
    return float(alpha)


def expected_tokens_per_call(alpha: float, k: int) -> float:
    """(1 − α^{k+1}) / (1 − α): mean tokens a step emits for one target call (k+1 when α = 1)."""
    alpha, k = _check_alpha(alpha), _check_k(k)
    return float(k + 1) if alpha == 1 else (1 - alpha ** (k + 1)) / (1 - alpha)


def expected_speedup(alpha: float, k: int, c: float) -> float:
    """Expected wall-time speed-up over autoregressive decoding (Leviathan et al., Theorem 3.8).

    (1 − α^{k+1}) / ((1 − α)(k·c + 1)), where c = (time of a draft call) / (time of a target call).
    """
    if not isinstance(c, (int, float, np.floating)) or not c >= 0:
        raise ValueError(f"c (draft cost / target cost) must be a number >= 0, got {c!r}")
    return expected_tokens_per_call(alpha, k) / (k * c + 1)


def pair_with_acceptance(alpha: float, vocab: int) -> tuple[np.ndarray, np.ndarray]:
    """A target p and a draft q (each (vocab,)) with acceptance rate Σ min(p, q) = ``alpha`` exactly.

    p is uniform; q moves a share of p's mass onto token 0, which it over-proposes. Needs
    1/vocab <= alpha <= 1 (q cannot agree with a uniform p on less than token 0's 1/vocab).
    """
    alpha = _check_alpha(alpha)
    if not isinstance(vocab, (int, np.integer)) or vocab < 2 or alpha < 1 / vocab:
        raise ValueError(f"need an int vocab >= 2 and alpha >= 1/vocab, got vocab {vocab!r}, alpha {alpha}")
    p = np.full(vocab, 1 / vocab)
    w = (1 - alpha) * vocab / (vocab - 1)
    return p, (1 - w) * p + w * np.eye(vocab)[0]


def bigram_model(table: np.ndarray) -> Probs:
    """A model whose next-token probabilities depend only on the last token: ``table[prefix[-1]]``.

    ``table``: (V, V), each row a probability vector. The prefix must not be empty.
    """
    table = np.asarray(table, dtype=np.float64)
    if table.ndim != 2 or table.shape[0] != table.shape[1]:
        raise ValueError(f"a bigram table must be square (V, V), got shape {table.shape}")
    rows = np.stack([check_probs(row, f"table[{i}]") for i, row in enumerate(table)])

    def probs(prefix: tuple[int, ...]) -> np.ndarray:
        if not prefix or prefix[-1] >= len(rows):
            raise ValueError(f"a bigram model needs a prefix ending in a token id < {len(rows)}, got {prefix!r}")
        return rows[prefix[-1]]
    return probs

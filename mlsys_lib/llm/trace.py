"""Request traces for the serving simulator: Poisson arrivals and prompt/output length distributions.

A trace is a list of :class:`Request` sorted by arrival time [s]. :func:`poisson_trace` draws one from a
seed; the arrivals and the two lengths come from three independent streams of that seed, so the same
seed at another ``rate`` gives the same requests with every gap between arrivals scaled by
``old_rate / rate`` (the curves of latency against load then change only the load).

Lengths come from a :class:`Lognormal` (clipped to ``[low, high]``) or an :class:`Empirical` histogram.
:data:`CHAT_PROMPTS` and :data:`CHAT_OUTPUTS` are histograms written for this course, shaped like chat
traffic (many short requests, a long tail); they are not measured from any published data set.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

__all__ = ["Request", "Lognormal", "Empirical", "CHAT_PROMPTS", "CHAT_OUTPUTS", "poisson_arrivals",
           "poisson_trace", "bundled_trace", "backlog"]


@dataclass(frozen=True)
class Request:
    """One request: it arrives at ``arrival_time`` [s] with ``prompt_len`` tokens and will generate
    ``output_len`` tokens (unknown to the server) of at most ``max_new_tokens`` (known to the server)."""

    request_id: int
    arrival_time: float
    prompt_len: int
    output_len: int
    max_new_tokens: int

    def __post_init__(self) -> None:
        if not self.arrival_time >= 0:
            raise ValueError(f"request {self.request_id}: arrival_time must be >= 0 s, got {self.arrival_time}")
        if self.prompt_len < 1:
            raise ValueError(f"request {self.request_id}: prompt_len must be >= 1 token, got {self.prompt_len}")
        if not 1 <= self.output_len <= self.max_new_tokens:
            raise ValueError(f"request {self.request_id}: need 1 <= output_len <= max_new_tokens, got "
                             f"{self.output_len} and {self.max_new_tokens}")


@dataclass(frozen=True)
class Lognormal:
    """Token lengths ``round(median * exp(sigma * N(0, 1)))`` clipped to ``[low, high]``."""

    median: float
    sigma: float
    low: int = 1
    high: int = 2048

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """``n`` lengths [tokens], int64."""
        draws = self.median * np.exp(self.sigma * rng.standard_normal(n))
        return np.clip(np.rint(draws), self.low, self.high).astype(np.int64)


@dataclass(frozen=True)
class Empirical:
    """A histogram of token lengths: bin i covers ``[edges[i], edges[i+1])`` with probability
    ``weights[i] / sum(weights)``; a length is uniform within its bin."""

    edges: tuple[int, ...]
    weights: tuple[float, ...]

    def __post_init__(self) -> None:
        if len(self.edges) != len(self.weights) + 1 or np.any(np.diff(self.edges) <= 0) or self.edges[0] < 1:
            raise ValueError(f"edges must be {len(self.weights) + 1} increasing lengths >= 1, got {self.edges}")
        if min(self.weights) < 0 or sum(self.weights) <= 0:
            raise ValueError(f"weights must be non-negative with a positive sum, got {self.weights}")

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """``n`` lengths [tokens], int64."""
        p = np.asarray(self.weights, dtype=np.float64)
        bins = rng.choice(len(p), size=n, p=p / p.sum())
        edges = np.asarray(self.edges, dtype=np.int64)
        return rng.integers(edges[bins], edges[bins + 1])

    @property
    def mean(self) -> float:
        """Expected length [tokens]."""
        edges, p = np.asarray(self.edges), np.asarray(self.weights) / sum(self.weights)
        return float(np.sum(p * (edges[:-1] + edges[1:] - 1) / 2))


CHAT_PROMPTS = Empirical(edges=(4, 32, 64, 128, 256, 512, 1024, 1536),
                         weights=(0.10, 0.12, 0.20, 0.25, 0.18, 0.10, 0.05))
CHAT_OUTPUTS = Empirical(edges=(1, 16, 32, 64, 128, 256, 512, 1024),
                         weights=(0.08, 0.10, 0.17, 0.25, 0.22, 0.13, 0.05))


def poisson_arrivals(n: int, rate: float, rng: np.random.Generator) -> np.ndarray:
    """Arrival times [s] of ``n`` requests of a Poisson process of ``rate`` requests/s starting at 0:
    cumulative sums of exponential gaps of mean ``1 / rate``."""
    if not rate > 0:
        raise ValueError(f"rate must be positive (requests/s), got {rate}")
    return np.cumsum(rng.standard_exponential(n)) / rate


def poisson_trace(n_requests: int, rate: float, seed: int = 0, prompt: Lognormal | Empirical = CHAT_PROMPTS,
                  output: Lognormal | Empirical = CHAT_OUTPUTS, max_new_tokens: int = 512) -> list[Request]:
    """``n_requests`` requests arriving at ``rate`` requests/s; output lengths clipped to ``max_new_tokens``."""
    if n_requests < 1:
        raise ValueError(f"n_requests must be at least 1, got {n_requests}")
    arrivals_rng, prompt_rng, output_rng = (np.random.default_rng(s) for s in np.random.SeedSequence(seed).spawn(3))
    arrivals = poisson_arrivals(n_requests, rate, arrivals_rng)
    prompts = prompt.sample(n_requests, prompt_rng)
    outputs = np.minimum(output.sample(n_requests, output_rng), max_new_tokens)
    return [Request(i, float(t), int(p), int(o), max_new_tokens)
            for i, (t, p, o) in enumerate(zip(arrivals, prompts, outputs))]


def bundled_trace(rate: float = 4.0, n_requests: int = 400, seed: int = 0) -> list[Request]:
    """The course's trace: chat-shaped lengths (:data:`CHAT_PROMPTS`, :data:`CHAT_OUTPUTS`, at most 512
    new tokens), Poisson arrivals at ``rate`` requests/s."""
    return poisson_trace(n_requests, rate, seed)


def backlog(requests: list[Request]) -> list[Request]:
    """The same requests all arriving at time 0 (a queue that is never empty: memory, not load, limits
    how many run at once)."""
    return [replace(r, arrival_time=0.0) for r in requests]

"""A sharded parameter server with BSP, SSP and ASP consistency, stragglers, and a modelled clock.

Model and data: softmax regression trained by SGD as in :mod:`mlsys_lib.comm.data_parallel` (the same
``gradient_sum``, the same initial weights and the same batch draws for a given seed). The parameters
are one flat vector θ = [W.ravel(), b], cut into ``num_servers`` contiguous shards
(``np.array_split``); server j owns shard j. Worker i at clock c (its c-th step, c = 0, 1, ...) uses
rows ``np.array_split(batch_c, num_workers)[i]`` of the c-th batch, so its data never depends on timing.

One step of worker i: **pull** θ (every server sends its shard), **compute** the gradient sum of its
rows, **push** it (slice j to server j); each server applies a slice on arrival,
``θ_j -= lr · g_j / batch_size``. A push is complete when its last slice is applied; then the worker's
clock advances and it may start its next step.

Consistency (Ho et al., *More effective distributed ML via a stale synchronous parallel parameter
server*, 2013): the server clock is the minimum of the workers' clocks (every update of clocks below it
has been applied). A worker at clock c may pull only while c − (server clock) ≤ s, otherwise it waits:
``mode="bsp"`` is s = 0 (synchronous), ``"ssp"`` a bound s ≥ 0, ``"asp"`` no bound. For every gradient
the result records its **staleness** c − v, v the server clock of the parameters it was computed from
(SSP guarantees ≤ s), and its **delay**: how many pushes completed between its pull and its own
completion (the server's version minus the pulled version, versions counted in pushes).

Time is modelled, not measured, so runs are reproducible: worker i computes for ``compute_s ·
slowdown[i]`` seconds per step (a straggler has slowdown > 1); each message of n bytes costs
``α + nβ`` of :class:`~mlsys_lib.comm.CostModel` on the ports of ``mlsys_lib.comm``'s clock (one send
and one receive at a time per rank: a server that many workers push to is a bottleneck, which sharding
relieves). A pull request itself is free. A discrete-event simulation (:func:`schedule`, events in
time order, ties in the order they were scheduled) decides the order in which pulls and slice
arrivals happen; it needs no values, only sizes and costs. The arithmetic then replays that order:

* :func:`train` in one process, with the loss of θ on the whole data set after every applied slice
  (the convergence curve against modelled time);
* :func:`train_on_group` on real ranks of a ``comm`` ProcessGroup (servers are ranks
  0..num_servers−1, worker i is rank num_servers + i): each server follows its own list of the
  schedule's pulls and pushes with point-to-point messages. Every mode gives exactly the parameters of
  :func:`train`, whatever the order in which the operating system runs the ranks; real asynchronous
  servers would instead apply pushes in whatever order they happen to arrive.

With s = 0 and workers of equal speed, the slices of one clock arrive in worker order, so the
updates are those of synchronous data-parallel SGD with each worker's gradient applied in turn.
"""

from __future__ import annotations

import heapq
import itertools
from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np

from mlsys_lib.comm import CostModel, ProcessGroup
from mlsys_lib.comm.data_parallel import gradient_sum

MODES = ("bsp", "ssp", "asp")
BYTES_PER_VALUE = 8  # float64 parameters and gradients


@dataclass(frozen=True)
class PSConfig:
    """One parameter-server run: ``num_workers`` workers for ``steps`` clocks each, ``num_servers`` shards.

    ``mode``: "bsp", "ssp" (with ``staleness`` s ≥ 0) or "asp". ``slowdown``: a factor ≥ 1 per
    worker on its compute time (``{worker: factor}``; others 1). ``compute_s``: seconds of one step of
    an unslowed worker. ``batch_size`` rows per clock over all workers, ``lr`` the SGD step, ``seed``
    the initial weights and batches (as :func:`mlsys_lib.comm.sgd`).
    """

    num_workers: int = 4
    num_servers: int = 1
    mode: str = "bsp"
    staleness: int | None = None
    steps: int = 100
    batch_size: int = 32
    lr: float = 0.1
    seed: int = 0
    slowdown: dict[int, float] = field(default_factory=dict)
    compute_s: float = 1e-4
    cost: CostModel = field(default_factory=CostModel)

    def __post_init__(self) -> None:
        for name in ("num_workers", "num_servers", "steps", "batch_size"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
                raise ValueError(f"{name} must be an int >= 1, got {value!r}")
        if self.mode not in MODES:
            raise ValueError(f"unknown mode {self.mode!r}: expected one of {', '.join(MODES)}")
        if self.mode == "ssp":
            s = self.staleness
            if isinstance(s, bool) or not isinstance(s, (int, np.integer)) or s < 0:
                raise ValueError(f"SSP needs a staleness bound s: an int >= 0, got {s!r}")
        elif self.staleness is not None:
            raise ValueError(f"staleness is only for mode 'ssp' ({self.mode!r} fixes it), got {self.staleness!r}")
        for worker, factor in self.slowdown.items():
            if not isinstance(worker, (int, np.integer)) or not 0 <= worker < self.num_workers:
                raise ValueError(f"slowdown names worker {worker!r}: expected 0..{self.num_workers - 1}")
            if not isinstance(factor, (int, float)) or not factor >= 1:
                raise ValueError(f"a straggler's slowdown factor must be >= 1, got {factor!r} for worker {worker}")
        if not self.compute_s >= 0 or not self.lr > 0:
            raise ValueError(f"compute_s must be >= 0 and lr > 0, got {self.compute_s!r} and {self.lr!r}")
        if not isinstance(self.cost, CostModel):
            raise TypeError(f"cost must be a CostModel, got {type(self.cost).__name__}")

    @property
    def bound(self) -> float:
        """The staleness bound s: 0 for BSP, infinite for ASP."""
        return {"bsp": 0, "ssp": self.staleness, "asp": float("inf")}[self.mode]


@dataclass(frozen=True)
class Event:
    """A step of the schedule at ``time`` (s): worker ``worker`` pulls θ for ``clock``, or slice
    ``server`` of its push of ``clock`` is applied ("apply")."""

    time: float
    kind: str  # "pull" or "apply"
    worker: int
    clock: int
    server: int | None = None


@dataclass(frozen=True)
class Staleness:
    """One completed push: its worker and clock, staleness in clocks (≤ s), delay in pushes."""

    worker: int
    clock: int
    staleness: int
    delay: int


@dataclass
class Schedule:
    """The simulation's outcome: events in the order they happen, and the staleness of every push."""

    events: list[Event]
    staleness: list[Staleness]

    def for_server(self, server: int) -> list[Event]:
        """Server ``server``'s part of the order: every pull, and the slices it applies."""
        return [e for e in self.events if e.server in (None, server)]


class _Ports:
    """``comm``'s clock rule: one send and one receive at a time per rank, α + nβ per message."""

    def __init__(self, ranks: int, cost: CostModel) -> None:
        self.send_free, self.recv_free, self.cost = [0.0] * ranks, [0.0] * ranks, cost

    def message(self, src: int, dst: int, nbytes: int, ready: float) -> float:
        """Send ``nbytes`` from ``src`` to ``dst`` once ``ready`` (s); returns the arrival time (s)."""
        start = max(ready, self.send_free[src])
        self.send_free[src] = start + self.cost.message(nbytes)
        arrival = max(start, self.recv_free[dst]) + self.cost.message(nbytes)
        self.recv_free[dst] = arrival
        return arrival


def shard_sizes(num_params: int, num_servers: int) -> list[int]:
    """Lengths of the servers' shards of θ, as ``np.array_split``."""
    return [len(part) for part in np.array_split(np.arange(num_params), num_servers)]


def may_pull(clock: int, clocks: Sequence[int], staleness: int | None) -> bool:
    """SSP's admission rule: may a worker at ``clock`` pull now, with every worker's clock in ``clocks``?

    Only while clock − min(clocks) ≤ ``staleness`` (the server clock is the slowest worker's); 0 is BSP,
    None is ASP (no bound, never waits).
    """
    return staleness is None or clock - min(clocks) <= staleness


Admission = Callable[[int, Sequence[int], "int | None"], bool]


def schedule(config: PSConfig, num_params: int, admit: Admission = may_pull) -> Schedule:
    """Simulate the timing of ``config`` for a model of ``num_params`` values: the order of pulls and applies.

    ``admit(clock, clocks, staleness)`` decides whether a ready worker may pull (:func:`may_pull`; Lab 11
    plugs in its own), with ``clocks`` a tuple of every worker's clock and ``staleness`` None for ASP.
    """
    staleness = None if config.mode == "asp" else config.bound
    servers, workers = config.num_servers, config.num_workers
    sizes = [n * BYTES_PER_VALUE for n in shard_sizes(num_params, servers)]
    ports = _Ports(servers + workers, config.cost)
    clocks = [0] * workers  # completed pushes per worker
    pulled: dict[int, tuple[int, int]] = {}  # worker -> (server clock, pushes completed) at its pull
    missing = [0] * workers  # slices of the worker's current push not applied yet
    pushes, waiting, events, records = 0, [], [], []
    queue: list[tuple[float, int, str, int, int]] = []
    order = itertools.count()

    def at(time: float, kind: str, worker: int, server: int = -1) -> None:
        heapq.heappush(queue, (time, next(order), kind, worker, server))

    for i in range(workers):
        at(0.0, "ready", i)
    while queue:
        now, _, kind, i, j = heapq.heappop(queue)
        if kind == "ready":
            if clocks[i] == config.steps:
                continue
            if not admit(clocks[i], tuple(clocks), staleness):
                waiting.append(i)
                continue
            pulled[i] = (min(clocks), pushes)
            events.append(Event(now, "pull", i, clocks[i]))
            arrived = max(ports.message(s, servers + i, sizes[s], now) for s in range(servers))
            at(arrived + config.compute_s * config.slowdown.get(i, 1.0), "computed", i)
        elif kind == "computed":
            missing[i] = servers
            for s in range(servers):
                at(ports.message(servers + i, s, sizes[s], now), "apply", i, s)
        else:  # a slice arrives at its server and is applied
            events.append(Event(now, "apply", i, clocks[i], j))
            missing[i] -= 1
            if missing[i] == 0:
                server_clock, pushes_then = pulled[i]
                records.append(Staleness(i, clocks[i], clocks[i] - server_clock, pushes - pushes_then))
                clocks[i] += 1
                pushes += 1
                waiting.append(i)
                for w in sorted(waiting):  # the server clock may have advanced: all try again, in worker order
                    at(now, "ready", w)
                waiting.clear()
    return Schedule(events, records)


def initial_parameters(d: int, num_classes: int, seed: int) -> tuple[np.ndarray, np.random.Generator]:
    """θ0 = [W.ravel(), b] as :func:`mlsys_lib.comm.sgd` draws it, and the generator of the batches."""
    rng = np.random.default_rng(seed)
    W = 0.01 * rng.standard_normal((d, num_classes))
    return np.concatenate([W.ravel(), np.zeros(num_classes)]), rng


class _Batches:
    """The rows of worker i at clock c: its share of the c-th batch, drawn as :func:`mlsys_lib.comm.sgd` does."""

    def __init__(self, rng: np.random.Generator, n: int, config: PSConfig) -> None:
        if not 1 <= config.batch_size <= n:
            raise ValueError(f"batch_size must be in 1..{n} (the rows of X), got {config.batch_size}")
        self.rng, self.n, self.config, self.drawn = rng, n, config, []

    def rows(self, worker: int, clock: int) -> np.ndarray:
        while len(self.drawn) <= clock:
            self.drawn.append(self.rng.choice(self.n, size=self.config.batch_size, replace=False))
        return np.array_split(self.drawn[clock], self.config.num_workers)[worker]


class _Problem:
    """Softmax regression on (X, y): the gradient sum of a worker's rows, and the loss of θ."""

    def __init__(self, X: np.ndarray, y: np.ndarray, num_classes: int, config: PSConfig) -> None:
        if not isinstance(config, PSConfig):
            raise TypeError(f"config must be a PSConfig, got {type(config).__name__}")
        if X.ndim != 2 or y.shape != (X.shape[0],):
            raise ValueError(f"X must be (n, d) and y (n,), got {X.shape} and {y.shape}")
        if isinstance(num_classes, bool) or not isinstance(num_classes, (int, np.integer)) or num_classes < 1:
            raise ValueError(f"num_classes must be an int >= 1, got {num_classes!r}")
        if not np.issubdtype(y.dtype, np.integer) or (y.size and (y.min() < 0 or y.max() >= num_classes)):
            raise ValueError(f"y must hold integer labels in 0..{num_classes - 1} (num_classes {num_classes}), "
                             f"got {y.dtype} labels from {y.min()} to {y.max()}")
        self.X, self.y, self.k, self.config = X, y, num_classes, config
        self.theta0, rng = initial_parameters(X.shape[1], num_classes, config.seed)
        self.batches = _Batches(rng, X.shape[0], config)
        self.bounds = np.cumsum([0, *shard_sizes(self.theta0.size, config.num_servers)])

    def split(self, theta: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        d, k = self.X.shape[1], self.k
        return theta[:d * k].reshape(d, k), theta[d * k:]

    def gradient(self, theta: np.ndarray, worker: int, clock: int) -> np.ndarray:
        """Sum of the gradients of worker ``worker``'s rows at ``clock``, shape of θ."""
        rows = self.batches.rows(worker, clock)
        return gradient_sum(*self.split(theta), self.X[rows], self.y[rows])

    def apply(self, shard: np.ndarray, gradient_slice: np.ndarray) -> None:
        """A server's update of its shard, in place."""
        shard -= self.config.lr * (gradient_slice / self.config.batch_size)

    def loss(self, theta: np.ndarray) -> float:
        """Mean cross-entropy of θ over the whole data set."""
        W, b = self.split(theta)
        logits = self.X @ W + b
        logits -= logits.max(axis=1, keepdims=True)
        log_probs = logits - np.log(np.exp(logits).sum(axis=1, keepdims=True))
        return float(-log_probs[np.arange(len(self.y)), self.y].mean())


@dataclass
class PSResult:
    """A run: final θ, loss after every applied slice against modelled time (s), and the staleness."""

    config: PSConfig
    theta: np.ndarray
    times: np.ndarray
    losses: np.ndarray
    staleness: list[Staleness]

    def time_to_loss(self, target: float) -> float:
        """Modelled seconds until the loss first falls to ``target`` or below (inf if never)."""
        below = np.flatnonzero(self.losses <= target)
        return float(self.times[below[0]]) if below.size else float("inf")


def train(X: np.ndarray, y: np.ndarray, num_classes: int, config: PSConfig) -> PSResult:
    """Run ``config`` in one process: :func:`schedule`'s order with the real updates."""
    problem = _Problem(X, y, num_classes, config)
    theta = problem.theta0.copy()  # the servers' shards are views of it: bounds[j]:bounds[j+1]
    plan = schedule(config, theta.size)
    gradients: dict[int, np.ndarray] = {}  # worker -> gradient of its current step
    times, losses = [0.0], [problem.loss(theta)]
    for e in plan.events:
        if e.kind == "pull":
            gradients[e.worker] = problem.gradient(theta, e.worker, e.clock)
            continue
        lo, hi = problem.bounds[e.server], problem.bounds[e.server + 1]
        problem.apply(theta[lo:hi], gradients[e.worker][lo:hi])
        times.append(e.time)
        losses.append(problem.loss(theta))
    return PSResult(config, theta, np.array(times), np.array(losses), plan.staleness)


def train_on_group(group: ProcessGroup, X: np.ndarray, y: np.ndarray, num_classes: int,
                   config: PSConfig) -> np.ndarray:
    """Run ``config`` on the ranks of ``group`` (num_servers + num_workers of them); returns θ on every rank.

    Every rank computes the same :func:`schedule`; server j sends its shard for each pull and receives
    and applies each slice in that order; worker i pulls, computes and pushes its steps.
    """
    if not isinstance(group, ProcessGroup):
        raise TypeError(f"group must be a comm ProcessGroup (what launch passes each rank), got {type(group).__name__}")
    problem = _Problem(X, y, num_classes, config)
    servers, workers = config.num_servers, config.num_workers
    if group.world_size != servers + workers:
        raise ValueError(f"the group has {group.world_size} ranks, but {servers} servers + {workers} workers "
                         f"need {servers + workers}")
    plan = schedule(config, problem.theta0.size)
    bounds, rank, sends = problem.bounds, group.rank, []
    if rank < servers:
        shard = problem.theta0[bounds[rank]:bounds[rank + 1]].copy()
        for e in plan.for_server(rank):
            if e.kind == "pull":
                sends.append(group.isend(shard.copy(), servers + e.worker))
            else:
                problem.apply(shard, group.recv(servers + e.worker))
    else:
        worker, shard = rank - servers, np.empty(0)
        for clock in range(config.steps):
            theta = np.concatenate([group.recv(s) for s in range(servers)])
            gradient = problem.gradient(theta, worker, clock)
            sends += [group.isend(gradient[bounds[s]:bounds[s + 1]], s) for s in range(servers)]
    for request in sends:  # only receives block: each matches a send earlier in the schedule, so no deadlock
        request.wait()
    return group.all_gather(shard)


def convergence_curves(X: np.ndarray, y: np.ndarray, num_classes: int, straggler: float = 4.0,
                       staleness: tuple[int, ...] = (1, 3), **config: object) -> dict[str, PSResult]:
    """BSP, SSP(s) for each s, and ASP, each without and with worker 0 slowed by ``straggler``.

    Keys like "BSP", "SSP(s=3)", "ASP, straggler ×4"; ``config``: other :class:`PSConfig` fields.
    """
    runs = [("BSP", dict(mode="bsp"))] + [(f"SSP(s={s})", dict(mode="ssp", staleness=s)) for s in staleness]
    runs.append(("ASP", dict(mode="asp")))
    curves = {}
    for suffix, slowdown in (("", {}), (f", straggler ×{straggler:g}", {0: straggler})):
        for name, mode in runs:
            curves[name + suffix] = train(X, y, num_classes, PSConfig(**mode, slowdown=slowdown, **config))
    return curves


def plot_convergence(curves: dict[str, PSResult], ax=None):  # noqa: ANN001, ANN201 (matplotlib types)
    """Loss against modelled time (ms) for each run of :func:`convergence_curves`; returns the axes."""
    import matplotlib.pyplot as plt
    ax = ax if ax is not None else plt.subplots(figsize=(7, 4))[1]
    for name, result in curves.items():
        ax.plot(1e3 * result.times, result.losses, label=name, linestyle="--" if "straggler" in name else "-")
    ax.set_xlabel("modelled time (ms)")
    ax.set_ylabel("training loss")
    ax.legend(fontsize="small")
    return ax


def synthetic_problem(n: int = 512, d: int = 16, k: int = 4, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """k overlapping Gaussian clusters in d dimensions: X (n, d) float64, y (n,) int labels in 0..k-1."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, k, n)
    return 0.5 * rng.standard_normal((k, d))[y] + rng.standard_normal((n, d)), y

"""Schedule search: random, evolutionary, and guided by a learned cost model (AutoTVM's loop).

Every search returns its *history*, ``[(config, seconds), ...]`` in the order measured, and never
measures a config twice. :func:`model_guided_search` is AutoTVM's loop: measure a batch, fit a cost
model (gradient-boosted trees on :func:`~.features.features`) to all measurements so far, measure
the batch it ranks fastest among the untried candidates, repeat. :func:`tune` runs one strategy on a
:class:`~.space.Space`, recording into a :class:`~.measure.TuningLog` and skipping what it holds.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
from sklearn.ensemble import GradientBoostingRegressor

from .features import features
from .measure import Measurement, TuningLog, config_key, make_arrays, time_config
from .space import Space

STRATEGIES = ("random", "evolutionary", "model")

History = list[tuple[object, float]]


def _count(value, what: str, smallest: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < smallest:
        raise ValueError(f"{what} must be an int >= {smallest}, got {value!r}")
    return int(value)


def random_search(candidates: Sequence, measure: Callable[[object], float], trials: int) -> History:
    """Measure the first ``trials`` candidates (the caller shuffles them; they must be distinct)."""
    _count(trials, "random_search: trials", 0)
    return [(c, measure(c)) for c in candidates[:trials]]


def model_guided_search(candidates: Sequence, featurize: Callable[[object], np.ndarray],
                        measure: Callable[[object], float], model, trials: int, batch_size: int) -> History:
    """AutoTVM's loop over distinct ``candidates``: measure the first ``batch_size`` in the given order;
    then, after every batch, fit ``model`` (``fit(X, y)``/``predict(X)``) on all measurements so far
    (features -> log seconds) and measure the ``batch_size`` untried candidates it predicts fastest
    (ties in candidate order). Stops after ``trials`` measurements or when the candidates run out."""
    _count(trials, "model_guided_search: trials", 0)
    _count(batch_size, "model_guided_search: batch_size", 1)
    X = np.array([featurize(c) for c in candidates], dtype=np.float64)
    untried, tried, history = list(range(len(candidates))), [], []
    while untried and len(history) < trials:
        if history:
            model.fit(X[tried], np.log([seconds for _, seconds in history]))
            ranked = [untried[i] for i in np.argsort(model.predict(X[untried]), kind="stable")]
        else:
            ranked = untried
        batch = ranked[:min(batch_size, trials - len(history))]
        for i in batch:
            history.append((candidates[i], measure(candidates[i])))
        tried += batch
        untried = [i for i in untried if i not in set(batch)]
    return history


def _unseen_sample(space: Space, rng: np.random.Generator, seen: set[str]) -> dict:
    """A random config not in ``seen`` (listing the rest when random draws keep hitting seen ones)."""
    for _ in range(1000):
        config = space.sample(rng)
        if config_key(config) not in seen:
            return config
    rest = [c for c in space.configs() if config_key(c) not in seen]
    return rest[rng.integers(len(rest))]


def evolutionary_search(space: Space, measure: Callable[[dict], float], trials: int, rng: np.random.Generator,
                        population: int = 16, tournament: int = 3) -> History:
    """A genetic search: ``population`` random configs first; then each child takes every knob from
    one of two parents (uniform crossover) and one knob mutated, the parents each the fastest of
    ``tournament`` drawn from the ``population`` fastest measured so far. A child measured before is
    mutated again (a random unmeasured config after 100 tries)."""
    trials = min(_count(trials, "evolutionary_search: trials", 0), len(space))
    _count(population, "evolutionary_search: population", 1)
    _count(tournament, "evolutionary_search: tournament", 1)
    history: History = []
    seen: set[str] = set()

    def parent() -> dict:
        elite = sorted(history, key=lambda h: h[1])[:population]
        drawn = rng.choice(len(elite), size=min(tournament, len(elite)), replace=False)
        return elite[min(drawn)][0]

    while len(history) < trials:
        if len(history) < population:
            child = _unseen_sample(space, rng, seen)
        else:
            a, b = parent(), parent()
            child = space.mutate({k: (a if rng.random() < 0.5 else b)[k] for k in space.knobs}, rng)
            for _ in range(100):
                if config_key(child) not in seen:
                    break
                child = space.mutate(child, rng)
            else:
                child = _unseen_sample(space, rng, seen)
        seen.add(config_key(child))
        history.append((child, measure(child)))
    return history


def cost_model(seed: int = 0) -> GradientBoostingRegressor:
    """The cost model :func:`tune` refits: gradient-boosted regression trees (scikit-learn), depth 3."""
    return GradientBoostingRegressor(n_estimators=100, max_depth=3, learning_rate=0.1, random_state=seed)


def candidate_pool(space: Space, size: int, rng: np.random.Generator) -> list[dict]:
    """``size`` distinct configs in random order (the whole space, shuffled, when it is not larger)."""
    _count(size, "candidate_pool: size", 1)
    if len(space) <= size:
        configs = space.configs()
        return [configs[i] for i in rng.permutation(len(configs))]
    pool, seen = [], set()
    while len(pool) < size:
        config = _unseen_sample(space, rng, seen)
        seen.add(config_key(config))
        pool.append(config)
    return pool


def tune(space: Space, strategy: str, trials: int, seed: int = 0, log: TuningLog | None = None,
         measure: Callable[[dict], float | Measurement] | None = None, batch_size: int = 8,
         pool_size: int = 2000, **timing) -> History:
    """Search ``space`` with ``strategy`` (one of :data:`STRATEGIES`) for ``trials`` measurements.

    ``measure(config)`` returns seconds (or a :class:`Measurement`); by default
    :func:`~.measure.time_config` on random arrays, with ``timing`` (warmup, repeat, max_seconds)
    passed on. "random" and "model" draw a pool of ``pool_size`` distinct configs (seeded by
    ``seed``); "model" ranks it with :func:`cost_model` in batches of ``batch_size``. A config
    already in ``log`` for this task is not measured again (its logged seconds are used); every new
    measurement is appended to ``log``.
    """
    if strategy not in STRATEGIES:
        raise ValueError(f"tune: strategy must be one of {STRATEGIES}, got {strategy!r}")
    rng = np.random.default_rng(seed)
    if measure is None:
        arrays = make_arrays(space, seed)
        measure = lambda config: time_config(space, config, arrays, **timing)  # noqa: E731

    def logged(config: dict) -> float:
        found = log.lookup(space.task, config) if log is not None else None
        if found is not None:
            return found["seconds"]
        result = measure(config)
        seconds = result.seconds if isinstance(result, Measurement) else float(result)
        if log is not None:
            extra = {"compile_seconds": result.compile_seconds} if isinstance(result, Measurement) else {}
            log.record(space.task, config, seconds, gflops=space.flops / seconds / 1e9, **extra)
        return seconds

    if strategy == "evolutionary":
        return evolutionary_search(space, logged, trials, rng)
    pool = candidate_pool(space, pool_size, rng)
    if strategy == "random":
        return random_search(pool, logged, trials)
    featurize = lambda config: features(space.apply(config)[0])  # noqa: E731
    return model_guided_search(pool, featurize, logged, cost_model(seed), trials, batch_size)

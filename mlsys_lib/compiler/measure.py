"""Measuring schedules, and the tuning log that keeps every measurement so it is never repeated.

:func:`measure` times a compiled kernel the way a tuner must: ``warmup`` untimed calls (caches,
page faults, thread pool start-up), then ``repeat`` timed calls, and the *median* (robust to the
odd slow call when another process runs). :func:`time_config` compiles one config of a
:class:`~.space.Space` and measures it. :class:`TuningLog` appends each measurement to a JSON-lines
file and reloads it, so a tuner asked again skips what it measured before.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

from .codegen import Kernel, build
from .schedule import Schedule
from .space import Space


def measure(kernel: Kernel | Callable, arrays: Sequence[np.ndarray], warmup: int = 1, repeat: int = 5,
            max_seconds: float | None = None) -> float:
    """The median wall-clock seconds of ``repeat`` calls ``kernel.run(*arrays)`` (or ``kernel(*arrays)``
    for a plain callable) after ``warmup`` untimed ones.

    A call that takes longer than ``max_seconds`` ends the measurement and its own time is returned:
    a config that slow is out of the race, and repeating it would only spend the tuning budget
    (AutoTVM's measurement timeout). Compile the kernel beforehand (:meth:`Kernel.compile`).
    """
    if isinstance(warmup, bool) or not isinstance(warmup, int) or warmup < 0:
        raise ValueError(f"measure: warmup must be a non-negative int, got {warmup!r}")
    if isinstance(repeat, bool) or not isinstance(repeat, int) or repeat < 1:
        raise ValueError(f"measure: repeat must be a positive int, got {repeat!r}")
    run = kernel.run if isinstance(kernel, Kernel) else kernel
    if not callable(run):
        raise TypeError(f"measure: expected a Kernel or a callable, got {type(kernel).__name__}")
    times = []
    for call in range(warmup + repeat):
        start = time.perf_counter()
        run(*arrays)
        elapsed = time.perf_counter() - start
        if max_seconds is not None and elapsed > max_seconds:
            return elapsed
        if call >= warmup:
            times.append(elapsed)
    return float(np.median(times))


def make_arrays(schedule: Schedule | Space, seed: int = 0) -> list[np.ndarray]:
    """Arguments for ``schedule``'s kernel (inputs, then outputs): the inputs uniform in [-1, 1),
    the outputs uninitialised. For a :class:`Space`, those of its configs (they share the tensors)."""
    if isinstance(schedule, Space):
        schedule = schedule.apply({name: values[0] for name, values in schedule.knobs.items()})[0]
    rng = np.random.default_rng(seed)
    inputs = [rng.uniform(-1, 1, t.shape).astype(t.dtype) for t in schedule.inputs]
    return inputs + [np.empty(t.shape, t.dtype) for t in schedule.outputs]


@dataclass(frozen=True)
class Measurement:
    """One config's median run time (s), its speed (GFLOP/s) and its code generation + compile time (s)."""
    seconds: float
    gflops: float
    compile_seconds: float


def time_config(space: Space, config: dict, arrays: Sequence[np.ndarray] | None = None, warmup: int = 1,
                repeat: int = 5, max_seconds: float | None = None) -> Measurement:
    """Build and compile ``config`` of ``space``, then :func:`measure` it on ``arrays`` (random ones by
    default, from :func:`make_arrays`)."""
    schedule, _ = space.apply(config)
    start = time.perf_counter()
    kernel = build(schedule).compile()
    compile_seconds = time.perf_counter() - start
    seconds = measure(kernel, make_arrays(schedule) if arrays is None else arrays, warmup, repeat, max_seconds)
    return Measurement(seconds, space.flops / seconds / 1e9, compile_seconds)


def config_key(config: dict) -> str:
    """A config as canonical text (JSON, keys sorted): equal configs, equal keys."""
    return json.dumps(config, sort_keys=True)


class TuningLog:
    """An append-only JSON-lines file of measurements, one object per line:
    ``{"task", "config", "seconds", "gflops", ..., "when"}`` (``when``: UTC, ISO 8601).

    ``TuningLog(path)`` loads the lines already there (a malformed one is a ValueError naming its
    line number); :meth:`record` appends and flushes one line. A config measured twice keeps its
    latest record for :meth:`lookup`.
    """

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.records: list[dict] = []
        self._index: dict[tuple[str, str], dict] = {}
        if self.path.exists():
            with open(self.path, encoding="utf-8") as f:
                for number, line in enumerate(f, 1):
                    if line.strip():
                        self._add(self._parse(line, number))

    def _parse(self, line: str, number: int) -> dict:
        where = f"tuning log {self.path}, line {number}"
        try:
            record = json.loads(line)
        except json.JSONDecodeError as e:
            raise ValueError(f"{where}: not valid JSON ({e.msg})") from None
        return self._check(record, where)

    @staticmethod
    def _check(record, where: str) -> dict:
        if not isinstance(record, dict) or not isinstance(record.get("task"), str) \
                or not isinstance(record.get("config"), dict):
            raise ValueError(f"{where}: expected an object with a string 'task' and an object 'config'")
        seconds = record.get("seconds")
        if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not seconds > 0 \
                or not math.isfinite(seconds):
            raise ValueError(f"{where}: 'seconds' must be a positive finite number, got {seconds!r}")
        return record

    def _add(self, record: dict) -> None:
        self.records.append(record)
        self._index[(record["task"], config_key(record["config"]))] = record

    def __len__(self) -> int:
        return len(self.records)

    def record(self, task: str, config: dict, seconds: float, **extra) -> dict:
        """Append one measurement (``extra``: more JSON fields, e.g. ``gflops``) and return its record."""
        record = {"task": task, "config": config, "seconds": float(seconds), **extra,
                  "when": datetime.now(timezone.utc).isoformat(timespec="seconds")}
        self._check(record, f"tuning log {self.path}, new record")
        line = json.dumps(record)
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(line + "\n")
        self._add(record)
        return record

    def lookup(self, task: str, config: dict) -> dict | None:
        """The record of ``config`` measured for ``task``, or None."""
        return self._index.get((task, config_key(config)))

    def best(self, task: str) -> dict | None:
        """The fastest record of ``task`` (fewest seconds), or None when it has none."""
        records = [r for r in self._index.values() if r["task"] == task]
        return min(records, key=lambda r: r["seconds"]) if records else None

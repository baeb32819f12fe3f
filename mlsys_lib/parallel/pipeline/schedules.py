"""Pipeline schedules as plain data: for each stage, the ordered list of its actions.

An :class:`Action` is ``F(microbatch, chunk)`` (forward), ``B(microbatch, chunk)`` (backward) or
``W(microbatch, chunk)`` (weight gradient). In a schedule with ``split_backward`` (zero-bubble), ``B``
computes only the gradient with respect to the stage's *input* (what the previous stage waits for)
and ``W`` the gradient with respect to its *weights* (which nobody waits for); otherwise ``B`` is
the whole backward and there is no ``W``.

Stages and chunks: the model is cut into ``num_stages · num_chunks`` consecutive *virtual stages*;
stage ``s`` (one device) holds chunks ``0..v-1``, chunk ``c`` being virtual stage ``c·p + s``
(Megatron's interleaving: with v = 1 each stage holds one contiguous piece of the model).

:func:`make_schedule` builds the lecture's schedules (``SCHEDULES``), with p stages and m microbatches:

* ``naive``: one microbatch at a time through the whole pipeline (no pipelining);
* ``gpipe``: every forward, then every backward (m activations in flight per stage);
* ``1f1b``: p − s − 1 warm-up forwards on stage s, then one forward one backward (at most p − s in flight);
* ``interleaved_1f1b``: Megatron's 1F1B over v chunks per stage, microbatches in groups of p (needs
  m % p == 0); bubble (1/v)(p − 1)/m of the ideal time, for up to 2(p − 1) + (v − 1)p + 1 chunk activations;
* ``zb_h1``: 1F1B with the backward split into B and W, stage s deferring s of its W's to fill the
  cool-down bubble (Qi et al., *Zero Bubble Pipeline Parallelism*, 2024), at most p in flight.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

SCHEDULES = ("naive", "gpipe", "1f1b", "interleaved_1f1b", "zb_h1")
KINDS = ("F", "B", "W")


class Action(NamedTuple):
    """One unit of a stage's work: ``kind`` "F", "B" or "W" of ``microbatch`` on model chunk ``chunk``.

    A named tuple: hashing and comparing are fast, and the schedules are plain data."""

    kind: str
    microbatch: int
    chunk: int = 0

    def __str__(self) -> str:
        return f"{self.kind}{self.microbatch}" + (f".{self.chunk}" if self.chunk else "")


def F(microbatch: int, chunk: int = 0) -> Action:
    """The forward of ``microbatch`` through chunk ``chunk`` of a stage."""
    return Action("F", microbatch, chunk)


def B(microbatch: int, chunk: int = 0) -> Action:
    """The backward (input gradient, when the backward is split) of ``microbatch`` on chunk ``chunk``."""
    return Action("B", microbatch, chunk)


def W(microbatch: int, chunk: int = 0) -> Action:
    """The weight gradient of ``microbatch`` on chunk ``chunk`` (split-backward schedules only)."""
    return Action("W", microbatch, chunk)


@dataclass(frozen=True)
class Schedule:
    """``stages[s]``: the actions of stage s in the order it runs them (p = num_stages lists)."""

    name: str
    num_stages: int
    num_microbatches: int
    num_chunks: int
    split_backward: bool
    stages: tuple[tuple[Action, ...], ...]

    def peak_activations(self) -> list[int]:
        """Per stage, the most (microbatch, chunk) activations held at once: kept from F until the
        backward that frees them (B, or W when the backward is split) has run. Units: one chunk's
        activations of one microbatch (divide by ``num_chunks`` for a whole stage's)."""
        frees = "W" if self.split_backward else "B"
        peaks = []
        for actions in self.stages:
            held = peak = 0
            for action in actions:
                held += (action.kind == "F") - (action.kind == frees)
                peak = max(peak, held)
            peaks.append(peak)
        return peaks

    def __str__(self) -> str:
        rows = [f"stage {s}: " + " ".join(str(a) for a in actions) for s, actions in enumerate(self.stages)]
        return f"{self.name} (p={self.num_stages}, m={self.num_microbatches}, v={self.num_chunks})\n" + "\n".join(rows)


def _check_int(name: str, value: object, low: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < low:
        raise ValueError(f"{name} must be an int >= {low}, got {value!r}")
    return value


def make_schedule(name: str, num_stages: int, num_microbatches: int, num_chunks: int = 1) -> Schedule:
    """The schedule ``name`` (one of ``SCHEDULES``) for p stages, m microbatches and v chunks per stage.

    Only ``interleaved_1f1b`` takes ``num_chunks`` > 1, and it needs m divisible by p (Megatron's
    microbatch groups). Raises ValueError for an unknown name or sizes the schedule cannot take.
    """
    if name not in SCHEDULES:
        raise ValueError(f"unknown schedule {name!r}: expected one of {', '.join(SCHEDULES)}")
    p = _check_int("num_stages", num_stages, 1)
    m = _check_int("num_microbatches", num_microbatches, 1)
    v = _check_int("num_chunks", num_chunks, 1)
    if name != "interleaved_1f1b" and v != 1:
        raise ValueError(f"{name} has one chunk per stage (num_chunks=1), got num_chunks={v}; "
                         "only interleaved_1f1b interleaves chunks")
    if name == "interleaved_1f1b" and m % p != 0:
        raise ValueError(f"interleaved_1f1b runs microbatches in groups of num_stages: num_microbatches={m} "
                         f"must be divisible by num_stages={p}")
    build = {"naive": _naive, "gpipe": _gpipe, "1f1b": _one_f_one_b, "interleaved_1f1b": _interleaved,
             "zb_h1": _zb_h1}[name]
    stages = tuple(tuple(build(p, m, v, s)) for s in range(p))
    return Schedule(name, p, m, v, name == "zb_h1", stages)


def _naive(p: int, m: int, v: int, s: int) -> list[Action]:
    return [a for i in range(m) for a in (F(i), B(i))]


def _gpipe(p: int, m: int, v: int, s: int) -> list[Action]:
    return [F(i) for i in range(m)] + [B(i) for i in range(m)]


def _one_f_one_b(p: int, m: int, v: int, s: int) -> list[Action]:
    return _warm_up_then_alternate([F(i) for i in range(m)], [B(i) for i in range(m)], min(p - s - 1, m))


def _warm_up_then_alternate(forwards: Sequence[Action], backwards: Sequence[Action], warm_up: int) -> list[Action]:
    """``warm_up`` forwards, then one forward one backward while forwards remain, then the backwards left."""
    actions = list(forwards[:warm_up])
    for i, forward in enumerate(forwards[warm_up:]):
        actions += [forward, backwards[i]]
    return actions + list(backwards[len(forwards) - warm_up:])


def _interleaved(p: int, m: int, v: int, s: int) -> list[Action]:
    # The k-th forward of a stage: microbatch group k // (p v), within it p microbatches of chunk 0, then
    # of chunk 1, ...; the backwards visit the chunks in reverse. Megatron's warm-up: (v - 1) p forwards to
    # fill the chunks, plus 2 (p - s - 1) rather than 1F1B's p - s - 1, so that sends overlap with compute
    # (the schedule tolerates a send latency); all forwards first when m == p.
    def nth(k: int, backward: bool) -> Action:
        chunk = (k // p) % v
        microbatch = k // (p * v) * p + k % p
        return B(microbatch, v - 1 - chunk) if backward else F(microbatch, chunk)

    total = m * v
    warm_up = total if m == p else min((p - s - 1) * 2 + (v - 1) * p, total)
    return _warm_up_then_alternate([nth(k, False) for k in range(total)], [nth(k, True) for k in range(total)],
                                   warm_up)


def _zb_h1(p: int, m: int, v: int, s: int) -> list[Action]:
    actions = _one_f_one_b(p, m, v, s)
    done, out = 0, []
    # Each B is followed by a W, lagging s W's behind (stage s defers s W's); the deferred ones go last.
    for action in actions:
        out.append(action)
        if action.kind == "B" and action.microbatch >= s:
            out.append(W(done))
            done += 1
    return out + [W(i) for i in range(done, m)]

"""The lecture's closed forms for the pipeline bubble (p stages, m microbatches, v chunks per stage).

Two ways to state the same idle time, and the notes use both under one name:

* the bubble's **share of the total time** (idle area over p × makespan): for GPipe and 1F1B with
  equal stages, (p − 1)/(p − 1 + m) (the notes' "(D − 1)/(D − 1 + N)");
* the bubble **relative to the ideal time** m·(t_f + t_b) (Narayanan et al., 2021, "bubble time
  fraction"): (p − 1)/m for GPipe and 1F1B, (1/v)·(p − 1)/m for the interleaved schedule.

They are related by share = ratio / (1 + ratio). (p − 1)/m can exceed 1; a share cannot.
"""

from __future__ import annotations


def _check(num_stages: int, num_microbatches: int, num_chunks: int = 1) -> None:
    for name, value in (("num_stages", num_stages), ("num_microbatches", num_microbatches),
                        ("num_chunks", num_chunks)):
        if not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be an int >= 1, got {value!r}")


def gpipe_bubble_fraction(num_stages: int, num_microbatches: int) -> float:
    """Idle share of the total time of GPipe (and 1F1B): (p − 1)/(p − 1 + m)."""
    _check(num_stages, num_microbatches)
    return (num_stages - 1) / (num_stages - 1 + num_microbatches)


def bubble_ratio(num_stages: int, num_microbatches: int, num_chunks: int = 1) -> float:
    """Bubble time over the ideal time: (1/v)·(p − 1)/m (v = 1: GPipe and 1F1B, (p − 1)/m)."""
    _check(num_stages, num_microbatches, num_chunks)
    return (num_stages - 1) / (num_chunks * num_microbatches)


def share_of_total(ratio: float) -> float:
    """The bubble's share of the total time, from its ratio to the ideal time: r / (1 + r)."""
    if not ratio >= 0:
        raise ValueError(f"ratio must be >= 0, got {ratio!r}")
    return ratio / (1.0 + ratio)

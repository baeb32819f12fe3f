"""The lifetime chart of a memory plan: each tensor a rectangle of time (steps) × address (bytes).

matplotlib is imported when a chart is drawn, not with ``mlsys_lib.memory``: processes that only
plan or count (the ranks of a parallel launch, say) do not pay for it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

import numpy as np

from .liveness import Interval, live_bytes
from .planning import MemoryPlan

KIND_COLORS = {"input": "tab:gray", "parameter": "tab:green", "activation": "tab:blue", "gradient": "tab:orange"}
UNITS = {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30}

if TYPE_CHECKING:
    from matplotlib.axes import Axes


def plot_lifetimes(plan: MemoryPlan, intervals: Iterable[Interval], kinds: Mapping[str, str] | None = None,
                   ax: Axes | None = None, unit: str = "MiB", title: str | None = None,
                   live: np.ndarray | None = None) -> Axes:
    """Draw each tensor as the rectangle [start, end + 1) × [offset, offset + size), colored by its kind
    (``kinds``, e.g. ``graph.kinds``; all "activation" if None), the arena and the lower bound (the most
    bytes live at one step) as horizontal lines and the live bytes of each step as a staircase. ``live``:
    those bytes [B] for steps 0 .. last end, if the caller has them (default: :func:`live_bytes` of the
    intervals). Returns the Axes."""
    if unit not in UNITS:
        raise ValueError(f"unknown unit {unit!r}, expected one of {list(UNITS)}")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch, Rectangle

    intervals, kinds, scale = list(intervals), kinds or {}, UNITS[unit]
    ax = ax if ax is not None else plt.gca()
    for iv in intervals:
        color = KIND_COLORS.get(kinds.get(iv.name, "activation"), "tab:blue")
        ax.add_patch(Rectangle((iv.start, plan.offsets[iv.name] / scale), iv.end + 1 - iv.start, iv.size / scale,
                               facecolor=color, edgecolor="black", linewidth=0.2, alpha=0.8))
    live = np.asarray(live_bytes(intervals) if live is None else live, dtype=np.float64)
    ax.stairs(live / scale, np.arange(live.size + 1), color="black", linewidth=1)
    bound = live.max(initial=0)
    ax.axhline(plan.arena / scale, color="red", linestyle="--")
    ax.axhline(bound / scale, color="black", linestyle=":")
    handles = [Patch(color=KIND_COLORS.get(kind, "tab:blue"), label=kind)
               for kind in sorted({kinds.get(iv.name, "activation") for iv in intervals})]
    handles += [Line2D([], [], color="black", label="live bytes"),
                Line2D([], [], color="red", linestyle="--", label=f"arena {plan.arena / scale:.3g} {unit}"),
                Line2D([], [], color="black", linestyle=":", label=f"lower bound {bound / scale:.3g} {unit}")]
    ax.set_xlim(0, max((iv.end + 1 for iv in intervals), default=1))
    ax.set_ylim(0, max(plan.arena, bound, 1) / scale * 1.05)
    ax.set_xlabel("step (position of the op in the execution order)")
    ax.set_ylabel(f"address ({unit})")
    if title:
        ax.set_title(title)
    ax.legend(handles=handles, fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return ax

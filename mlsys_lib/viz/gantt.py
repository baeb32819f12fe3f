"""The pipeline Gantt chart of the lecture: one row per stage, one box per action, idle time blank."""

from __future__ import annotations

from typing import TYPE_CHECKING

from matplotlib.axes import Axes
from matplotlib.patches import Patch

if TYPE_CHECKING:
    from mlsys_lib.parallel.pipeline import Timeline

__all__ = ["plot_timeline"]

COLORS = {"F": "#4c72b0", "B": "#dd8452", "W": "#55a868"}


def plot_timeline(timeline: Timeline, ax: Axes | None = None, labels: bool = True, title: str | None = None) -> Axes:
    """Draw ``timeline`` (from ``parallel.pipeline.simulate``): stage 0 on top, time to the right.

    F boxes blue, B orange, W green; chunks > 0 are hatched, and each box is labelled with its
    microbatch (and ``.chunk``) when ``labels``. The title gives the makespan and bubble fraction.
    """
    schedule = timeline.schedule
    if ax is None:
        import matplotlib.pyplot as plt  # only when a new figure is wanted
        _, ax = plt.subplots(figsize=(10, 0.45 * schedule.num_stages + 1.2), layout="constrained")
    for interval in timeline.intervals:
        action = interval.action
        width = interval.end - interval.start
        ax.barh(interval.stage, width, left=interval.start, height=0.8, color=COLORS[action.kind],
                edgecolor="white", linewidth=0.5, hatch="//" if action.chunk else None)
        if labels:
            ax.text(interval.start + width / 2, interval.stage, str(action)[1:], ha="center", va="center",
                    fontsize=6, color="white")
    ax.set_ylim(schedule.num_stages - 0.5, -0.5)
    ax.set_yticks(range(schedule.num_stages), [f"stage {s}" for s in range(schedule.num_stages)])
    ax.set_xlim(0, timeline.makespan)
    ax.set_xlabel("time")
    ax.set_title(title or f"{schedule.name}: p = {schedule.num_stages}, m = {schedule.num_microbatches}"
                 + (f", v = {schedule.num_chunks}" if schedule.num_chunks > 1 else "")
                 + f"; makespan {timeline.makespan:g}, bubble {timeline.bubble_fraction:.1%}", fontsize=9, loc="left")
    kinds = {interval.action.kind for interval in timeline.intervals}
    handles = [Patch(color=COLORS[k], label=name)
               for k, name in (("F", "forward"), ("B", "backward"), ("W", "weight grad")) if k in kinds]
    ax.legend(handles=handles, loc="lower right", bbox_to_anchor=(1.0, 1.0), fontsize=7, ncols=len(handles),
              frameon=False, borderaxespad=0.0)
    return ax

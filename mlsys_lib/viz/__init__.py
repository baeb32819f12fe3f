"""Plotting helpers the labs and lectures share (matplotlib; they return Axes and never show)."""

from .gantt import plot_timeline
from .roofline import plot_roofline

__all__ = ["plot_roofline", "plot_timeline"]

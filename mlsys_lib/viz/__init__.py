"""Plotting helpers the labs and lectures share (matplotlib; they return Axes and never show)."""

from .claims import claim, median_time
from .gantt import plot_timeline
from .roofline import plot_roofline

__all__ = ["claim", "median_time", "plot_roofline", "plot_timeline"]

"""The roofline plot: attainable FLOP/s against arithmetic intensity, on log-log axes."""

from __future__ import annotations

from typing import Mapping

import numpy as np
from matplotlib.axes import Axes

from mlsys_lib.tensor.roofline import Roofline

__all__ = ["plot_roofline"]


def plot_roofline(roofline: Roofline, points: Mapping[str, tuple[float, float]] | None = None,
                  ax: Axes | None = None) -> Axes:
    """Draw ``roofline`` and the measured ``points`` on log-log axes; return the Axes.

    ``points`` maps a label to ``(intensity [FLOP/byte], achieved [FLOP/s])``. The roof is the
    memory slope ``intensity * bandwidth`` up to the ridge point, then the flat compute ceiling
    ``peak_flops``; the ridge is marked with a dotted line. A new figure is made when ``ax`` is None.
    """
    points = dict(points or {})
    for name, (intensity, achieved) in points.items():
        if not (intensity > 0 and achieved > 0):
            raise ValueError(f"point {name!r} needs positive intensity and FLOP/s for log axes, "
                             f"got ({intensity}, {achieved})")
    if ax is None:
        import matplotlib.pyplot as plt  # only when a new figure is wanted
        _, ax = plt.subplots(figsize=(6, 4), layout="constrained")

    ridge = roofline.ridge_point
    intensities = [i for i, _ in points.values()] + [ridge]
    x = np.geomspace(min(intensities) / 8, max(intensities) * 8, 256)
    ax.loglog(x, roofline.attainable(x), color="black", linewidth=2,
              label=f"roof: {roofline.bandwidth / 1e9:.3g} GB/s, {roofline.peak_flops / 1e9:.3g} GFLOP/s")
    ax.axvline(ridge, color="gray", linestyle=":", linewidth=1)
    ax.annotate(f"ridge {ridge:.3g} FLOP/B", (ridge, roofline.peak_flops), textcoords="offset points",
                xytext=(4, -14), fontsize=8, color="gray")
    for name, (intensity, achieved) in points.items():
        ax.plot([intensity], [achieved], "o", label=name)  # a legend, not labels: points may coincide
    ax.set_xlabel("arithmetic intensity [FLOP/byte]")
    ax.set_ylabel("attainable performance [FLOP/s]")
    ax.set_title("Roofline")
    ax.legend(loc="lower right", fontsize=8)
    return ax

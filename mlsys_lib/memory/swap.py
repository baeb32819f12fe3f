"""Swapping layers' weights in from host memory while earlier layers compute (a timeline simulation).

The device holds two layers' weights at a time (double buffering): layer i computes while layer i+1's
weights come over the link (PCIe, NVLink-C2C) at ``bandwidth`` bytes/s. Layer i starts when its weights
have arrived and layer i-1 is done; layer i+1's transfer starts when the link is free and a buffer is:
when layer i-1 has finished. The transfer hides behind compute when it takes no longer than the layer
before it; otherwise the GPU stalls. Without prefetching each transfer waits for the previous layer.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class SwapTimeline:
    """Start and end times (seconds) of each layer's weight transfer and compute."""

    transfers: list[tuple[float, float]]
    computes: list[tuple[float, float]]

    @property
    def total(self) -> float:
        """When the last layer finishes (s)."""
        return self.computes[-1][1] if self.computes else 0.0

    @property
    def stall(self) -> float:
        """Time the compute unit waited for weights (s): total minus the compute time."""
        return self.total - sum(end - start for start, end in self.computes)


def swap_in_timeline(layer_bytes: Sequence[float], compute_seconds: Sequence[float], bandwidth: float,
                     prefetch: bool = True) -> SwapTimeline:
    """Simulate a forward pass whose layers' weights all start in host memory.

    layer_bytes[i]: bytes of layer i's weights; compute_seconds[i]: its compute time (s);
    bandwidth: of the host-to-device link (bytes/s). prefetch: load layer i+1 during layer i.
    """
    if len(layer_bytes) != len(compute_seconds):
        raise ValueError(f"{len(layer_bytes)} layer sizes but {len(compute_seconds)} compute times")
    if bandwidth <= 0:
        raise ValueError(f"bandwidth must be positive (bytes/s), got {bandwidth}")
    if any(b < 0 for b in layer_bytes) or any(t < 0 for t in compute_seconds):
        raise ValueError("layer sizes and compute times must be >= 0")
    transfers: list[tuple[float, float]] = []
    computes: list[tuple[float, float]] = []
    for i, (nbytes, seconds) in enumerate(zip(layer_bytes, compute_seconds)):
        link_free = transfers[-1][1] if transfers else 0.0
        previous_done = computes[-1][1] if computes else 0.0
        buffer_free = computes[-2][1] if len(computes) >= 2 else 0.0  # layer i-2's weights can go
        begin = max(link_free, buffer_free if prefetch else previous_done)
        transfers.append((begin, begin + nbytes / bandwidth))
        start = max(transfers[-1][1], previous_done)
        computes.append((start, start + seconds))
    return SwapTimeline(transfers, computes)

"""Pairwise exchange all-to-all: p−1 rounds, in round s rank r sends to r+s and receives from r−s.

Every round is a perfect matching of senders to receivers (rank r−s sends to r while r sends to
r+s), so under the "rendezvous" protocol every send finds its receive posted in the same round and
nothing deadlocks. Each chunk crosses the network once: (p−1)(α + (n/p)β) with n the bytes one
rank sends in all (p equal chunks of n/p bytes, its own included).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from .blocks import block

if TYPE_CHECKING:
    from .messages import GroupView


class Pairwise:
    """Direct exchange: every chunk goes straight to its destination, one partner per round."""

    def all_to_all(self, g: GroupView, send: np.ndarray, send_bounds: Sequence[int],
                   recv: np.ndarray, recv_bounds: Sequence[int]) -> None:
        """Copy block j of rank i's ``send`` into block i of rank j's ``recv``, for every i ≠ j."""
        p, r = g.world_size, g.rank
        for s in range(1, p):
            dst, src = (r + s) % p, (r - s) % p
            sending = g.isend(block(send, send_bounds, dst), dst)
            g.recv(src, out=block(recv, recv_bounds, src))
            sending.wait()

"""Warp-level view of an instrumented launch: requests, 32-byte sectors, bank conflicts, divergence.

A GPU issues memory instructions per *warp* (32 consecutive threads of a block, linear thread id
``x + X * (y + Y * z)``), not per thread. The instrument logs every element access of every thread
as (site, epoch, occurrence, array, load/store, byte address): the *site* is the source position
the kernel's own code is at (the subscript, or the call of the device function that made the
access), the *epoch* how many ``syncthreads`` the thread passed, the *occurrence* how many times the
thread ran that site before in this epoch. The accesses of one warp with the same site, epoch,
occurrence, array and direction form one **request**, what the hardware would issue as one
instruction. Per request (:func:`analyze`, vectorized over the whole launch):

* global memory: **sectors** = distinct 32-byte segments of the array the request touches (arrays
  start 256-byte aligned, as ``cudaMalloc`` returns them): a coalesced float32 warp needs 4, a
  float64 warp 8, a stride of 32 floats 32 (Nsight Compute's sectors per request:
  ``l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum / l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum``,
  ``_op_st`` for stores);
* shared memory: 32 banks of 4-byte words, word ``w`` in bank ``w % 32`` (each shared array starts
  at bank 0). **Wavefronts** = the most distinct words any one bank serves (threads reading the same
  word share it: a broadcast is free); **bank conflicts** = wavefronts minus the fewest a request of
  that many words needs, ``ceil(words / 32)``, so a column of a 32 x 32 float tile costs 31 and an
  8-byte access of a full warp none (Nsight: ``l1tex__data_bank_conflicts_pipe_lsu_mem_shared``);
* **divergence**: a request made by some but not all of the warp's threads (those of the block
  that fall in the warp) is *divergent*: the warp ran that access with lanes masked off, because of
  a branch or a loop the lanes left at different times. Only branches that access arrays are seen.
  ``1 - divergent / requests`` approximates Nsight's branch efficiency.

The grouping by occurrence assumes the lanes of a warp run a site the same number of times between
two barriers up to a branch; a site reached by different lanes in different iterations of one loop
counts as fewer, fuller requests than the hardware issues. Atomics count as reads and writes but
form no requests.
"""

from __future__ import annotations

import numpy as np

from .report import Requests, WarpStats

WARP_SIZE = 32
SECTOR_BYTES = 32
BANKS = 32
BANK_BYTES = 4


def analyze(log: np.ndarray, block: np.ndarray, thread: np.ndarray, threads_per_block: int,
            itemsizes: list[int], shared: list[bool]) -> tuple[dict[tuple[int, bool], Requests], WarpStats]:
    """Requests per (region, is_store) and the launch's divergence, from the access ``log``.

    ``log`` is int64 (n_accesses, 7), one row per element access: probe (index into ``block`` and
    ``thread``, the linear block and thread id of the accessing thread), site, epoch, occurrence,
    region, is_store (0 or 1), byte address in the region. Region ``r`` has elements of ``itemsizes[r]``
    bytes and is shared memory if ``shared[r]``, global memory otherwise.
    """
    if len(log) == 0:
        return {}, WarpStats()
    probe, site, epoch, occurrence, region, store, address = log.T
    warps_per_block = -(-threads_per_block // WARP_SIZE)
    warp = block[probe] * warps_per_block + thread[probe] // WARP_SIZE
    request, first = _group(warp, region, store, site, epoch, occurrence)
    n_requests = len(first)
    lanes = np.bincount(request, minlength=n_requests)
    request_warp = warp[first]
    first_thread = (request_warp % warps_per_block) * WARP_SIZE
    divergent = lanes < np.minimum(WARP_SIZE, threads_per_block - first_thread)

    size = np.asarray(itemsizes, dtype=np.int64)[region]
    is_shared = np.asarray(shared, dtype=bool)[region]
    sectors = _distinct_units(request[~is_shared], address[~is_shared], size[~is_shared], SECTOR_BYTES, n_requests)
    wavefronts, conflicts = _bank_wavefronts(request[is_shared], address[is_shared], size[is_shared], n_requests)

    kind = 2 * region[first] + store[first]  # (region, is_store) of each request
    totals = [np.bincount(kind, weights=w) for w in (None, sectors, wavefronts, conflicts)]
    requests = {(k // 2, bool(k % 2)): Requests(*(int(t[k]) for t in totals)) for k in np.unique(kind).tolist()}
    stats = WarpStats(n_requests, int(divergent.sum()), len(np.unique(request_warp[divergent])))
    return requests, stats


def _group(*columns: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Rows with equal values in every column form a group: (group id of each row, first row of each group)."""
    order = np.lexsort(columns[::-1])
    starts = np.zeros(len(order), dtype=bool)
    starts[:1] = True
    for column in columns:
        ordered = column[order]
        starts[1:] |= ordered[1:] != ordered[:-1]
    group = np.empty(len(order), dtype=np.int64)
    group[order] = np.cumsum(starts) - 1
    return group, order[starts]


def _units(request: np.ndarray, address: np.ndarray, size: np.ndarray, unit: int) -> tuple[np.ndarray, np.ndarray]:
    """Every (request, unit index) an access covers: bytes ``address .. address + size - 1`` in ``unit``-byte units."""
    first = address // unit
    count = (address + size - 1) // unit - first + 1
    starts = np.repeat(np.cumsum(count) - count, count)
    return np.repeat(request, count), np.repeat(first, count) + np.arange(int(count.sum())) - starts


def _distinct_units(request: np.ndarray, address: np.ndarray, size: np.ndarray, unit: int, n: int) -> np.ndarray:
    """Per request, how many distinct ``unit``-byte segments its accesses touch: int64 (n,)."""
    requests, units = _units(request, address, size, unit)
    _, first = _group(requests, units)
    return np.bincount(requests[first], minlength=n)


def _bank_wavefronts(request: np.ndarray, address: np.ndarray, size: np.ndarray,
                     n: int) -> tuple[np.ndarray, np.ndarray]:
    """Per request, shared-memory wavefronts (the busiest bank's distinct words) and bank conflicts."""
    requests, words = _units(request, address, size, BANK_BYTES)
    _, first = _group(requests, words)
    requests, words = requests[first], words[first]  # each distinct (request, word) once
    bank_group, bank_first = _group(requests, words % BANKS)
    wavefronts = np.zeros(n, dtype=np.int64)
    np.maximum.at(wavefronts, requests[bank_first], np.bincount(bank_group))
    ideal = -(-np.bincount(requests, minlength=n) // BANKS)
    return wavefronts, wavefronts - ideal

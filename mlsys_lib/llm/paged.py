"""Paged KV cache: vLLM's block manager, attention through a block table, and the contiguous baseline.

Units: a *slot* holds the K and V of one token (all layers and KV heads, in a real model); a *block* is
``block_size`` consecutive slots. A sequence's tokens 0, 1, 2, ... are its *logical* positions.

* :class:`BlockAllocator` hands out physical blocks from a free list and keeps a reference count per
  block and a :class:`BlockTable` per sequence (logical block i -> physical block). Memory is taken one
  block at a time as a sequence grows, so a sequence wastes at most ``block_size - 1`` slots (in its last
  block). :meth:`BlockAllocator.fork` shares every block of a parent with a child (a shared prompt, beam
  search); writing into a shared last block first copies it (copy-on-write).
* :class:`PagedKVCache` is the physical store, ``(num_blocks, block_size, n_kv_heads, head_dim)`` for K and
  for V; :func:`paged_attention` attends one query token to a sequence's context read through its table.
* :class:`ContiguousAllocator` is what paging replaces: each sequence reserves one contiguous range of a
  token arena, sized for the longest it may grow, placed first-fit. It wastes the unused part of every
  reservation (internal fragmentation) and the free gaps between reservations too short to place the next
  one (external fragmentation); :func:`fragmentation` measures both for either allocator.

Both allocators answer the same calls (``can_allocate``, ``allocate``, ``can_append``, ``append_token``,
``free``, ``num_tokens``), so the serving simulator runs on either.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass

import numpy as np

__all__ = ["OutOfBlocks", "BlockTable", "BlockAllocator", "ContiguousAllocator", "Fragmentation", "fragmentation",
           "PagedKVCache", "paged_attention"]


class OutOfBlocks(RuntimeError):
    """Not enough free KV memory: ``need`` and ``free`` are in the allocator's unit (blocks or slots)."""

    def __init__(self, need: int, free: int, unit: str = "blocks", detail: str = ""):
        super().__init__(f"out of KV memory: need {need} {unit}, {free} free{detail}")
        self.need, self.free = need, free


def _check_count(name: str, value: object, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value < minimum:
        raise ValueError(f"{name} must be at least {minimum}, got {value}")
    return int(value)


@dataclass(frozen=True)
class BlockTable:
    """A snapshot of one sequence's mapping: logical block i lives in physical block ``blocks[i]``;
    the sequence holds ``num_tokens`` tokens (slots) of ``block_size`` per block."""

    blocks: tuple[int, ...]
    num_tokens: int
    block_size: int

    def slots(self, positions: np.ndarray | Sequence[int]) -> np.ndarray:
        """Flat physical slot ``block * block_size + offset`` of each logical position (vLLM's slot mapping).

        ValueError for a position outside ``[0, len(blocks) * block_size)``.
        """
        positions = np.asarray(positions, dtype=np.int64)
        limit = len(self.blocks) * self.block_size
        if positions.size and (positions.min() < 0 or positions.max() >= limit):
            raise ValueError(f"positions must lie in [0, {limit}) for a table of {len(self.blocks)} blocks, "
                             f"got {positions.min()}..{positions.max()}")
        blocks = np.asarray(self.blocks, dtype=np.int64)
        return blocks[positions // self.block_size] * self.block_size + positions % self.block_size


class _Sequences:
    """Sequence-id bookkeeping both allocators share: known ids, and ids already freed (double free)."""

    def __init__(self) -> None:
        self._state: dict[Hashable, object] = {}
        self._freed: set[Hashable] = set()

    def _lookup(self, seq_id: Hashable):
        if seq_id in self._state:
            return self._state[seq_id]
        if seq_id in self._freed:
            raise ValueError(f"sequence {seq_id!r} was already freed (double free or use after free)")
        raise ValueError(f"unknown sequence id {seq_id!r}: allocate it first")

    def _check_new(self, seq_id: Hashable) -> None:
        if seq_id in self._state:
            raise ValueError(f"sequence {seq_id!r} is already allocated")

    def _add(self, seq_id: Hashable, state: object) -> None:
        self._check_new(seq_id)
        self._freed.discard(seq_id)
        self._state[seq_id] = state

    def _remove(self, seq_id: Hashable):
        state = self._lookup(seq_id)
        del self._state[seq_id]
        self._freed.add(seq_id)
        return state

    @property
    def sequences(self) -> list[Hashable]:
        """Ids of the sequences holding memory, in allocation order."""
        return list(self._state)


class BlockAllocator(_Sequences):
    """vLLM's block manager: ``num_blocks`` physical blocks of ``block_size`` slots, a free list, a
    reference count per block and a block table per sequence.

    Free blocks are handed out lowest id first; freed blocks are reused first (a stack).
    """

    def __init__(self, num_blocks: int, block_size: int):
        super().__init__()
        self.num_blocks = _check_count("num_blocks", num_blocks, 1)
        self.block_size = _check_count("block_size", block_size, 1)
        self._free = list(range(self.num_blocks - 1, -1, -1))
        self._refcount = [0] * self.num_blocks
        self._length: dict[Hashable, int] = {}

    @property
    def num_free_blocks(self) -> int:
        return len(self._free)

    @property
    def capacity_slots(self) -> int:
        """Slots in all blocks, ``num_blocks * block_size``."""
        return self.num_blocks * self.block_size

    def blocks_for(self, n_tokens: int) -> int:
        """Blocks that hold ``n_tokens`` tokens: ``ceil(n_tokens / block_size)``."""
        return -(-_check_count("n_tokens", n_tokens, 0) // self.block_size)

    def slots_for(self, n_tokens: int, max_tokens: int | None = None) -> int:
        """Slots ``allocate(seq_id, n_tokens, max_tokens)`` takes: whole blocks for ``n_tokens``."""
        return self.blocks_for(n_tokens) * self.block_size

    def refcount(self, block: int) -> int:
        """How many sequences' tables hold physical ``block`` (0: it is free)."""
        return self._refcount[block]

    def num_tokens(self, seq_id: Hashable) -> int:
        self._lookup(seq_id)
        return self._length[seq_id]

    def table(self, seq_id: Hashable) -> BlockTable:
        """A snapshot of ``seq_id``'s block table."""
        return BlockTable(tuple(self._lookup(seq_id)), self._length[seq_id], self.block_size)

    def can_allocate(self, n_tokens: int, max_tokens: int | None = None) -> bool:
        """Whether ``allocate`` of ``n_tokens`` would succeed now. ``max_tokens`` is accepted for parity with
        :class:`ContiguousAllocator` and ignored: paging never reserves ahead."""
        return self.blocks_for(n_tokens) <= len(self._free)

    def allocate(self, seq_id: Hashable, n_tokens: int, max_tokens: int | None = None) -> BlockTable:
        """Give new sequence ``seq_id`` the blocks for ``n_tokens`` tokens (its prompt).

        OutOfBlocks (naming need and free) when there are too few free blocks; nothing is taken then.
        """
        self._check_new(seq_id)
        need = self.blocks_for(n_tokens)
        if need > len(self._free):
            raise OutOfBlocks(need, len(self._free), detail=f" (sequence {seq_id!r}, {n_tokens} tokens)")
        self._add(seq_id, [self._take() for _ in range(need)])
        self._length[seq_id] = n_tokens
        return self.table(seq_id)

    def _needs_block_to_append(self, seq_id: Hashable) -> bool:
        blocks = self._lookup(seq_id)
        full = self._length[seq_id] == len(blocks) * self.block_size
        return full or self._refcount[blocks[-1]] > 1

    def can_append(self, seq_id: Hashable) -> bool:
        """Whether ``append_token(seq_id)`` would succeed now."""
        return not self._needs_block_to_append(seq_id) or bool(self._free)

    def append_token(self, seq_id: Hashable) -> tuple[int, int] | None:
        """Make room for one more token of ``seq_id``.

        A new block is taken only when the last one is full. When the last block is shared with another
        sequence (after :meth:`fork`) and not full, it is copied first: the sequence gets a fresh block and
        the call returns ``(src, dst)``, the physical copy the caller must perform on the KV data
        (:meth:`PagedKVCache.copy_block`) before writing the new token. Otherwise returns None.
        OutOfBlocks when a block is needed and none is free; the table is unchanged then.
        """
        blocks, copy = self._lookup(seq_id), None
        if self._needs_block_to_append(seq_id):
            new = self._take()
            if self._length[seq_id] == len(blocks) * self.block_size:
                blocks.append(new)
            else:
                copy = (blocks[-1], new)
                self._release(blocks[-1])
                blocks[-1] = new
        self._length[seq_id] += 1
        return copy

    def fork(self, parent: Hashable, child: Hashable) -> BlockTable:
        """New sequence ``child`` sharing all of ``parent``'s blocks (reference counts + 1); no copy now."""
        blocks = list(self._lookup(parent))
        self._add(child, blocks)
        self._length[child] = self._length[parent]
        for block in blocks:
            self._refcount[block] += 1
        return self.table(child)

    def free(self, seq_id: Hashable) -> None:
        """Drop ``seq_id``'s table; each block's count goes down and a block at 0 returns to the free list.

        ValueError for an unknown id or one already freed.
        """
        for block in reversed(self._remove(seq_id)):
            self._release(block)
        del self._length[seq_id]

    def _take(self) -> int:
        if not self._free:
            raise OutOfBlocks(1, 0)
        block = self._free.pop()
        self._refcount[block] = 1
        return block

    def _release(self, block: int) -> None:
        if self._refcount[block] <= 0:
            raise RuntimeError(f"block {block} released with reference count {self._refcount[block]}")
        self._refcount[block] -= 1
        if self._refcount[block] == 0:
            self._free.append(block)

    def reserved_slots(self) -> int:
        """Slots of every block some sequence holds (a shared block counted once)."""
        return (self.num_blocks - len(self._free)) * self.block_size

    def used_slots(self) -> int:
        """Slots holding a token, counted once per physical block. Only a sequence's last block can have
        empty slots, and sequences sharing a block fill it alike (a write to a shared block copies it)."""
        empty = {blocks[-1]: len(blocks) * self.block_size - self._length[seq_id]
                 for seq_id, blocks in self._state.items() if blocks}
        return self.reserved_slots() - sum(empty.values())

    def unusable_free_slots(self, request_tokens: int) -> int:
        """Always 0: any free block can serve any sequence, so paging has no external fragmentation."""
        return 0


class ContiguousAllocator(_Sequences):
    """Pre-allocation in one token arena of ``capacity_tokens`` slots: each sequence reserves one
    contiguous range for the most tokens it may ever hold, placed at the lowest free address where it
    fits (first-fit), and grows inside it.

    ``reserve`` says how long a reservation is: ``"max_seq_len"`` (the model's context limit, for every
    sequence: the server does not know how long a request will grow) or ``"max_tokens"`` (the bound
    each ``allocate`` call states, e.g. prompt + the request's max_new_tokens; reservations then differ
    in length and free runs between them can be too short: external fragmentation). A sequence's state
    is ``[start, reserved, num_tokens]``.
    """

    def __init__(self, capacity_tokens: int, max_seq_len: int, reserve: str = "max_seq_len"):
        super().__init__()
        self.capacity_slots = _check_count("capacity_tokens", capacity_tokens, 1)
        self.max_seq_len = _check_count("max_seq_len", max_seq_len, 1)
        if reserve not in ("max_seq_len", "max_tokens"):
            raise ValueError(f"reserve must be 'max_seq_len' or 'max_tokens', got {reserve!r}")
        self.reserve = reserve

    def slots_for(self, n_tokens: int, max_tokens: int | None = None) -> int:
        """Slots ``allocate(seq_id, n_tokens, max_tokens)`` takes: the whole reservation."""
        return self._reserve(n_tokens, max_tokens)

    def num_tokens(self, seq_id: Hashable) -> int:
        return self._lookup(seq_id)[2]

    def reservation(self, seq_id: Hashable) -> range:
        """The arena slots ``seq_id`` holds."""
        start, reserved, _ = self._lookup(seq_id)
        return range(start, start + reserved)

    def holes(self) -> list[tuple[int, int]]:
        """The free runs of the arena as ``(start, length)``, by address."""
        runs, cursor = [], 0
        for start, reserved, _ in sorted(self._state.values()):
            if start > cursor:
                runs.append((cursor, start - cursor))
            cursor = start + reserved
        if cursor < self.capacity_slots:
            runs.append((cursor, self.capacity_slots - cursor))
        return runs

    def _reserve(self, n_tokens: int, max_tokens: int | None) -> int:
        bound = self.max_seq_len if max_tokens is None else _check_count("max_tokens", max_tokens, 1)
        if not _check_count("n_tokens", n_tokens, 0) <= bound <= self.max_seq_len:
            raise ValueError(f"need n_tokens <= max_tokens <= max_seq_len, got {n_tokens}, {bound}, "
                             f"{self.max_seq_len}")
        return bound if self.reserve == "max_tokens" else self.max_seq_len

    def _first_fit(self, reserve: int) -> int | None:
        return next((start for start, length in self.holes() if length >= reserve), None)

    def can_allocate(self, n_tokens: int, max_tokens: int | None = None) -> bool:
        """Whether some free run holds the reservation for a sequence of ``n_tokens`` now and at most
        ``max_tokens`` (default ``max_seq_len``) ever."""
        return self._first_fit(self._reserve(n_tokens, max_tokens)) is not None

    def allocate(self, seq_id: Hashable, n_tokens: int, max_tokens: int | None = None) -> range:
        """Reserve contiguous slots for ``seq_id`` (see ``reserve``; ``max_tokens``, default ``max_seq_len``,
        is the most it may grow to), the first ``n_tokens`` of them used now; returns the reserved range.

        OutOfBlocks (in slots, with the longest free run) when no free run is long enough.
        """
        self._check_new(seq_id)
        reserve = self._reserve(n_tokens, max_tokens)
        start = self._first_fit(reserve)
        if start is None:
            free = self.capacity_slots - self.reserved_slots()
            longest = max((length for _, length in self.holes()), default=0)
            raise OutOfBlocks(reserve, free, "contiguous slots", f", the longest free run is {longest}")
        self._add(seq_id, [start, reserve, n_tokens])
        return self.reservation(seq_id)

    def can_append(self, seq_id: Hashable) -> bool:
        """Whether ``seq_id``'s reservation has a slot left."""
        _, reserved, used = self._lookup(seq_id)
        return used < reserved

    def append_token(self, seq_id: Hashable) -> None:
        """Use the next slot of ``seq_id``'s reservation; OutOfBlocks when the reservation is full."""
        state = self._lookup(seq_id)
        if state[2] == state[1]:
            raise OutOfBlocks(1, 0, "slots", f" in the {state[1]}-slot reservation of sequence {seq_id!r}")
        state[2] += 1

    def free(self, seq_id: Hashable) -> None:
        """Release ``seq_id``'s reservation; ValueError for an unknown id or one already freed."""
        self._remove(seq_id)

    def reserved_slots(self) -> int:
        return sum(reserved for _, reserved, _ in self._state.values())

    def used_slots(self) -> int:
        return sum(used for _, _, used in self._state.values())

    def unusable_free_slots(self, request_tokens: int) -> int:
        """Free slots in runs shorter than ``request_tokens`` (they cannot hold that reservation)."""
        return sum(length for _, length in self.holes() if length < request_tokens)


@dataclass(frozen=True)
class Fragmentation:
    """Where an allocator's slots are, at one moment: ``used`` (holding a token), ``internal`` (held by a
    sequence, no token in it), ``external`` (free, in a run too short for the next request) and the rest
    ``usable`` (free and usable). Together they make ``capacity``."""

    capacity: int
    used: int
    internal: int
    external: int

    @property
    def usable(self) -> int:
        return self.capacity - self.used - self.internal - self.external

    @property
    def waste_fraction(self) -> float:
        """(internal + external) / capacity."""
        return (self.internal + self.external) / self.capacity


def fragmentation(allocator: BlockAllocator | ContiguousAllocator, request_tokens: int = 0) -> Fragmentation:
    """Internal and external waste of ``allocator`` now, for a next request of ``request_tokens`` slots
    (its reservation; only a contiguous arena has external waste)."""
    used, reserved = allocator.used_slots(), allocator.reserved_slots()
    return Fragmentation(allocator.capacity_slots, used, reserved - used,
                         allocator.unusable_free_slots(request_tokens))


class PagedKVCache:
    """Physical KV store: ``k`` and ``v`` of shape ``(num_blocks, block_size, n_kv_heads, head_dim)``; one
    layer's cache (a model keeps one per layer, all sharing the block tables)."""

    def __init__(self, num_blocks: int, block_size: int, n_kv_heads: int, head_dim: int,
                 dtype: np.dtype | type = np.float64):
        shape = tuple(_check_count(name, value, 1) for name, value in
                      (("num_blocks", num_blocks), ("block_size", block_size),
                       ("n_kv_heads", n_kv_heads), ("head_dim", head_dim)))
        self.k = np.zeros(shape, dtype=dtype)
        self.v = np.zeros(shape, dtype=dtype)

    @property
    def block_size(self) -> int:
        return self.k.shape[1]

    def _flat(self, array: np.ndarray) -> np.ndarray:
        return array.reshape(-1, *array.shape[2:])  # (num_blocks * block_size, n_kv_heads, head_dim), a view

    def write(self, table: BlockTable, start: int, k: np.ndarray, v: np.ndarray) -> None:
        """Store ``k``, ``v`` of shape ``(n, n_kv_heads, head_dim)`` at logical positions ``start .. start+n-1``."""
        expected = (len(k),) + self.k.shape[2:]
        if np.shape(k) != expected or np.shape(v) != expected:
            raise ValueError(f"k and v must have shape (n, n_kv_heads, head_dim) = {expected}, "
                             f"got {np.shape(k)} and {np.shape(v)}")
        slots = table.slots(np.arange(start, start + len(k)))
        self._flat(self.k)[slots] = k
        self._flat(self.v)[slots] = v

    def gather(self, table: BlockTable, context_len: int) -> tuple[np.ndarray, np.ndarray]:
        """K and V of positions ``0 .. context_len-1`` read through ``table``; each
        ``(context_len, n_kv_heads, head_dim)``."""
        slots = table.slots(np.arange(_check_count("context_len", context_len, 1)))
        return self._flat(self.k)[slots], self._flat(self.v)[slots]

    def copy_block(self, src: int, dst: int) -> None:
        """The copy of copy-on-write: block ``dst`` gets ``src``'s K and V."""
        self.k[dst] = self.k[src]
        self.v[dst] = self.v[src]


def paged_attention(q: np.ndarray, cache: PagedKVCache, block_table: BlockTable, context_len: int) -> np.ndarray:
    """Attention of one new token to a sequence's first ``context_len`` tokens, read through its table.

    ``q``: ``(n_heads, head_dim)``; query head h reads KV head ``h // (n_heads // n_kv_heads)`` (MHA, MQA,
    GQA). Returns ``(n_heads, head_dim)``: ``softmax(q k^T / sqrt(head_dim)) v`` per head (no mask: every
    context token precedes the query).
    """
    n_kv_heads, head_dim = cache.k.shape[2:]
    if np.ndim(q) != 2 or np.shape(q)[1] != head_dim or np.shape(q)[0] % n_kv_heads:
        raise ValueError(f"q must have shape (n_heads, {head_dim}) with n_heads a multiple of n_kv_heads = "
                         f"{n_kv_heads}, got {np.shape(q)}")
    if context_len > block_table.num_tokens:
        raise ValueError(f"context_len {context_len} exceeds the sequence's {block_table.num_tokens} tokens")
    keys, values = cache.gather(block_table, context_len)  # (T, n_kv_heads, head_dim)
    group = q.shape[0] // n_kv_heads
    keys, values = np.repeat(keys, group, axis=1), np.repeat(values, group, axis=1)  # (T, n_heads, head_dim)
    scores = np.einsum("hd,thd->ht", q, keys) / np.sqrt(head_dim)
    weights = np.exp(scores - scores.max(axis=1, keepdims=True))
    weights /= weights.sum(axis=1, keepdims=True)
    return np.einsum("ht,thd->hd", weights, values)

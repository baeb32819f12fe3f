"""mlsys_lib.llm.paged: the block manager against a copy-everything model, attention through block tables
against plain numpy attention, the contiguous allocator and fragmentation by hand."""

import numpy as np
import pytest

from mlsys_lib.llm.paged import (BlockAllocator, ContiguousAllocator, Fragmentation, OutOfBlocks, PagedKVCache,
                                 fragmentation, paged_attention)


def attention_by_hand(q, keys, values):
    """One query per head against contiguous keys/values (T, n_kv_heads, dh); head h reads kv head h // group."""
    n_heads, dh = q.shape
    group = n_heads // keys.shape[1]
    out = np.empty_like(q)
    for h in range(n_heads):
        k, v = keys[:, h // group], values[:, h // group]
        s = k @ q[h] / np.sqrt(dh)
        p = np.exp(s - s.max())
        out[h] = (p / p.sum()) @ v
    return out


def test_blocks_are_taken_only_when_the_last_one_is_full():
    alloc = BlockAllocator(num_blocks=8, block_size=4)
    table = alloc.allocate("a", 5)
    assert table.blocks == (0, 1) and table.num_tokens == 5 and alloc.num_free_blocks == 6
    for n in range(6, 14):
        assert alloc.append_token("a") is None
        assert len(alloc.table("a").blocks) == -(-n // 4) == 8 - alloc.num_free_blocks
    assert alloc.table("a").slots([0, 3, 4, 12]).tolist() == [0, 3, 4, 3 * 4 + 0]
    alloc.allocate("empty", 0)
    assert alloc.table("empty").blocks == () and alloc.append_token("empty") is None
    assert alloc.table("empty").blocks == (4,)


def test_errors_name_the_problem():
    alloc = BlockAllocator(num_blocks=3, block_size=4)
    alloc.allocate("a", 9)
    with pytest.raises(OutOfBlocks, match="need 2 blocks, 0 free") as info:
        alloc.allocate("b", 5)
    assert (info.value.need, info.value.free) == (2, 0)
    assert alloc.sequences == ["a"] and alloc.num_free_blocks == 0, "a failed allocate takes nothing"
    with pytest.raises(OutOfBlocks):
        for _ in range(4):
            alloc.append_token("a")
    assert alloc.num_tokens("a") == 12 and len(alloc.table("a").blocks) == 3, "a failed append changes nothing"
    with pytest.raises(ValueError, match="unknown sequence id 'zz'"):
        alloc.append_token("zz")
    with pytest.raises(ValueError, match="already allocated"):
        alloc.allocate("a", 1)
    alloc.free("a")
    with pytest.raises(ValueError, match="already freed"):
        alloc.free("a")
    with pytest.raises(ValueError, match="already freed"):
        alloc.fork("a", "b")
    with pytest.raises(ValueError, match="block_size must be at least 1"):
        BlockAllocator(4, 0)
    with pytest.raises(TypeError, match="n_tokens must be an int"):
        alloc.allocate("c", 2.5)
    with pytest.raises(ValueError, match="positions must lie in"):
        alloc.allocate("d", 3).slots([4])


def _check_invariants(alloc, contents):
    """Reference counts equal the number of tables holding each block; free list and held blocks
    partition the blocks; a sequence wastes at most block_size - 1 slots."""
    held = [b for seq in alloc.sequences for b in alloc.table(seq).blocks]
    counts = np.bincount(held, minlength=alloc.num_blocks) if held else np.zeros(alloc.num_blocks, int)
    assert [alloc.refcount(b) for b in range(alloc.num_blocks)] == counts.tolist()
    assert alloc.num_free_blocks == int(np.sum(counts == 0))
    for seq, tokens in contents.items():
        table = alloc.table(seq)
        assert table.num_tokens == len(tokens)
        assert 0 <= len(table.blocks) * alloc.block_size - len(tokens) <= alloc.block_size - 1
    frag = fragmentation(alloc)
    assert frag.used == len({int(s) for seq, t in contents.items() for s in alloc.table(seq).slots(range(len(t)))})
    assert frag.internal <= (alloc.block_size - 1) * len(contents) and frag.external == 0


@pytest.mark.parametrize("seed", range(6))
def test_random_allocate_append_fork_free_against_copied_sequences(seed):
    """Every sequence reads back exactly its own tokens through its table after any mix of operations
    (so copy-on-write never changes a sharer's data), and every block is free again at the end."""
    rng = np.random.default_rng(seed)
    block_size = int(rng.integers(1, 5))
    alloc = BlockAllocator(num_blocks=40, block_size=block_size)
    cache = PagedKVCache(40, block_size, n_kv_heads=1, head_dim=1)
    contents, next_id, copies = {}, 0, 0

    def store(seq, start, values):
        cache.write(alloc.table(seq), start, np.array(values, float).reshape(-1, 1, 1),
                    -np.array(values, float).reshape(-1, 1, 1))

    for _ in range(300):
        op = rng.choice(["allocate", "append", "append", "fork", "free"])
        live = sorted(contents)
        if op == "allocate" or not live:
            n = int(rng.integers(0, 9))
            if not alloc.can_allocate(n):
                continue
            alloc.allocate(next_id, n)
            contents[next_id] = [float(rng.integers(1000)) for _ in range(n)]
            store(next_id, 0, contents[next_id])
            next_id += 1
        elif op == "append":
            seq = live[rng.integers(len(live))]
            if not alloc.can_append(seq):
                with pytest.raises(OutOfBlocks):
                    alloc.append_token(seq)
                continue
            copy = alloc.append_token(seq)
            if copy is not None:
                copies += 1
                assert alloc.refcount(copy[0]) >= 1 and alloc.refcount(copy[1]) == 1
                cache.copy_block(*copy)
            contents[seq].append(float(rng.integers(1000)))
            store(seq, len(contents[seq]) - 1, contents[seq][-1:])
        elif op == "fork":
            parent = live[rng.integers(len(live))]
            alloc.fork(parent, next_id)
            contents[next_id] = list(contents[parent])
            next_id += 1
        else:
            seq = live[rng.integers(len(live))]
            alloc.free(seq)
            del contents[seq]
        _check_invariants(alloc, contents)
        for seq, tokens in contents.items():
            if tokens:
                k, v = cache.gather(alloc.table(seq), len(tokens))
                assert k.ravel().tolist() == tokens and v.ravel().tolist() == [-t for t in tokens]
    assert copies > 0, "the operations must have exercised copy-on-write"
    for seq in list(contents):
        alloc.free(seq)
    assert alloc.num_free_blocks == alloc.num_blocks and alloc.sequences == []
    assert all(alloc.refcount(b) == 0 for b in range(alloc.num_blocks))


def test_fork_shares_blocks_and_copy_on_write_returns_the_copy():
    alloc = BlockAllocator(num_blocks=6, block_size=4)
    alloc.allocate("p", 6)  # blocks 0 (full) and 1 (2 of 4)
    child = alloc.fork("p", "c")
    assert child.blocks == (0, 1) and alloc.refcount(0) == alloc.refcount(1) == 2 and alloc.num_free_blocks == 4
    assert alloc.append_token("c") == (1, 2), "the child's last block is shared and not full: copy it"
    assert alloc.table("c").blocks == (0, 2) and alloc.table("p").blocks == (0, 1)
    assert alloc.refcount(1) == 1 and alloc.append_token("p") is None, "the parent's block is its own again"
    alloc.free("p")
    assert alloc.refcount(0) == 1 and alloc.num_free_blocks == 4
    alloc.free("c")
    assert alloc.num_free_blocks == 6
    alloc.allocate("q", 8)
    alloc.fork("q", "r")
    assert alloc.append_token("r") is None and alloc.table("r").blocks[:2] == alloc.table("q").blocks, \
        "a full shared last block needs no copy"


@pytest.mark.parametrize("n_heads, n_kv_heads", [(4, 4), (4, 2), (4, 1)])
@pytest.mark.parametrize("block_size", [1, 4, 16])
def test_paged_attention_equals_contiguous_attention(n_heads, n_kv_heads, block_size):
    rng = np.random.default_rng(n_heads * 10 + n_kv_heads + block_size)
    head_dim, lengths = 8, [1, 5, block_size, block_size + 1, 3 * block_size - 1, 37]
    alloc = BlockAllocator(num_blocks=200, block_size=block_size)
    cache = PagedKVCache(200, block_size, n_kv_heads, head_dim)
    for i in range(6):  # scatter the free list so tables point to blocks out of order
        alloc.allocate(f"pad{i}", int(rng.integers(1, 3 * block_size)))
    for i in (4, 1, 5):
        alloc.free(f"pad{i}")
    data = {}
    for seq, n in enumerate(lengths):
        alloc.allocate(seq, n)
        keys, values = rng.standard_normal((2, n, n_kv_heads, head_dim))
        cache.write(alloc.table(seq), 0, keys, values)
        data[seq] = keys, values
    for seq, n in enumerate(lengths):
        q = rng.standard_normal((n_heads, head_dim))
        for context in {1, n}:
            got = paged_attention(q, cache, alloc.table(seq), context)
            keys, values = data[seq]
            np.testing.assert_allclose(got, attention_by_hand(q, keys[:context], values[:context]), rtol=1e-12)


def test_paged_attention_checks_its_inputs():
    alloc = BlockAllocator(4, 4)
    cache = PagedKVCache(4, 4, n_kv_heads=2, head_dim=3)
    table = alloc.allocate(0, 5)
    with pytest.raises(ValueError, match="multiple of n_kv_heads"):
        paged_attention(np.zeros((3, 3)), cache, table, 5)
    with pytest.raises(ValueError, match="exceeds the sequence's 5 tokens"):
        paged_attention(np.zeros((2, 3)), cache, table, 6)
    with pytest.raises(ValueError, match="shape"):
        cache.write(table, 0, np.zeros((2, 2, 2)), np.zeros((2, 2, 2)))


def test_contiguous_allocator_first_fit_and_fragmentation_by_hand():
    arena = ContiguousAllocator(capacity_tokens=12, max_seq_len=6, reserve="max_tokens")
    assert arena.allocate("a", 2, max_tokens=3) == range(0, 3)
    assert arena.allocate("b", 1, max_tokens=4) == range(3, 7)
    assert arena.allocate("c", 3, max_tokens=3) == range(7, 10)
    arena.free("b")
    assert arena.allocate("d", 1, max_tokens=2) == range(3, 5), "first fit: the lowest run that holds it"
    assert arena.holes() == [(5, 2), (10, 2)]
    assert not arena.can_allocate(1, max_tokens=3), "4 slots are free, but in runs of 2"
    with pytest.raises(OutOfBlocks, match="need 3 contiguous slots, 4 free, the longest free run is 2"):
        arena.allocate("e", 1, max_tokens=3)
    arena.append_token("a")
    assert fragmentation(arena, request_tokens=3) == Fragmentation(capacity=12, used=3 + 1 + 3, internal=0 + 1 + 0,
                                                                   external=4)
    assert fragmentation(arena, request_tokens=2).external == 0
    with pytest.raises(OutOfBlocks, match="3-slot reservation"):
        arena.append_token("a")
    with pytest.raises(ValueError, match="max_tokens <= max_seq_len"):
        arena.allocate("f", 1, max_tokens=7)


def test_contiguous_allocator_reserves_max_seq_len_by_default():
    arena = ContiguousAllocator(capacity_tokens=10, max_seq_len=4)
    assert arena.allocate("a", 1, max_tokens=2) == range(0, 4)
    arena.allocate("b", 1)
    assert not arena.can_allocate(1) and arena.sequences == ["a", "b"]
    assert fragmentation(arena, request_tokens=4) == Fragmentation(10, 2, 6, 2)


def test_paged_fragmentation_counts_a_shared_block_once():
    alloc = BlockAllocator(num_blocks=5, block_size=4)
    alloc.allocate("a", 5)
    alloc.fork("a", "b")
    assert fragmentation(alloc, request_tokens=100) == Fragmentation(capacity=20, used=5, internal=3, external=0)
    alloc.append_token("b")  # b copies the shared last block
    assert fragmentation(alloc) == Fragmentation(20, used=4 + 1 + 2, internal=3 + 2, external=0)
    assert fragmentation(alloc).usable == 8 and fragmentation(alloc).waste_fraction == 5 / 20

"""The model cache that counts memory traffic: LRU replacement, lines, per-array misses."""

import pytest

from mlsys_lib.tensor.cache import LineCache


def test_lines_hit_until_evicted_least_recently_used_first():
    cache = LineCache(cache_bytes=128, line_bytes=64)  # two lines
    assert [cache.touch("x", address) for address in (0, 63, 64, 8)] == [True, False, True, False]
    assert cache.touch("y", 0) is True  # a line of another array evicts x's line 1, used longest ago
    assert cache.touch("x", 0) is False and cache.touch("x", 64) is True
    assert cache.accesses == 7 and cache.misses == {"x": 3, "y": 1} and cache.total_misses == 4


def test_a_sweep_larger_than_the_cache_misses_every_time():
    cache = LineCache(cache_bytes=4 * 64, line_bytes=64)
    for _ in range(3):
        for line in range(5):  # five lines through four: LRU keeps none of them for the next sweep
            cache.touch("a", line * 64)
    assert cache.total_misses == 15


@pytest.mark.parametrize("cache_bytes, line_bytes, message", [
    (0, 64, "cache_bytes must be a positive int"), (1024, 0, "line_bytes must be a positive int"),
    (1024.0, 64, "cache_bytes must be a positive int"), (True, 64, "cache_bytes"),
    (32, 64, "cannot hold one 64-byte line")])
def test_bad_sizes_are_refused(cache_bytes, line_bytes, message):
    with pytest.raises(ValueError, match=message):
        LineCache(cache_bytes, line_bytes)

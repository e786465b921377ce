"""``BoundedCache``: bounded, least recently used first out, reads count as use."""

from __future__ import annotations

import pytest

from shipagent._cache import BoundedCache


def test_a_write_beyond_the_bound_drops_the_least_recent() -> None:
    cache: BoundedCache[str, int] = BoundedCache(2)
    cache["a"], cache["b"] = 1, 2
    assert cache.get("a") == 1  # "a" is now the most recent
    cache["c"] = 3
    assert list(cache) == ["a", "c"] and "b" not in cache and len(cache) == 2


def test_rewriting_an_entry_makes_it_recent_without_growing() -> None:
    cache: BoundedCache[str, int] = BoundedCache(2)
    cache["a"], cache["b"], cache["a"] = 1, 2, 10
    cache["c"] = 3
    assert list(cache) == ["a", "c"] and cache.get("a") == 10


def test_missing_keys_give_the_default_and_pop_removes() -> None:
    cache: BoundedCache[str, int] = BoundedCache(3)
    assert cache.get("x") is None and cache.get("x", 7) == 7 and cache.pop("x", 0) == 0
    cache["x"] = 1
    assert cache.pop("x") == 1 and "x" not in cache
    cache["y"] = 2
    cache.clear()
    assert len(cache) == 0


def test_a_cache_of_no_entries_is_refused_with_the_size() -> None:
    with pytest.raises(ValueError, match="max_size=0"):
        BoundedCache(0)


def test_peek_reads_without_making_the_entry_recent() -> None:
    cache: BoundedCache[str, int] = BoundedCache(2)
    cache["a"], cache["b"] = 1, 2
    assert cache.peek("a") == 1 and cache.peek("x") is None and cache.peek("x", 5) == 5
    cache["c"] = 3  # "a" was only peeked at: still the least recently written, so it goes
    assert list(cache) == ["b", "c"] and "a" not in cache

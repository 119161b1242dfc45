"""The project's one LRU map."""

from __future__ import annotations

import pytest

from kernel_server.core.cache import LRU

pytestmark = pytest.mark.unit


def test_least_recently_used_goes_first_and_hits_are_counted() -> None:
    cache: LRU[int] = LRU(2)
    made: list[str] = []

    def make(key: str) -> int:
        made.append(key)
        return len(made)

    assert cache.get_or_make("a", lambda: make("a")) == 1
    assert cache.get_or_make("b", lambda: make("b")) == 2
    assert cache.get_or_make("a", lambda: make("a")) == 1  # a hit: "b" is now the oldest
    cache.put("c", 3)
    assert cache.get("b") is None and cache.get("a") == 1 and made == ["a", "b"]
    assert cache.info() == (2, 3, 2, 2)  # hits a, a; misses a, b, b
    cache.clear()
    assert len(cache) == 0 and cache.info().hits == 0

"""The one least-recently-used map of the project: estimates and plans on the orchestrator,
compact noise models, PEC representations. Thread-safe (the QPU workers' threads share the
noise cache), with hit and miss counts as ``functools.lru_cache`` keeps them.

Not ``functools.lru_cache`` itself: its keys are the call's arguments, and these caches are keyed
on what identifies the value (a backend's name and calibration id, a circuit fingerprint) while
the call takes the backend object or the circuits.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, NamedTuple, TypeVar

V = TypeVar("V")


class CacheInfo(NamedTuple):
    hits: int
    misses: int
    size: int
    max_size: int


class LRU(Generic[V]):
    def __init__(self, size: int) -> None:
        self.size = size
        self._items: OrderedDict[Hashable, V] = OrderedDict()
        self._lock = threading.Lock()
        self._hits = self._misses = 0

    def get(self, key: Hashable) -> V | None:
        with self._lock:
            value = self._items.get(key)
            if value is None:
                self._misses += 1
            else:
                self._hits += 1
                self._items.move_to_end(key)
            return value

    def put(self, key: Hashable, value: V) -> V:
        with self._lock:
            self._items[key] = value
            self._items.move_to_end(key)
            while len(self._items) > self.size:
                self._items.popitem(last=False)
        return value

    def get_or_make(self, key: Hashable, make: Callable[[], V]) -> V:
        """The cached value, or ``make()``'s, remembered. ``make`` runs outside the lock: two
        threads missing the same key at once both build it (it is the same value)."""
        cached = self.get(key)
        return cached if cached is not None else self.put(key, make())

    def info(self) -> CacheInfo:
        with self._lock:
            return CacheInfo(self._hits, self._misses, len(self._items), self.size)

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
            self._hits = self._misses = 0

    def __len__(self) -> int:
        return len(self._items)

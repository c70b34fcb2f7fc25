"""Bounded memos: an LRU of snapshots shared by every table that uses it, and a small LRU by key."""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Generic, TypeVar

from deltaport.delta.snapshot import Snapshot

K = TypeVar("K")
V = TypeVar("V")


class SnapshotCache:
    """LRU keyed by (table URI, version), bounded by entry count and by Arrow bytes held.

    A snapshot's bytes include what was derived from it after it was cached (parsed stats,
    prepared file ids), so they are counted afresh at each ``put``: nothing else holds a
    snapshot, and an evicted one is freed with everything derived from it.

    ``hits`` and ``misses`` count the lookups by ``get`` since the cache was made (for the
    server's metrics); they only grow.
    """

    def __init__(self, max_entries: int = 64, max_bytes: int = 2 << 30) -> None:
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self._items: OrderedDict[tuple[str, int], Snapshot] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def get(self, table_uri: str, version: int) -> Snapshot | None:
        with self._lock:
            snap = self._items.get((table_uri, version))
            if snap is None:
                self.misses += 1
            else:
                self.hits += 1
                self._items.move_to_end((table_uri, version))
            return snap

    def best_base(self, table_uri: str, version: int) -> Snapshot | None:
        """The cached snapshot of this table with the greatest version not above ``version``."""
        with self._lock:
            best = None
            for (uri, v), snap in self._items.items():
                if uri == table_uri and v <= version and (best is None or v > best.version):
                    best = snap
            return best

    def put(self, snap: Snapshot) -> None:
        key = (snap.table_uri, snap.version)
        with self._lock:
            self._items.pop(key, None)
            self._items[key] = snap
            sizes = {k: s.nbytes for k, s in self._items.items()}
            total = sum(sizes.values())
            while len(self._items) > 1 and (len(self._items) > self.max_entries or total > self.max_bytes):
                # always keep the newest, even when it alone is over budget
                evicted, _ = self._items.popitem(last=False)
                total -= sizes[evicted]

    def invalidate(self, table_uri: str) -> None:
        with self._lock:
            for key in [k for k in self._items if k[0] == table_uri]:
                del self._items[key]

    def __len__(self) -> int:
        return len(self._items)

    @property
    def bytes_held(self) -> int:
        with self._lock:
            return sum(s.nbytes for s in self._items.values())


class LruMemo(Generic[K, V]):
    """At most ``max_entries`` values by key, the least recently used dropped first; thread-safe."""

    def __init__(self, max_entries: int) -> None:
        self.max_entries = max_entries
        self._items: OrderedDict[K, V] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: K) -> V | None:
        with self._lock:
            value = self._items.get(key)
            if value is not None:
                self._items.move_to_end(key)
            return value

    def put(self, key: K, value: V, *, replace: bool = True) -> None:
        """Remember ``value`` for ``key``; with ``replace=False`` a value already there is kept."""
        with self._lock:
            if key in self._items and not replace:
                self._items.move_to_end(key)
                return
            self._items[key] = value
            self._items.move_to_end(key)
            while len(self._items) > self.max_entries:
                self._items.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._items.clear()

    def __len__(self) -> int:
        return len(self._items)

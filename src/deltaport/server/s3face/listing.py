"""ListObjectsV2 over a table's local directory: keys in UTF-8 byte order, pages found by bisection.

A directory's sorted listing (its files' keys; with delimiter ``/`` one level, subdirectories as
``name/``) is kept for a few seconds while the directory's mtime is
unchanged, so paging through a 100k-file ``_delta_log`` lists the directory once, not once per
page. Python's ``str`` order is code-point order, which is UTF-8 byte order. Symlinked
directories are not followed; symlinked files are checked by the caller (the one "inside" rule).
"""

from __future__ import annotations

import bisect
import os
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass

__all__ = ["Listing", "ListingCache", "Page", "page_of"]

#: How long a listing is reused while its directory's mtime is unchanged.
TTL_SECONDS = 2.0
_END = "\U0010ffff"


@dataclass(frozen=True)
class Listing:
    """Keys under one directory, sorted; ``links``: those that are symlinks."""

    paths: list[str]
    links: frozenset[str]


@dataclass(frozen=True)
class Page:
    keys: list[str]  # relative paths of files
    prefixes: list[str]  # relative common prefixes (ending with the delimiter)
    next_after: str | None  # None: not truncated; else the last key or prefix returned
    next_is_prefix: bool


class ListingCache:
    def __init__(self, size: int = 64, ttl: float = TTL_SECONDS) -> None:
        self._entries: OrderedDict[tuple[str, str, bool], tuple[int, float, Listing]] = OrderedDict()
        self._lock = threading.Lock()
        self.size, self.ttl = size, ttl

    def listing(self, folder: str, key_prefix: str, recursive: bool) -> Listing:
        """The keys in ``folder`` (a directory's real path), each ``key_prefix/<path in it>``."""
        try:
            mtime = os.stat(folder).st_mtime_ns
        except OSError:
            return Listing([], frozenset())
        key = (folder, key_prefix, recursive)
        now = time.monotonic()
        with self._lock:
            found = self._entries.get(key)
            if found is not None and found[0] == mtime and now - found[1] < self.ttl:
                self._entries.move_to_end(key)
                return found[2]
        listing = _scan(folder, key_prefix, recursive)
        with self._lock:
            self._entries[key] = (mtime, now, listing)
            self._entries.move_to_end(key)
            while len(self._entries) > self.size:
                self._entries.popitem(last=False)
        return listing


def _scan(folder: str, key_prefix: str, recursive: bool) -> Listing:
    paths: list[str] = []
    links: set[str] = set()
    stack = [(folder, key_prefix + "/")]
    while stack:
        folder, rel = stack.pop()
        try:
            entries = list(os.scandir(folder))
        except OSError:
            continue
        for entry in entries:
            name = rel + entry.name
            if entry.is_dir(follow_symlinks=False):
                if recursive:
                    stack.append((entry.path, name + "/"))
                else:
                    paths.append(name + "/")
            elif entry.is_symlink():
                paths.append(name)
                links.add(name)
            elif entry.is_file(follow_symlinks=False):
                paths.append(name)
    paths.sort()
    return Listing(paths, frozenset(links))


def page_of(
    paths: list[str], prefix: str, delimiter: str, after: str, after_is_prefix: bool, max_keys: int, *, scope: str
) -> Page:
    """Up to ``max_keys`` keys and common prefixes of sorted ``paths`` that start with ``prefix``
    (and with ``scope``: nothing else is shown), after ``after`` (past everything under it when it
    was a common prefix)."""
    if max_keys == 0:
        return Page([], [], None, False)
    start = bisect.bisect_left(paths, prefix)
    if after:
        skip = bisect.bisect_left(paths, after + _END) if after_is_prefix else bisect.bisect_right(paths, after)
        start = max(start, skip)
    keys: list[str] = []
    prefixes: list[str] = []
    last, last_is_prefix = "", False
    i, n = start, len(paths)
    while i < n:
        path = paths[i]
        if not path.startswith(prefix):
            break
        if not path.startswith(scope):
            i += 1
            continue
        if len(keys) + len(prefixes) >= max_keys:
            return Page(keys, prefixes, last, last_is_prefix)
        cut = path.find(delimiter, len(prefix)) if delimiter else -1
        if cut >= 0:
            common = path[: cut + len(delimiter)]
            prefixes.append(common)
            last, last_is_prefix = common, True
            i = bisect.bisect_left(paths, common + _END, i)
        else:
            keys.append(path)
            last, last_is_prefix = path, False
            i += 1
    return Page(keys, prefixes, None, False)

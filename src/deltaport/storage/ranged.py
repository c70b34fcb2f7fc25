"""An object read by ranges, for parquet readers: only the parts of a file that are read are fetched."""

from __future__ import annotations

import io
from typing import Any

import pyarrow as pa

from deltaport.storage.base import ObjectStore


def open_parquet(store: ObjectStore, path: str) -> Any:
    """A parquet file for pyarrow to read: only the footer and the column chunks read are read,
    never the whole file at once. On local disk an ordinary file, not a memory map: a map's pages
    would count in the process's resident memory until unmapped, the whole file's by the end of a
    streamed read."""
    local = getattr(store, "local_path", None)
    if local is not None:
        return pa.OSFile(str(local(path)))
    size = store.head(path).size
    return _RangedFile(store, path, size)  # unbuffered: each read pyarrow makes is one ranged read


class _RangedFile(io.RawIOBase):
    """A read-only file over an object, read by ranges."""

    def __init__(self, store: ObjectStore, path: str, size: int) -> None:
        self._store, self._path, self._size, self._at = store, path, size, 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._at

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._at, io.SEEK_END: self._size}[whence]
        self._at = max(base + offset, 0)
        return self._at

    def readinto(self, buffer: Any) -> int:
        want = min(len(buffer), self._size - self._at)
        if want <= 0:
            return 0
        data = self._store.read_range(self._path, self._at, want)
        buffer[: len(data)] = data
        self._at += len(data)
        return len(data)

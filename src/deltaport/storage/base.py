"""The ObjectStore seam: what the Delta engine and the server need from any storage.

A store is rooted at one location (a table root). Paths given to it are relative to that root,
``/``-separated and *not* percent-encoded (the Delta log's encoded paths are decoded by the caller).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable


@dataclass(frozen=True, slots=True)
class FileInfo:
    """One object: its path relative to the store root, size in bytes, modification time in ms."""

    path: str
    size: int
    mtime_ms: int

    @property
    def name(self) -> str:
        return self.path.rsplit("/", 1)[-1]


@runtime_checkable
class ObjectStore(Protocol):
    """Minimal object-store interface (local files, S3, Azure, GCS)."""

    #: URI of the store root, without a trailing slash (``file:///data/t``, ``s3://b/t``).
    root_uri: str

    def list_dir(self, directory: str, start_after: str | None = None) -> list[FileInfo]:
        """Files directly inside ``directory`` (not recursive), sorted by name.

        With ``start_after``, only names that sort after it (lexicographic, as object stores list).
        A missing directory lists as empty.
        """
        ...

    def read(self, path: str) -> bytes:
        """Whole object. Raises ObjectNotFound if it does not exist."""
        ...

    def read_range(self, path: str, start: int, length: int) -> bytes:
        """``length`` bytes from ``start`` (fewer at the end of the object)."""
        ...

    def head(self, path: str) -> FileInfo:
        """Size and modification time. Raises ObjectNotFound if it does not exist."""
        ...

    def child(self, subpath: str) -> ObjectStore:
        """A store rooted at ``subpath`` below this one."""
        ...

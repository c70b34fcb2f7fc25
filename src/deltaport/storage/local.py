"""Local file system store (plain paths and ``file://`` URIs)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

from deltaport.errors import ObjectNotFound, StorageError, StorageUnavailable
from deltaport.storage.base import FileInfo


def _safe_join(root: Path, rel: str) -> Path:
    """Join a relative path under root, refusing anything that escapes it."""
    if rel.startswith("/") or "\x00" in rel:
        raise StorageError(f"path {rel!r} must be relative to the table root")
    parts = [p for p in rel.split("/") if p not in ("", ".")]
    if any(p == ".." for p in parts):
        raise StorageError(f"path {rel!r} must not leave the table root")
    return root.joinpath(*parts)


@contextlib.contextmanager
def _io(what: str, root: Path) -> Iterator[None]:
    """Any other OS error (EIO, a stale or timed-out network mount) may pass: a 503, not a 4xx."""
    try:
        yield
    except (FileNotFoundError, NotADirectoryError, IsADirectoryError, PermissionError):
        raise
    except OSError as exc:
        raise StorageUnavailable(
            f"the table's storage failed on {what}; retry later", detail=str(exc), location=str(root)
        ) from exc


class LocalStore:
    """An ObjectStore over a local directory."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(os.path.abspath(os.fspath(root)))
        self.root_uri = self.root.as_uri()

    def __repr__(self) -> str:
        return f"LocalStore({str(self.root)!r})"

    def list_dir(self, directory: str, start_after: str | None = None) -> list[FileInfo]:
        base = _safe_join(self.root, directory) if directory else self.root
        prefix = f"{directory.rstrip('/')}/" if directory else ""
        out: list[FileInfo] = []
        with _io(f"the listing of {directory or 'the table root'}", self.root):
            try:
                with os.scandir(base) as it:
                    for entry in it:
                        name = entry.name
                        if start_after is not None and name <= start_after:
                            continue
                        try:
                            if not entry.is_file():
                                continue
                            st = entry.stat()
                        except FileNotFoundError:  # removed while listing
                            continue
                        out.append(FileInfo(prefix + name, st.st_size, st.st_mtime_ns // 1_000_000))
            except (FileNotFoundError, NotADirectoryError):
                return []
            except PermissionError as exc:
                raise StorageError(
                    f"permission denied listing {directory or 'the table root'}", location=str(self.root)
                ) from exc
        out.sort(key=lambda f: f.path)
        return out

    def _open(self, path: str):
        full = _safe_join(self.root, path)
        try:
            return open(full, "rb")
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError) as exc:
            raise ObjectNotFound(f"file not found: {path}") from exc
        except PermissionError as exc:
            raise StorageError(f"permission denied reading {path}", location=str(self.root)) from exc

    def read(self, path: str) -> bytes:
        with _io(path, self.root), self._open(path) as fh:
            return fh.read()

    def read_range(self, path: str, start: int, length: int) -> bytes:
        with _io(path, self.root), self._open(path) as fh:
            fh.seek(start)
            return fh.read(length)

    def head(self, path: str) -> FileInfo:
        full = _safe_join(self.root, path)
        with _io(path, self.root):
            try:
                st = full.stat()
            except (FileNotFoundError, NotADirectoryError) as exc:
                raise ObjectNotFound(f"file not found: {path}") from exc
        if not full.is_file():
            raise ObjectNotFound(f"not a file: {path}")
        return FileInfo(path, st.st_size, st.st_mtime_ns // 1_000_000)

    def local_path(self, path: str) -> Path:
        """The file-system path of an object (for zero-copy readers such as pyarrow)."""
        return _safe_join(self.root, path)

    def child(self, subpath: str) -> LocalStore:
        return LocalStore(_safe_join(self.root, subpath))

"""S3, Azure and GCS (and anything else obstore speaks) behind the ObjectStore seam."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import Any

from deltaport.errors import ObjectNotFound, StorageError, StorageUnavailable
from deltaport.storage.base import FileInfo

_CLIENT_KEYS = ("allow_http", "allow_invalid_certificates", "timeout", "connect_timeout", "proxy_url")

#: Retries of a failed storage request unless the config sets ``retry_config``. The library's own
#: default (10 retries for up to 3 minutes) held a request, and its server thread, for 3 minutes
#: against a store that stopped answering; with this, a request gets its 503 (and the client its
#: Retry-After) once one request ``timeout`` (30 s by default) or 10 s of retries have passed.
DEFAULT_RETRY = {"max_retries": 2, "retry_timeout": dt.timedelta(seconds=10)}


def _ms(meta: Mapping[str, Any]) -> int:
    return int(meta["last_modified"].timestamp() * 1000)


def _unavailable(what: str, exc: BaseException, root_uri: str) -> StorageUnavailable:
    return StorageUnavailable(
        f"the table's storage did not answer {what}; retry later", detail=str(exc), location=root_uri
    )


class ObstoreStore:
    """An ObjectStore over an obstore store rooted at ``root_uri``.

    ``options`` are obstore's configuration keys (``endpoint``, ``region``,
    ``virtual_hosted_style_request``, ``allow_http``, ``account_name``, ...).
    """

    def __init__(self, root_uri: str, options: Mapping[str, Any] | None = None, *, _store: Any = None) -> None:
        import obstore.store

        self.root_uri = root_uri.rstrip("/")
        self.given_options = dict(options or {})
        self.options = dict(self.given_options)
        client_options: Any = dict(self.options.pop("client_options", None) or {})
        for key in _CLIENT_KEYS:  # accepted beside the store keys for convenience
            if key in self.options:
                client_options[key] = self.options.pop(key)
        self.options.setdefault("retry_config", DEFAULT_RETRY)
        try:
            self._store = _store or obstore.store.from_url(
                self.root_uri, client_options=client_options or None, **self.options
            )
        except Exception as exc:  # obstore raises config errors of several kinds
            raise StorageError(
                "the table's object store cannot be opened: check its storage options in the server config",
                detail=str(exc),
                location=self.root_uri,
            ) from exc

    def __repr__(self) -> str:
        return f"ObstoreStore({self.root_uri!r})"

    @property
    def raw(self) -> Any:
        """The underlying obstore store (for signing URLs)."""
        return self._store

    def _call(self, what: str, fn, *args, **kwargs):
        import obstore.exceptions as oe

        try:
            return fn(*args, **kwargs)
        except FileNotFoundError as exc:
            raise ObjectNotFound(f"file not found: {what}", location=self.root_uri) from exc
        except oe.NotFoundError as exc:
            raise ObjectNotFound(f"file not found: {what}", location=self.root_uri) from exc
        except (oe.PermissionDeniedError, oe.UnauthenticatedError) as exc:
            raise StorageError(f"permission denied: {what}", detail=str(exc), location=self.root_uri) from exc
        except (oe.InvalidPathError, oe.NotSupportedError, oe.UnknownConfigurationKeyError) as exc:
            raise StorageError(
                f"the object store refused the request for {what}", detail=str(exc), location=self.root_uri
            ) from exc
        except oe.BaseError as exc:  # timeouts, 5xx, throttling, connections: they may pass
            raise _unavailable(what, exc, self.root_uri) from exc

    def list_dir(self, directory: str, start_after: str | None = None) -> list[FileInfo]:
        import obstore

        prefix = directory.rstrip("/") + "/" if directory else ""
        offset = prefix + start_after if start_after is not None else None
        out: list[FileInfo] = []
        stream = self._call(directory, obstore.list, self._store, prefix or None, offset=offset, chunk_size=1000)
        try:
            for chunk in stream:
                for meta in chunk:
                    path = meta["path"]
                    if "/" in path[len(prefix) :]:
                        continue  # deeper than one level (e.g. _delta_log/_sidecars/)
                    out.append(FileInfo(path, int(meta["size"]), _ms(meta)))
        except Exception as exc:  # the listing broke off midway
            raise _unavailable(f"the listing of {directory or 'the table root'}", exc, self.root_uri) from exc
        out.sort(key=lambda f: f.path)
        return out

    def read(self, path: str) -> bytes:
        import obstore

        result = self._call(path, obstore.get, self._store, path)
        return bytes(self._call(path, result.bytes))

    def read_range(self, path: str, start: int, length: int) -> bytes:
        import obstore

        if length <= 0:
            return b""
        size = self.head(path).size
        end = min(start + length, size)
        if start >= end:
            return b""
        return bytes(self._call(path, obstore.get_range, self._store, path, start=start, end=end))

    def head(self, path: str) -> FileInfo:
        import obstore

        meta = self._call(path, obstore.head, self._store, path)
        return FileInfo(path, int(meta["size"]), _ms(meta))

    def child(self, subpath: str) -> ObstoreStore:
        return ObstoreStore(f"{self.root_uri}/{subpath.strip('/')}", self.given_options)

"""Keeps what the server serves in step with its source: the catalog database, or a config file.

A daemon thread polls the source's revision every ``poll_seconds`` (the catalog's: one indexed
row; a config file's: a digest of its bytes) and, when it moved, loads what the source serves and
hands it to ``apply``: a change made through another replica, or an edit of the config file, is
served within about one poll. ``wake`` polls at once (SIGHUP). ``reload_now`` loads at once, for
this server's own admin writes (a revoked token is refused by the very next request). Loads are
single-flight: calls that arrive while one runs share the next one.

When the source cannot be read or loaded (the database went away, an edit broke the file), the
last catalog loaded keeps serving; the failure is logged once for each broken revision, and the
recovery once.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, Generic, Protocol, TypeVar

from deltaport.delta import DeltaTable, SnapshotCache
from deltaport.delta.schema import Schema
from deltaport.errors import DeltaportError, InvalidParameter, StorageUnavailable
from deltaport.server.sharing.registry import StoreOpener

log = logging.getLogger("deltaport.server")


class _Loaded(Protocol):
    @property
    def revision(self) -> Any: ...


L = TypeVar("L", bound=_Loaded)
L_co = TypeVar("L_co", bound=_Loaded, covariant=True)


class FeedSource(Protocol[L_co]):
    """What a feed serves from: the catalog database (:class:`deltaport.catalog.store.CatalogDB`)
    or a config file (config_file.py)."""

    def revision(self) -> Any: ...

    def served(self) -> L_co: ...


class CatalogFeed(Generic[L]):
    def __init__(
        self, source: FeedSource[L], apply: Callable[[L], None], *, poll_seconds: float = 1.0, what: str = ""
    ) -> None:
        self._source = source
        self._apply = apply
        self._poll_seconds = poll_seconds
        self._what = what or "catalog database"
        self._lock = threading.Lock()
        self._loaded: Any = None
        self._last_start = -1  # time.monotonic_ns() when the newest load began reading
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._failing: tuple[Any, ...] | None = None  # (revision,) that failed; (None,) when unreadable

    def start_polling(self) -> None:
        self._thread = threading.Thread(target=self._poll, name="deltaport-catalog-feed", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def wake(self) -> None:
        """Poll now rather than at the next interval (safe from a signal handler)."""
        self._wake.set()

    def reload_now(self) -> None:
        """Serves the source as it is now (after this server's own write). A load that began
        reading after this call was made holds everything committed before it, so a caller that
        waited for the lock behind such a load returns without loading again."""
        asked = time.monotonic_ns()
        with self._lock:
            if self._last_start > asked:
                return
            self._last_start = time.monotonic_ns()
            served = self._source.served()
            self._apply(served)
            self._loaded = served.revision

    def _poll(self) -> None:
        while True:
            self._wake.wait(self._poll_seconds)
            self._wake.clear()
            if self._stop.is_set():
                return
            self.check()

    def check(self) -> None:
        """Load the source if its revision moved; on failure keep serving what was loaded last."""
        revision = None
        try:
            revision = self._source.revision()
            if revision != self._loaded:
                self.reload_now()
        except Exception as exc:  # a bug must not end the feed either: logged, the last catalog kept
            if self._failing != (revision,):
                reason = exc.operator_message if isinstance(exc, DeltaportError) else repr(exc)  # operator's log
                log.error("%s could not be loaded, serving the catalog last loaded: %s", self._what, reason)
            self._failing = (revision,)
            return
        if self._failing is not None:
            log.warning("%s loaded again: serving its current catalog", self._what)
            self._failing = None


def describe_delta_table(
    location: str, storage_options: Mapping[str, Any], cache: SnapshotCache, open_store: StoreOpener
) -> tuple[Schema, list[str]]:
    """The schema and partition columns of the Delta table at ``location``, or a 400 saying why
    it cannot be read (a 503 when its storage may come back)."""
    try:
        table = DeltaTable(location, store=open_store(location, storage_options), cache=cache)
        config = table.config_at(table.latest_version())  # not its files: a table may have millions
        return config.schema, list(config.partition_columns)
    except StorageUnavailable:
        raise
    except DeltaportError as exc:
        raise InvalidParameter(
            f"'{location}' is not a readable Delta table ({exc.message}): give the folder that holds _delta_log"
        ) from None

"""Keeps what the server serves in step with the catalog database.

A daemon thread polls the catalog's revision (one indexed row) every ``poll_seconds`` and, when
it moved, loads the served catalog and hands it to ``apply``: a change made through another replica
is served here within about one poll. ``reload_now`` does the same at once, for this server's own
admin writes (a revoked token is refused by the very next request). Loads are single-flight: calls
that arrive while one runs share the next one.

When the database goes away, the last catalog loaded keeps serving; the outage and the recovery
are logged once each.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from deltaport.catalog.store import CatalogDB, ServedCatalog
from deltaport.delta import DeltaTable, SnapshotCache
from deltaport.delta.schema import Schema
from deltaport.errors import DeltaportError, InvalidParameter, StorageUnavailable, public_message
from deltaport.server.registry import StoreOpener

log = logging.getLogger("deltaport.server")


class CatalogFeed:
    def __init__(self, db: CatalogDB, apply: Callable[[ServedCatalog], None], *, poll_seconds: float = 1.0) -> None:
        self._db = db
        self._apply = apply
        self._poll_seconds = poll_seconds
        self._lock = threading.Lock()
        self._loaded = -1
        self._last_start = -1  # time.monotonic_ns() when the newest load began reading
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._failing = False

    def start_polling(self) -> None:
        self._thread = threading.Thread(target=self._poll, name="deltaport-catalog-feed", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def reload_now(self) -> None:
        """Serves the catalog as the database holds it now (after this server's own write). A load
        that began reading after this call was made holds everything committed before it, so a
        caller that waited for the lock behind such a load returns without loading again."""
        asked = time.monotonic_ns()
        with self._lock:
            if self._last_start > asked:
                return
            self._last_start = time.monotonic_ns()
            served = self._db.served()
            self._apply(served)
            self._loaded = served.revision

    def _poll(self) -> None:
        while not self._stop.wait(self._poll_seconds):
            try:
                if self._db.revision() != self._loaded:
                    self.reload_now()
            except DeltaportError as exc:
                if not self._failing:
                    log.warning("catalog database unavailable, serving the catalog last loaded: %s", exc)
                self._failing = True
                continue
            except Exception:  # a bug must not end the feed: log it and keep the last catalog
                log.exception("loading the catalog failed; serving the catalog last loaded")
                continue
            if self._failing:
                log.warning("catalog database back: serving its current catalog")
                self._failing = False


def describe_delta_table(
    location: str, storage_options: Mapping[str, Any], cache: SnapshotCache, open_store: StoreOpener
) -> tuple[Schema, list[str]]:
    """The schema and partition columns of the Delta table at ``location``, or a 400 saying why
    it cannot be read (a 503 when its storage may come back)."""
    try:
        snapshot = DeltaTable(location, store=open_store(location, storage_options), cache=cache).snapshot()
        return snapshot.schema, list(snapshot.partition_columns)
    except StorageUnavailable:
        raise
    except DeltaportError as exc:
        raise InvalidParameter(
            f"'{location}' is not a readable Delta table ({public_message(exc)}): give the folder that holds _delta_log"
        ) from None

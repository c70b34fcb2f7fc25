"""The audit log: one event (catalog.model.AuditEvent) per protocol request, per download of a
file this server serves, and per admin write or token activation (named by :data:`ADMIN_ACTIONS`).

An event names the principal (a recipient's name, ``admin``, ``anonymous``, or
``unauthenticated`` when the request never authenticated), never a token; and tables by name,
never a URL: no query string (where presigned URLs carry their signatures) reaches an event.

Sinks (:class:`AuditSink`) take events without blocking: :class:`JsonLinesAuditSink` writes one
JSON object per line to a file it rotates, :class:`BatchingSink` hands batches to a callable (e.g.
the catalog database's ``add_audit_events``), :class:`FanOutSink` writes to several. The first
two do their I/O on a background thread fed by a bounded queue; a full queue drops the event (and
says so in the server log) rather than hold up a request, and a failing write is logged, never
raised into a request.
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import orjson

from deltaport.catalog.model import AuditEvent
from deltaport.catalog.store_audit import BLOCK_EVENTS
from deltaport.server.errors import ACTIVATION_API, ADMIN_PREFIX
from deltaport.server.request_info import RequestInfo

if TYPE_CHECKING:
    from deltaport.catalog.store import CatalogDB

log = logging.getLogger("deltaport.audit")

_T = "/shares/{share}/schemas/{schema}/tables/{table}"
#: (route template under the sharing prefix, method) -> the protocol's name of the action.
ACTIONS = {
    ("/shares", "GET"): "listShares",
    ("/shares/{share}", "GET"): "getShare",
    ("/shares/{share}/schemas", "GET"): "listSchemas",
    ("/shares/{share}/schemas/{schema}/tables", "GET"): "listTables",
    ("/shares/{share}/all-tables", "GET"): "listAllTables",
    (_T + "/version", "GET"): "getTableVersion",
    (_T, "HEAD"): "getTableVersion",
    (_T + "/metadata", "GET"): "getTableMetadata",
    (_T + "/query", "POST"): "queryTable",
    (_T + "/changes", "GET"): "queryTableChanges",
    ("/files/{key}/{path:path}", "GET"): "downloadFile",
    ("/files/{key}/{path:path}", "HEAD"): "downloadFile",
}
#: (admin route template, method) -> action, for the admin API's writes and activations.
ADMIN_ACTIONS = {
    (ADMIN_PREFIX + path, method): action
    for path, method, action in (
        ("/catalogs", "POST", "createCatalog"),
        ("/catalogs/{name}", "PATCH", "updateCatalog"),
        ("/catalogs/{name}", "DELETE", "deleteCatalog"),
        ("/schemas", "POST", "createSchema"),
        ("/schemas/{full_name}", "PATCH", "updateSchema"),
        ("/schemas/{full_name}", "DELETE", "deleteSchema"),
        ("/tables", "POST", "createTable"),
        ("/tables/{full_name}", "DELETE", "deleteTable"),
        ("/shares", "POST", "createShare"),
        ("/shares/{name}", "PATCH", "updateShare"),
        ("/shares/{name}", "DELETE", "deleteShare"),
        ("/shares/{name}/permissions", "PATCH", "updateSharePermissions"),
        ("/recipients", "POST", "createRecipient"),
        ("/recipients/{name}", "PATCH", "updateRecipient"),
        ("/recipients/{name}", "DELETE", "deleteRecipient"),
        ("/recipients/{name}/rotate-token", "POST", "rotateRecipientToken"),
    )
}
ADMIN_ACTIONS[(ACTIVATION_API + "/{activation_token}", "GET")] = "activateRecipient"
UNAUTHENTICATED = "unauthenticated"


class AuditSink(Protocol):
    """Takes audit events. ``write`` must not block for long: it is called on the event loop."""

    def write(self, event: AuditEvent) -> None: ...


@runtime_checkable
class _Flushable(Protocol):
    def flush(self, timeout: float = ...) -> bool: ...


def event_json(event: AuditEvent) -> bytes:
    """The event as one line of JSON (no newline): every field, by its name."""
    return orjson.dumps(event, default=_plain)


def _plain(value: Any) -> Any:
    if isinstance(value, Mapping):
        return dict(value)
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    return str(value)


class _Marker:
    """In the queue among the items: everything before it has been handled once ``done`` is set."""

    def __init__(self, stop: bool = False) -> None:
        self.stop = stop
        self.done = threading.Event()


class _Background:
    """A queue of at most ``max_queue`` waiting items, drained by one daemon thread, which hands
    ``handle`` batches of at most ``max_batch``: every ``linger_s`` seconds, or as soon as
    ``max_batch`` are waiting, or on ``flush`` or ``close``. So a busy server wakes the thread once
    per batch, not once per item.

    ``put`` never blocks and never raises (a full queue drops the item); it takes no lock: it is
    called once per request, and a lock and a queue's bookkeeping cost half of what the rest of an
    audit event does. ``flush`` waits until what was queued before it has been handled; ``close``
    handles what is queued and stops the thread."""

    def __init__(
        self, handle: Callable[[list[Any]], None], *, name: str, linger_s: float, max_batch: int, max_queue: int
    ) -> None:
        self._handle, self._name = handle, name
        self._linger, self._max_batch, self._max_queue = linger_s, max_batch, max_queue
        self._items: deque[Any] = deque()  # appends and pops are atomic
        self._due = threading.Event()  # a batch is full, or wanted now
        self.dropped = 0
        self._closed = False
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def put(self, item: Any) -> None:
        waiting = len(self._items)
        if self._closed or waiting >= self._max_queue:
            self.dropped += 1
            if not self._closed and (self.dropped == 1 or self.dropped % 1000 == 0):
                log.warning("%s: queue full, %d audit event(s) dropped so far", self._name, self.dropped)
            return
        self._items.append(item)
        if waiting + 1 == self._max_batch:
            self._due.set()

    def flush(self, timeout: float = 10.0) -> bool:
        """Whether everything queued before the call was handled within ``timeout`` seconds."""
        if not self._thread.is_alive():
            return not self._items
        marker = _Marker()
        self._items.append(marker)
        self._due.set()
        return marker.done.wait(timeout)

    def close(self, timeout: float = 10.0) -> None:
        if self._closed:
            return
        self._closed = True
        self._items.append(_Marker(stop=True))
        self._due.set()
        self._thread.join(timeout)

    def _run(self) -> None:
        while True:
            self._due.wait(self._linger if self._linger > 0 else None)
            self._due.clear()
            if self._drain():
                return

    def _drain(self) -> bool:
        """Handle what is queued, in batches of at most ``max_batch``, each marker's items before it
        is set. Returns whether a stop marker was met."""
        batch: list[Any] = []
        while self._items:
            item = self._items.popleft()
            if isinstance(item, _Marker):
                self._deliver(batch)
                batch = []
                item.done.set()
                if item.stop:
                    return True
                continue
            batch.append(item)
            if len(batch) >= self._max_batch:
                self._deliver(batch)
                batch = []
        self._deliver(batch)
        return False

    def _deliver(self, batch: list[Any]) -> None:
        if not batch:
            return
        try:
            self._handle(batch)
        except Exception as exc:  # never into requests: the events are lost, the log says so
            log.warning("%s: %d audit event(s) could not be written: %s", self._name, len(batch), type(exc).__name__)


class JsonLinesAuditSink:
    """Audit events appended to ``path``, one JSON object per line (see :func:`event_json`).

    Before a line would take the file over ``max_bytes``, it is rotated: ``path`` becomes
    ``path.1``, ``path.1`` becomes ``path.2`` and so on, the oldest beyond ``backups`` deleted
    (``backups`` 0: the file starts afresh). A line is never split across files. The file is
    created readable by its owner and group only, and opened now, so an unwritable path fails at
    startup. Lines are written on a background thread within ``flush_every_s`` of their event
    (at once on :meth:`flush`); the sink is closed at interpreter exit if not before."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        max_bytes: int = 100 << 20,
        backups: int = 5,
        flush_every_s: float = 0.2,
        max_queue: int = 100_000,
    ) -> None:
        self.path = Path(path)
        self.max_bytes = max_bytes
        self.backups = backups
        self._fd = self._open()
        self._size = os.fstat(self._fd).st_size
        self._background = _Background(
            self._write_lines,
            name=f"audit-file:{self.path.name}",
            linger_s=flush_every_s,
            max_batch=1000,
            max_queue=max_queue,
        )
        atexit.register(self.close)

    def write(self, event: AuditEvent) -> None:
        self._background.put(event)

    def flush(self, timeout: float = 10.0) -> bool:
        return self._background.flush(timeout)

    def close(self) -> None:
        """Write what is queued, then close the file."""
        atexit.unregister(self.close)
        self._background.close()
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def _open(self) -> int:
        return os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o640)

    def _write_lines(self, events: list[AuditEvent]) -> None:
        """The writer thread's: the only code that touches the file."""
        pending: list[bytes] = []
        size = self._size
        for event in events:
            line = event_json(event) + b"\n"
            if self.max_bytes and size and size + len(line) > self.max_bytes:
                self._write(pending)
                pending, size = [], 0
                self._rotate()
            pending.append(line)
            size += len(line)
        self._write(pending)

    def _write(self, lines: list[bytes]) -> None:
        data = b"".join(lines)
        while data:
            written = os.write(self._fd, data)
            data = data[written:]
            self._size += written

    def _rotate(self) -> None:
        os.close(self._fd)
        self._fd = -1
        name = str(self.path)
        if self.backups > 0:
            for n in range(self.backups - 1, 0, -1):
                if os.path.exists(f"{name}.{n}"):
                    os.replace(f"{name}.{n}", f"{name}.{n + 1}")
            os.replace(name, f"{name}.1")
        else:
            os.unlink(name)
        self._fd = self._open()
        self._size = 0


class BatchingSink:
    """Events handed to ``write_batch`` in batches from a background thread: every
    ``flush_every_s`` seconds, or as soon as ``max_batch`` are waiting. A failing ``write_batch``
    loses that batch (logged); it never raises into a request."""

    def __init__(
        self,
        write_batch: Callable[[Sequence[AuditEvent]], None],
        *,
        flush_every_s: float = 1.0,
        max_batch: int = 500,
        max_queue: int = 100_000,
    ) -> None:
        self._background = _Background(
            write_batch, name="audit-batches", linger_s=flush_every_s, max_batch=max_batch, max_queue=max_queue
        )

    def write(self, event: AuditEvent) -> None:
        self._background.put(event)

    def flush(self, timeout: float = 10.0) -> bool:
        return self._background.flush(timeout)

    def close(self) -> None:
        self._background.close()


class FanOutSink:
    """Every event to each sink; one sink failing does not keep the event from the others."""

    def __init__(self, *sinks: AuditSink) -> None:
        self.sinks = sinks

    def close(self) -> None:
        for sink in self.sinks:
            close = getattr(sink, "close", None)
            if close is not None:
                close()

    def write(self, event: AuditEvent) -> None:
        for sink in self.sinks:
            try:
                sink.write(event)
            except Exception as exc:
                log.warning("audit sink %s failed: %s", type(sink).__name__, type(exc).__name__)

    def flush(self, timeout: float = 10.0) -> bool:
        return all(sink.flush(timeout) for sink in self.sinks if isinstance(sink, _Flushable))


def config_audit_sink(
    path: str | None, catalog: CatalogDB | None
) -> JsonLinesAuditSink | BatchingSink | FanOutSink | None:
    """The sinks a server's config asks for: its ``auditLog`` file (``path``) and the catalog
    database it serves, if any (where the admin API and ``deltaport admin audit`` read them)."""
    sinks: list[JsonLinesAuditSink | BatchingSink] = []
    if path is not None:
        sinks.append(JsonLinesAuditSink(path))
    if catalog is not None:
        sinks.append(BatchingSink(catalog.add_audit_events, max_batch=BLOCK_EVENTS))
    if len(sinks) > 1:
        return FanOutSink(*sinks)
    return sinks[0] if sinks else None


class AuditLog:
    """Turns answered requests into events for ``sink``, each timed by the request's arrival."""

    def __init__(self, sink: AuditSink) -> None:
        self.sink = sink

    def request(
        self, info: RequestInfo, route: str, method: str, seconds: float, path_params: Mapping[str, str]
    ) -> None:
        """The event of an answered protocol request or download (other requests have none)."""
        action = ACTIONS.get((route, method))
        if action is None:
            admin_action = ADMIN_ACTIONS.get((route, method))
            if admin_action is not None:
                self._admin_event(info, admin_action, seconds, path_params)
            return
        download = action == "downloadFile"
        served = info.served
        files = served.files if served else (1 if download and info.status < 400 else None)
        self._write(
            info,
            action,
            seconds,
            share=info.share or path_params.get("share"),
            schema=info.schema or path_params.get("schema"),
            table=info.table or path_params.get("table"),
            version=info.version,
            files=files,
            bytes=served.bytes if served else (info.bytes_sent if download else None),
        )

    def _admin_event(self, info: RequestInfo, action: str, seconds: float, path_params: Mapping[str, str]) -> None:
        """The event of an admin write or an activation: the names its path and body give (never
        the activation token its path carries)."""
        detail = {k: v for k, v in path_params.items() if "token" not in k}
        if info.target is not None:
            detail["name"] = info.target
        self._write(info, action, seconds, detail=detail)

    def flush(self, timeout: float = 10.0) -> bool:
        """Wait for the sink to write what it was given (sinks without ``flush`` write at once)."""
        return self.sink.flush(timeout) if isinstance(self.sink, _Flushable) else True

    def _write(
        self,
        info: RequestInfo,
        action: str,
        seconds: float,
        *,
        share: str | None = None,
        schema: str | None = None,
        table: str | None = None,
        version: int | None = None,
        files: int | None = None,
        bytes: int | None = None,
        detail: Mapping[str, object] | None = None,
    ) -> None:
        """The event of ``info``'s request, with what every event names, to the sink. (Keyword
        parameters rather than ``**fields``: this runs once per request, and a dict of them cost a
        fifth more.)"""
        event = AuditEvent(
            time=info.time_ms,
            request_id=info.request_id,
            principal=info.principal or UNAUTHENTICATED,
            action=action,
            status=info.status,
            client_ip=info.client_ip,
            user_agent=info.user_agent,
            share=share,
            schema=schema,
            table=table,
            version=version,
            files=files,
            bytes=bytes,
            duration_ms=round(seconds * 1000, 3),
            detail=detail if detail is not None else {},
        )
        try:
            self.sink.write(event)
        except Exception as exc:  # the request has been answered: its event must not fail it
            log.warning("audit sink %s failed: %s", type(self.sink).__name__, type(exc).__name__)

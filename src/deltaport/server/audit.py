"""The audit log: one event (catalog.model.AuditEvent) per protocol request, per download of a
file this server serves, and per admin write or token activation (named by :data:`ADMIN_ACTIONS`).

An event names the principal (a recipient's name, ``admin``, ``anonymous``, or
``unauthenticated`` when the request never authenticated), never a token; and tables by name,
never a URL: no query string (where presigned URLs carry their signatures) reaches an event.

:class:`AuditLog` takes an event's values from the request that answered (a tuple, queued without a
lock) and writes them from a thread of its own: every second, or as soon as
:data:`~deltaport.catalog.store_audit.BLOCK_EVENTS` wait, it makes the waiting events, renders each
once as a line of JSON (``store_audit.event_line``) into one block, and hands that block to each
sink (:data:`AuditSink`): :class:`JsonLinesAuditSink` appends it to a file it rotates, the catalog
database stores it as one row (``CatalogDB.add_audit_block``). Every step after the queue runs on
the writer, in a loop over the batch: on a loaded server the same steps done once per request,
between other work, cost more. A full queue drops the event (and says so in the server
log) rather than hold up a request; a failing sink is logged, never raised into a request, and
does not keep the block from the other sinks.
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from deltaport.catalog.model import AuditEvent
from deltaport.catalog.store_audit import BLOCK_EVENTS, MAX_BLOCK_EVENTS, AuditBlock
from deltaport.server.errors import ACTIVATION_API, ADMIN_PREFIX
from deltaport.server.request_info import RequestInfo

if TYPE_CHECKING:
    from deltaport.catalog.store import CatalogDB

log = logging.getLogger("deltaport.audit")

#: Where the audit log's thread puts each block of events: may do I/O, never on the event loop.
AuditSink = Callable[[AuditBlock], None]

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


class JsonLinesAuditSink:
    """Blocks of audit events appended to ``path``, one JSON object per line (``event_line``).

    Before a line would take the file over ``max_bytes``, it is rotated: ``path`` becomes
    ``path.1``, ``path.1`` becomes ``path.2`` and so on, the oldest beyond ``backups`` deleted
    (``backups`` 0: the file starts afresh). A line is never split across files. The file is
    created readable by its owner and group only, and opened now, so an unwritable path fails at
    startup. :meth:`write` is the sink (called by one thread, the audit log's)."""

    def __init__(self, path: str | os.PathLike[str], *, max_bytes: int = 100 << 20, backups: int = 5) -> None:
        self.path = Path(path)
        self.max_bytes = max_bytes
        self.backups = backups
        self._fd = self._open()
        self._size = os.fstat(self._fd).st_size

    def write(self, block: AuditBlock) -> None:
        data = block.lines
        if self.max_bytes and self._size + len(data) > self.max_bytes:
            for line in data.splitlines(keepends=True):
                if self._size and self._size + len(line) > self.max_bytes:
                    self._rotate()
                self._append(line)
        else:
            self._append(data)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def _open(self) -> int:
        return os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o640)

    def _append(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            written = os.write(self._fd, view)
            view = view[written:]
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

    ``put`` never blocks and never raises (a full queue drops the item); it takes no lock, as it
    runs once per request on the event loop (a deque's append is atomic). ``flush`` waits until
    what was queued before it has been handled; ``close`` handles what is queued and stops the
    thread."""

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


class AuditLog:
    """Turns answered requests into events and writes them to ``sinks``, from a thread of its own
    (``audit-writer``): every ``flush_every_s`` seconds, or as soon as ``BLOCK_EVENTS`` wait, or on
    :meth:`flush` or :meth:`close`. Each event is timed by its request's arrival.

    A request only queues its event's values, in :class:`AuditEvent`'s order; the thread makes and
    renders the events of a batch together (``AuditBlock.of``), one line each, and hands that one
    block to every sink. At most ``max_pending`` events wait; beyond that they are dropped (and
    logged). Closed at interpreter exit if not before."""

    def __init__(self, sinks: Sequence[AuditSink], *, flush_every_s: float = 1.0, max_pending: int = 100_000) -> None:
        self.sinks = tuple(sinks)
        self._background = _Background(
            self._write_block,
            name="audit-writer",
            linger_s=flush_every_s,
            max_batch=BLOCK_EVENTS,
            max_queue=min(max_pending, MAX_BLOCK_EVENTS),
        )
        atexit.register(self.close)

    @property
    def dropped(self) -> int:
        return self._background.dropped

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
        self._write(
            info,
            action,
            seconds,
            info.share or path_params.get("share"),
            info.schema or path_params.get("schema"),
            info.table or path_params.get("table"),
            info.version,
            served.files if served else (1 if download and info.status < 400 else None),
            served.bytes if served else (info.bytes_sent if download else None),
        )

    def _admin_event(self, info: RequestInfo, action: str, seconds: float, path_params: Mapping[str, str]) -> None:
        """The event of an admin write or an activation: the names its path and body give (never
        the activation token its path carries)."""
        detail = {k: v for k, v in path_params.items() if "token" not in k}
        if info.target is not None:
            detail["name"] = info.target
        self._write(info, action, seconds, detail=detail)

    def _write(
        self,
        info: RequestInfo,
        action: str,
        seconds: float,
        share: str | None = None,
        schema: str | None = None,
        table: str | None = None,
        version: int | None = None,
        files: int | None = None,
        bytes: int | None = None,
        detail: Mapping[str, object] | None = None,
    ) -> None:
        """Queue the values of the event of ``info``'s request, in :class:`AuditEvent`'s order, with
        no ``detail`` as None: a tuple of plain values, which the garbage collector stops tracking.
        (Positional parameters and a tuple, not ``**fields`` and an event: this runs once per
        request, on the event loop.)"""
        self._background.put(
            (
                info.time_ms,
                info.request_id,
                info.principal or UNAUTHENTICATED,
                action,
                info.status,
                info.client_ip,
                info.user_agent,
                share,
                schema,
                table,
                version,
                files,
                bytes,
                round(seconds * 1000, 3),
                detail,
            )
        )

    def add(self, event: AuditEvent) -> None:
        """Queue an event made elsewhere; never blocks, never raises."""
        self._background.put(tuple(getattr(event, name) for name in _FIELDS))

    def flush(self, timeout: float = 10.0) -> bool:
        """Whether every event queued before the call was handed to the sinks within ``timeout``
        seconds."""
        return self._background.flush(timeout)

    def close(self, timeout: float = 10.0) -> None:
        """Write what is queued, then stop the thread (the sinks stay open: their owner closes
        them)."""
        atexit.unregister(self.close)
        self._background.close(timeout)

    def _write_block(self, batch: list[tuple[Any, ...]]) -> None:
        """The writer thread's: a batch of queued values made one block, given to every sink."""
        block = AuditBlock.of(map(_event, batch))
        for sink in self.sinks:
            try:
                sink(block)
            except Exception as exc:  # never into requests: the events are lost there, the log says so
                name = getattr(sink, "__qualname__", type(sink).__name__)
                log.warning("audit sink %s: %d event(s) not written: %s", name, block.count, type(exc).__name__)


_FIELDS = tuple(AuditEvent.__dataclass_fields__)


def _event(values: tuple[Any, ...]) -> AuditEvent:
    """The event of values queued by :meth:`AuditLog._write` (``detail`` last, None for none)."""
    event = AuditEvent(*values)
    if event.detail is None:
        event.detail = {}
    return event


def config_audit_log(path: str | None, catalog: CatalogDB | None) -> tuple[AuditLog | None, Callable[[], None]]:
    """The audit log a server's config asks for, writing to its ``auditLog`` file (``path``) and
    to the catalog database it serves, if any (where the admin API and ``deltaport admin audit``
    read them); and what closes it and its file."""
    file = JsonLinesAuditSink(path) if path is not None else None
    sinks: list[AuditSink] = []
    if file is not None:
        sinks.append(file.write)
    if catalog is not None:
        sinks.append(catalog.add_audit_block)
    if not sinks:
        return None, lambda: None
    audit = AuditLog(sinks)

    def close() -> None:
        audit.close()
        if file is not None:
            file.close()

    return audit, close

"""The audit log: one event (catalog.model.AuditEvent) per protocol request, per download of a
file this server serves, and per admin write or token activation (named by :data:`ADMIN_ACTIONS`).

An event names the principal (a recipient's name, ``admin``, ``anonymous``, or
``unauthenticated`` when the request never authenticated), never a token; and tables by name,
never a URL: no query string (where presigned URLs carry their signatures) reaches an event.

:class:`AuditLog` takes what an event is made of from the request that answered (a tuple of its
fields, queued without a lock) and writes events from a thread of its own: within
:data:`DRAIN_EVERY_S` it makes the queued events and renders each once as a line of JSON
(``store_audit.event_line``); every second, or as soon as
:data:`~deltaport.catalog.store_audit.BLOCK_EVENTS` are rendered, it hands them as one block to each
sink (:data:`AuditSink`): :class:`JsonLinesAuditSink` appends it to a file it rotates, the catalog
database stores it as one row (``CatalogDB.add_audit_block``). Every step after the queue runs on
the writer, in a loop over the batch: on a loaded server the same steps done once per request,
between other work, cost more. A full queue drops the event (and says so in the server log) rather
than hold up a request; a failing sink is logged, never raised into a request, and does not keep the
block from the other sinks; the block is kept for it and written before its next one.
"""

from __future__ import annotations

import atexit
import fcntl
import logging
import operator
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from deltaport.catalog.model import AuditEvent
from deltaport.catalog.store_audit import BLOCK_EVENTS, MAX_BLOCK_EVENTS, AuditBlock
from deltaport.server.errors import ACTIVATION_API, ADMIN_PREFIX
from deltaport.server.ops.request_info import RequestInfo

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
#: How often the writer takes queued events while they keep coming. Values left queued for a
#: whole block's second stay interleaved with the serving thread's own allocations and slow all of
#: its work, by up to about 5 % of a loaded server's requests/s (``benchmarks/server_ab.py --audit``
#: measures the audit log's cost against another checkout).
DRAIN_EVERY_S = 0.05


class JsonLinesAuditSink:
    """Blocks of audit events appended to ``path``, one JSON object per line (``event_line``).

    Before a line would take the file over ``max_bytes``, it is rotated: ``path`` becomes
    ``path.1``, ``path.1`` becomes ``path.2`` and so on, the oldest beyond ``backups`` deleted
    (``backups`` 0: the file starts afresh). A line is never split across files. The file is
    created readable by its owner and group only, and opened now, so an unwritable path fails at
    startup. :meth:`write` is the sink (called by one thread, the audit log's).

    Several processes may append to one file (``deltaport serve --workers``): each block is written
    holding an exclusive ``flock`` on the file, after reopening the path if another process rotated
    it away, and sizes are taken from the file itself, so lines never interleave and one process
    rotates a full file once."""

    def __init__(self, path: str | os.PathLike[str], *, max_bytes: int = 100 << 20, backups: int = 5) -> None:
        self.path = Path(path)
        self.max_bytes = max_bytes
        self.backups = backups
        self._fd = self._open()
        self._size = os.fstat(self._fd).st_size

    def write(self, block: AuditBlock) -> None:
        data = block.lines
        self._lock()
        try:
            if self.max_bytes and self._size + len(data) > self.max_bytes:
                for line in data.splitlines(keepends=True):
                    while self._size and self._size + len(line) > self.max_bytes:
                        self._rotate()  # again if another process filled the new file meanwhile
                    self._append(line)
            else:
                self._append(data)
        finally:
            fcntl.flock(self._fd, fcntl.LOCK_UN)

    def _lock(self) -> None:
        """Hold the file's lock, on the file now at ``path`` (another process may have rotated the
        one this process has open), and know its size."""
        while True:
            fcntl.flock(self._fd, fcntl.LOCK_EX)
            try:
                if os.stat(self.path).st_ino == os.fstat(self._fd).st_ino:
                    break
            except FileNotFoundError:
                pass  # rotated with no backups, the new file not made yet
            os.close(self._fd)  # releases the lock
            self._fd = self._open()
        self._size = os.fstat(self._fd).st_size

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
        """Called holding the lock: the full file moved aside before the lock is let go."""
        name = str(self.path)
        if self.backups > 0:
            for n in range(self.backups - 1, 0, -1):
                if os.path.exists(f"{name}.{n}"):
                    os.replace(f"{name}.{n}", f"{name}.{n + 1}")
            os.replace(name, f"{name}.1")
        else:
            os.unlink(name)
        os.close(self._fd)
        self._fd = self._open()
        self._lock()


class _Marker:
    """In the queue among the items: everything before it has been handled once ``done`` is set."""

    def __init__(self, stop: bool = False) -> None:
        self.stop = stop
        self.done = threading.Event()


class _Background:
    """A queue of at most ``max_queue`` waiting items, drained by one daemon thread, which hands
    ``handle`` batches of at most ``max_batch``; after each wake it calls ``tick``, and before
    setting a flush's marker ``settle``. The thread wakes every ``drain_s`` seconds while items
    keep coming; once a wake found none, it waits for the next item (or ``idle_s``; None: no
    limit). It wakes at once when ``max_batch`` are waiting, and on ``flush`` or ``close``. So a
    busy server wakes the thread a few times a second, not once per item, and no item waits long
    in the queue.

    ``put`` never blocks and never raises (a full queue drops the item); it takes no lock, as it
    runs once per request on the event loop (a deque's append is atomic). ``flush`` waits until
    what was queued before it has been handled and settled; ``close`` does that with all that is
    queued and stops the thread."""

    def __init__(
        self,
        handle: Callable[[list[Any]], None],
        *,
        tick: Callable[[], None],
        settle: Callable[[], None],
        name: str,
        drain_s: float,
        idle_s: float | None,
        max_batch: int,
        max_queue: int,
    ) -> None:
        self._handle, self._tick, self._settle, self._name = handle, tick, settle, name
        self._drain_s, self._idle_s, self._max_batch, self._max_queue = drain_s, idle_s, max_batch, max_queue
        self._items: deque[Any] = deque()  # appends and pops are atomic
        self._due = threading.Event()  # a batch is full, or wanted now
        self._idle = True  # the thread waits for the next item
        self.dropped = 0
        self._closed = False
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    @property
    def waiting(self) -> int:
        """How many items are queued and not yet handed on."""
        return sum(not isinstance(item, _Marker) for item in list(self._items))

    def put(self, item: Any) -> None:
        waiting = len(self._items)
        if self._closed or waiting >= self._max_queue:
            self.dropped += 1
            if not self._closed and (self.dropped == 1 or self.dropped % 1000 == 0):
                log.warning("%s: queue full, %d audit event(s) dropped so far", self._name, self.dropped)
            return
        self._items.append(item)
        if (waiting == 0 and self._idle) or waiting + 1 == self._max_batch:
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
        wait = self._idle_s
        while True:
            self._due.wait(wait)
            self._due.clear()
            found, stop = self._drain()
            if stop:
                return
            self._call(self._tick)
            self._idle = not found
            wait = self._drain_s if found else self._idle_s

    def _drain(self) -> tuple[bool, bool]:
        """Handle what is queued, in batches of at most ``max_batch``, each marker's items handled
        and settled before it is set. Returns whether any item was found, and whether a stop
        marker was met."""
        found = bool(self._items)
        batch: list[Any] = []
        while self._items:
            item = self._items.popleft()
            if isinstance(item, _Marker):
                self._deliver(batch)
                batch = []
                self._call(self._settle)
                item.done.set()
                if item.stop:
                    return found, True
                continue
            batch.append(item)
            if len(batch) >= self._max_batch:
                self._deliver(batch)
                batch = []
        self._deliver(batch)
        return found, False

    def _deliver(self, batch: list[Any]) -> None:
        if not batch:
            return
        try:
            self._handle(batch)
        except Exception as exc:  # never into requests: the events are lost, the log says so
            log.warning("%s: %d audit event(s) could not be written: %s", self._name, len(batch), type(exc).__name__)

    def _call(self, step: Callable[[], None]) -> None:
        try:
            step()
        except Exception as exc:  # as in _deliver
            log.warning("%s: audit events could not be written: %s", self._name, type(exc).__name__)


class AuditLog:
    """Turns answered requests into events and writes them to ``sinks``, from a thread of its own
    (``audit-writer``), in blocks: every ``flush_every_s`` seconds, or as soon as ``BLOCK_EVENTS``
    are rendered, or on :meth:`flush` or :meth:`close`. Each event is timed by its request's
    arrival. A block a sink fails to write (a database gone for a while, a full disk) is kept for
    that sink and written before its next one; beyond ``max_pending`` events kept so, the oldest
    are dropped (and logged).

    A request only queues what its event is made of (:meth:`request`). While requests keep coming,
    the thread takes what they queued every :data:`DRAIN_EVERY_S` seconds, makes their events and
    renders them at once (``AuditBlock.of``, one line each); the rendered parts wait for their
    block, which goes to every sink as one. At most ``max_pending`` events wait; beyond that they
    are dropped (and logged). Closed at interpreter exit if not before."""

    def __init__(self, sinks: Sequence[AuditSink], *, flush_every_s: float = 1.0, max_pending: int = 100_000) -> None:
        self.sinks = tuple(sinks)
        self._every = flush_every_s
        self._parts: list[AuditBlock] = []  # rendered, waiting for their block
        self._first_rendered = 0.0  # monotonic time of the oldest part
        self._unsent: list[list[AuditBlock]] = [[] for _ in self.sinks]  # each sink's blocks to write, oldest first
        self._max_unsent = max_pending
        self._last_try = 0.0  # monotonic time the sinks were last given blocks
        self._background = _Background(
            self._render,
            tick=self._write_if_due,
            settle=self._write_parts,
            name="audit-writer",
            drain_s=min(DRAIN_EVERY_S, flush_every_s) if flush_every_s > 0 else DRAIN_EVERY_S,
            idle_s=flush_every_s if flush_every_s > 0 else None,
            max_batch=BLOCK_EVENTS,
            max_queue=min(max_pending, MAX_BLOCK_EVENTS),
        )
        atexit.register(self.close)

    @property
    def waiting(self) -> int:
        """How many events are queued and not yet rendered."""
        return self._background.waiting

    @property
    def dropped(self) -> int:
        return self._background.dropped

    def request(
        self, info: RequestInfo, route: str, method: str, seconds: float, path_params: Mapping[str, str]
    ) -> None:
        """Queue what an answered request leaves for its event, if its route has one: the route's
        template, the method, the time taken, the path's parameters and ``info``'s fields, read in
        one call. The writer makes the event (:func:`_event`); this runs once per request, on the
        event loop."""
        if route in _AUDITED:
            self._background.put((route, method, seconds, path_params, _TAKEN(info)))

    def add(self, event: AuditEvent) -> None:
        """Queue an event made elsewhere; never blocks, never raises."""
        self._background.put(event)

    def flush(self, timeout: float = 10.0) -> bool:
        """Whether every event queued before the call was handed to the sinks within ``timeout``
        seconds."""
        return self._background.flush(timeout)

    def close(self, timeout: float = 10.0) -> None:
        """Write what is queued, then stop the thread (the sinks stay open: their owner closes
        them)."""
        atexit.unregister(self.close)
        self._background.close(timeout)
        for sink, unsent in zip(self.sinks, self._unsent):
            if unsent:
                lost = sum(block.count for block in unsent)
                log.warning("audit sink %s: %d event(s) never written, the log closed", _name(sink), lost)

    def _render(self, batch: list[Any]) -> None:
        """The writer thread's: the events of a batch of queued items rendered, added to the block
        being made (written first if the batch would take it over ``BLOCK_EVENTS``)."""
        part = AuditBlock.of(filter(None, map(_event, batch)))
        if not part.count:  # only requests whose method has no event
            return
        if sum(p.count for p in self._parts) + part.count > BLOCK_EVENTS:
            self._write_parts()
        if not self._parts:
            self._first_rendered = time.monotonic()
        self._parts.append(part)
        if sum(p.count for p in self._parts) >= BLOCK_EVENTS:
            self._write_parts()

    def _write_if_due(self) -> None:
        if self._every <= 0:
            return
        now = time.monotonic()
        if self._parts and now - self._first_rendered >= self._every:
            self._write_parts()
        elif any(self._unsent) and now - self._last_try >= self._every:
            self._write_parts()  # a failed block tried again, though nothing new came

    def _write_parts(self) -> None:
        """The rendered parts as one block, given to every sink after the blocks it has still to
        take."""
        if self._parts:
            block = AuditBlock.join(self._parts)
            self._parts = []
            for unsent in self._unsent:
                unsent.append(block)
        self._last_try = time.monotonic()
        for sink, unsent in zip(self.sinks, self._unsent):
            self._send(sink, unsent)

    def _send(self, sink: AuditSink, unsent: list[AuditBlock]) -> None:
        """``unsent`` written to ``sink``, oldest first, up to a failure: never raised into requests;
        what failed stays in ``unsent``, but for the oldest events beyond ``max_pending``."""
        while unsent:
            try:
                sink(unsent[0])
            except Exception as exc:
                kept = sum(block.count for block in unsent)
                log.warning("audit sink %s: %d event(s) not written yet: %s", _name(sink), kept, type(exc).__name__)
                while len(unsent) > 1 and kept > self._max_unsent:
                    kept -= unsent[0].count
                    log.warning("audit sink %s: %d event(s) dropped, never written", _name(sink), unsent.pop(0).count)
                return
            unsent.pop(0)


def _name(sink: AuditSink) -> str:
    return getattr(sink, "__qualname__", type(sink).__name__)


#: The fields of a request's RequestInfo its event is made of, in this order, read in one call.
_TAKEN = operator.attrgetter(
    "time_ms",
    "request_id",
    "principal",
    "status",
    "client_ip",
    "user_agent",
    "share",
    "schema",
    "table",
    "version",
    "served",
    "bytes_sent",
    "target",
)
#: The route templates of the requests that have an event.
_AUDITED = frozenset(route for route, _ in (*ACTIONS, *ADMIN_ACTIONS))


def _event(item: AuditEvent | tuple[Any, ...]) -> AuditEvent | None:
    """The event of an item :meth:`AuditLog.request` queued (None if its method has none), or of
    one :meth:`AuditLog.add` queued: the writer's. An admin write's or activation's event names
    what its path and body give, never the activation token its path carries. Each event is made
    whole, in one call."""
    if isinstance(item, AuditEvent):
        return item
    route, method, seconds, path_params, taken = item
    time_ms, request_id, principal, status, client_ip, user_agent = taken[:6]
    share, schema, table, version, served, sent, target = taken[6:]
    principal = principal or UNAUTHENTICATED
    took_ms = round(seconds * 1000, 3)
    action = ACTIONS.get((route, method))
    if action is None:
        action = ADMIN_ACTIONS.get((route, method))
        if action is None:
            return None
        detail = {k: v for k, v in path_params.items() if "token" not in k}
        if target is not None:
            detail["name"] = target
        return AuditEvent(
            time_ms, request_id, principal, action, status, client_ip, user_agent, duration_ms=took_ms, detail=detail
        )
    if served is not None:
        files, sent = served.files, served.bytes
    elif action == "downloadFile":
        files = 1 if status < 400 else None
    else:
        files = sent = None
    share = share or path_params.get("share")
    schema = schema or path_params.get("schema")
    table = table or path_params.get("table")
    return AuditEvent(
        time_ms, request_id, principal, action, status, client_ip, user_agent, share, schema, table, version, files,
        sent, took_ms,
    )  # fmt: skip


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

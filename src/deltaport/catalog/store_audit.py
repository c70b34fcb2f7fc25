"""Audit events in the catalog database: appended in bulk, read back oldest first in pages.

Events are append-only and ordered by their id (the order they were stored in); a reader pages
with ``after_id`` = the last id it saw. The store keeps what it is given: keeping tokens, presigned
URLs and credentials out of an event is the caller's duty (see :class:`AuditEvent`).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Row

from deltaport.catalog import db
from deltaport.catalog.model import AuditEvent
from deltaport.catalog.names import name_key
from deltaport.catalog.store_types import Tx
from deltaport.errors import InvalidParameter

_A = db.audit_events
MAX_LIMIT = 10_000


def _row(event: AuditEvent) -> dict[str, Any]:
    """The event's column values; ``detail`` as JSON text (a value JSON cannot hold kept as its
    text, never failing the write)."""
    return dict(
        time=event.time,
        request_id=event.request_id,
        principal=event.principal,
        action=event.action,
        status=event.status,
        client_ip=event.client_ip,
        user_agent=event.user_agent,
        share=event.share,
        share_lc=name_key(event.share) if event.share is not None else None,
        schema_name=event.schema,
        table_name=event.table,
        version=event.version,
        files=event.files,
        bytes=event.bytes,
        duration_ms=event.duration_ms,
        detail=json.dumps(dict(event.detail), default=str) if event.detail else "{}",
    )


def _event(row: Row[Any]) -> AuditEvent:
    return AuditEvent(
        time=row.time,
        request_id=row.request_id,
        principal=row.principal,
        action=row.action,
        status=row.status,
        client_ip=row.client_ip,
        user_agent=row.user_agent,
        share=row.share,
        schema=row.schema_name,
        table=row.table_name,
        version=row.version,
        files=row.files,
        bytes=row.bytes,
        duration_ms=row.duration_ms,
        detail=row.detail,
    )


_COLUMNS = [c.name for c in _A.columns if c.name != "id"]


@functools.lru_cache(maxsize=4)
def _insert(dialect: sa.Dialect) -> tuple[str, list[str] | None]:
    """The INSERT of one event in ``dialect``'s own SQL and parameter style (column order for
    positional styles, None for named ones)."""
    compiled = sa.insert(_A).inline().compile(dialect=dialect, column_keys=_COLUMNS)
    return compiled.string, list(compiled.positiontup) if compiled.positiontup else None


def add_audit_events(tx: Tx, events: Sequence[AuditEvent]) -> None:
    """All of ``events`` in one executemany, straight to the database driver: a busy server writes
    one event per request, and the ORM-level statement cost three times as much per row."""
    if not events:
        return
    sql, order = _insert(tx.conn.dialect)
    rows = [_row(event) for event in events]
    if order is not None:
        tx.conn.exec_driver_sql(sql, [tuple(row[k] for k in order) for row in rows])
    else:
        tx.conn.exec_driver_sql(sql, rows)


def audit_events(
    tx: Tx,
    *,
    since_ms: int | None,
    until_ms: int | None,
    principal: str | None,
    action: str | None,
    share: str | None,
    after_id: int | None,
    limit: int,
) -> list[tuple[int, AuditEvent]]:
    """Up to ``limit`` events, oldest first, with their ids: time in [since_ms, until_ms), the
    principal and action matched exactly, the share without regard to case, id > after_id."""
    if not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= MAX_LIMIT:
        raise InvalidParameter(f"limit must be between 1 and {MAX_LIMIT}, not {limit!r}: page with after_id")
    query = sa.select(_A).order_by(_A.c.id).limit(limit)
    if since_ms is not None:
        query = query.where(_A.c.time >= since_ms)
    if until_ms is not None:
        query = query.where(_A.c.time < until_ms)
    if principal is not None:
        query = query.where(_A.c.principal == principal)
    if action is not None:
        query = query.where(_A.c.action == action)
    if share is not None:
        query = query.where(_A.c.share_lc == name_key(share))
    if after_id is not None:
        query = query.where(_A.c.id > after_id)
    return [(row.id, _event(row)) for row in tx.conn.execute(query)]

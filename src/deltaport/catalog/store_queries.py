"""The state of asynchronous queries in the catalog database (``async_queries``): added once,
finished once (pending → succeeded or failed), read by id, deleted once expired. None of it is a
catalog write (the revision stays)."""

from __future__ import annotations

import dataclasses

import sqlalchemy as sa
from sqlalchemy.exc import IntegrityError

from deltaport.catalog.db import async_queries as q
from deltaport.catalog.model import AsyncQuery
from deltaport.catalog.store_types import Tx

_COLUMNS = {f.name: ("table_name" if f.name == "table" else f.name) for f in dataclasses.fields(AsyncQuery)}


def _row_of(query: AsyncQuery) -> dict[str, object]:
    return {column: getattr(query, attr) for attr, column in _COLUMNS.items()}


def _query_of(row: sa.Row) -> AsyncQuery:
    values = row._mapping
    return AsyncQuery(**{attr: values[column] for attr, column in _COLUMNS.items()})


def _select() -> sa.Select:
    return sa.select(*(q.c[column] for column in _COLUMNS.values()))


def purge(tx: Tx) -> int:
    """Delete the queries expired by now; how many went."""
    return tx.conn.execute(sa.delete(q).where(q.c.expires_at <= tx.now_ms)).rowcount or 0


def keyed(tx: Tx, recipient: str, table: str, table_id: str, key: str) -> AsyncQuery | None:
    """The unexpired query with idempotency ``key`` of this recipient on this table, if any."""
    row = tx.conn.execute(
        _select().where(
            q.c.recipient == recipient,
            q.c.table_name == table,
            q.c.table_id == table_id,
            q.c.idempotency_key == key,
            q.c.expires_at > tx.now_ms,
        )
    ).first()
    return None if row is None else _query_of(row)


def add(tx: Tx, query: AsyncQuery) -> AsyncQuery:
    """Store ``query``; when a concurrent submission stored one with its idempotency key first,
    that one instead (the caller then answers with its id)."""
    purge(tx)
    if query.idempotency_key is not None:
        found = keyed(tx, query.recipient, query.table, query.table_id, query.idempotency_key)
        if found is not None:
            return found
    try:
        with tx.conn.begin_nested():
            tx.conn.execute(sa.insert(q).values(**_row_of(query)))
    except IntegrityError:
        assert query.idempotency_key is not None  # the only unique column but the random id
        found = keyed(tx, query.recipient, query.table, query.table_id, query.idempotency_key)
        assert found is not None
        return found
    return query


def get(tx: Tx, query_id: str) -> AsyncQuery | None:
    """The query ``query_id``, unless it is unknown or expired."""
    row = tx.conn.execute(_select().where(q.c.query_id == query_id, q.c.expires_at > tx.now_ms)).first()
    return None if row is None else _query_of(row)


def finish(tx: Tx, query_id: str, version: int | None, error_code: str | None, error_message: str | None) -> None:
    """Record a pending query's outcome: its pinned ``version``, or its error. The first outcome
    recorded stays (two replicas may plan one query)."""
    status = "failed" if error_code is not None else "succeeded"
    tx.conn.execute(
        sa.update(q)
        .where(q.c.query_id == query_id, q.c.status == "pending")
        .values(status=status, version=version, error_code=error_code, error_message=error_message)
    )

"""Small SQL helpers the store modules share: a write whose unique-constraint violation becomes
AlreadyExists, and a single-row lookup whose absence becomes ResourceNotFound."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import CursorResult, Row
from sqlalchemy.exc import IntegrityError

from deltaport.catalog.store_types import Tx
from deltaport.errors import AlreadyExists, ResourceNotFound

__all__ = ["BIGINT_MAX", "insert_row", "one_row", "write_unique"]

#: The largest number a BIGINT column (times in epoch ms, versions) holds.
BIGINT_MAX = 2**63 - 1


def write_unique(tx: Tx, statement: sa.Executable, conflict: str) -> CursorResult[Any]:
    """Run ``statement``; a constraint violation (a name taken by a concurrent writer after this
    call checked it) is AlreadyExists(``conflict``). The driver's text is dropped: it may quote the
    row, digests included."""
    try:
        return tx.conn.execute(statement)
    except IntegrityError:
        raise AlreadyExists(conflict) from None


def insert_row(tx: Tx, table: sa.Table, values: dict[str, Any], conflict: str) -> int:
    """Insert one row and return its new ``id``; see :func:`write_unique` for ``conflict``."""
    result = write_unique(tx, sa.insert(table).values(**values), conflict)
    key = result.inserted_primary_key
    assert key is not None
    return int(key[0])


def one_row(tx: Tx, query: sa.Select[Any], missing: str) -> Row[Any]:
    """The single row ``query`` finds, else ResourceNotFound(``missing``)."""
    row = tx.conn.execute(query).first()
    if row is None:
        raise ResourceNotFound(missing)
    return row

"""The catalog as the sharing server serves it (:class:`ServedCatalog`), read in a fixed handful
of bulk queries whatever the number of shares and recipients.

Rules: a SCHEMA object stands for every table of its catalog schema at the time of reading (tables
created later included), served in the schema named by its ``shared_as`` under their own names; a
TABLE object is served as its ``shared_as`` "schema.table". Should both give the same served
table name (the schema part of a TABLE's shared_as equal to a SCHEMA object's), the TABLE object
wins: its settings were chosen for that table. Served schema and table names are grouped without
regard to case; everything is sorted by lower-cased name. A table whose
directory access :func:`~deltaport.catalog.served.dir_access_refusal` refuses (one created later in
a shared schema, on storage no credentials can be vended for) is served by URL only. A recipient is
served with its activated tokens only and the lower-cased names of the shares it holds SELECT on.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from operator import attrgetter
from types import MappingProxyType
from typing import Any

import sqlalchemy as sa

from deltaport.catalog import db
from deltaport.catalog.names import name_key
from deltaport.catalog.served import (
    DIR,
    RecipientConfig,
    SchemaConfig,
    ShareConfig,
    SharedTableConfig,
    TokenHash,
    dir_access_refusal,
)
from deltaport.catalog.store_shares import partitions_from_json
from deltaport.catalog.store_types import ServedCatalog, Tx

_SH, _SO, _T, _R, _K, _G = (
    db.shares,
    db.share_objects,
    db.catalog_tables,
    db.recipients,
    db.recipient_tokens,
    db.grants,
)

# served schema (lower-cased) -> (its spelling, {served table (lower-cased) -> table})
_Schemas = dict[str, tuple[str, dict[str, SharedTableConfig]]]


def revision(tx: Tx) -> int:
    query = sa.select(db.catalog_state.c.revision).where(db.catalog_state.c.id == 1)
    return int(tx.conn.execute(query).scalar_one())


def served(tx: Tx, storage_options: Mapping[str, Any] | None) -> ServedCatalog:
    """Everything served, as of one revision (the caller's transaction is one consistent read).
    ``storage_options`` is given to every table, read-only."""
    options = MappingProxyType(dict(storage_options or {}))
    return ServedCatalog(_shares(tx, options), _recipients(tx), revision(tx))


def _object_tables(tx: Tx) -> list[Any]:
    """Every (share object, table) pair served: schema expansions first, then TABLE objects, each
    in the order the objects were added."""
    columns = (
        _SO.c.share_ref,
        _SO.c.id.label("object_id"),
        _SO.c.object_type,
        _SO.c.shared_as,
        _SO.c.history_shared,
        _SO.c.cdf_enabled,
        _SO.c.start_version,
        _SO.c.comment.label("object_comment"),
        _SO.c.partitions,
        _SO.c.access_modes,
        _SO.c.auxiliary_locations,
        _T.c.name.label("table_name"),
        _T.c.table_id,
        _T.c.storage_location,
        _T.c.comment.label("table_comment"),
    )
    expanded = sa.select(*columns).select_from(_SO.join(_T, _T.c.schema_id == _SO.c.schema_ref))
    explicit = sa.select(*columns).select_from(_SO.join(_T, _T.c.id == _SO.c.table_ref))
    by_object = attrgetter("object_id")
    return sorted(tx.conn.execute(expanded), key=by_object) + sorted(tx.conn.execute(explicit), key=by_object)


def _shares(tx: Tx, options: Mapping[str, Any]) -> tuple[ShareConfig, ...]:
    per_share: dict[int, _Schemas] = {}
    for row in _object_tables(tx):
        if row.object_type == "SCHEMA":
            schema, table, comment = row.shared_as, row.table_name, row.table_comment
        else:
            schema, table = row.shared_as.split(".", 1)
            comment = row.object_comment if row.object_comment is not None else row.table_comment
        schemas = per_share.setdefault(row.share_ref, {})
        _, tables = schemas.setdefault(name_key(schema), (schema, {}))
        tables[name_key(table)] = _with_access(
            SharedTableConfig(
                name=table,
                location=row.storage_location,
                id=row.table_id,
                history_shared=bool(row.history_shared or row.cdf_enabled),
                start_version=row.start_version,
                storage_options=options,
                partitions=partitions_from_json(row.partitions),
                comment=comment,
                auxiliary_locations=tuple(row.auxiliary_locations),
            ),
            tuple(row.access_modes),
        )
    rows = sorted(tx.conn.execute(sa.select(_SH)).all(), key=lambda r: r.name_lc)
    return tuple(
        ShareConfig(
            name=row.name,
            schemas=_schema_configs(per_share.get(row.id, {})),
            id=row.share_id,
            comment=row.comment,
            display_name=row.display_name,
            properties=dict(row.properties),
        )
        for row in rows
    )


def _with_access(table: SharedTableConfig, modes: tuple[str, ...]) -> SharedTableConfig:
    """The table with the object's access modes, but 'dir' where :func:`dir_access_refusal` refuses
    it (a table created in a shared schema after the object was added, on storage no credentials
    can be vended for): such a table is read by URL."""
    if DIR in modes and dir_access_refusal(table) is not None:
        modes = ("url",)
    return dataclasses.replace(table, access_modes=modes)


def _schema_configs(schemas: _Schemas) -> tuple[SchemaConfig, ...]:
    return tuple(
        SchemaConfig(name=spelling, tables=tuple(tables[key] for key in sorted(tables)))
        for spelling, tables in (schemas[key] for key in sorted(schemas))
    )


def _recipients(tx: Tx) -> tuple[RecipientConfig, ...]:
    tokens: dict[int, list[TokenHash]] = {}
    activated = sa.select(_K.c.recipient_ref, _K.c.token_hash, _K.c.expiration_time).where(_K.c.token_hash.is_not(None))
    for token in tx.conn.execute(activated.order_by(_K.c.id)):
        tokens.setdefault(token.recipient_ref, []).append(TokenHash(bytes(token.token_hash), token.expiration_time))
    granted: dict[int, list[str]] = {}
    held = (
        sa.select(_G.c.recipient_ref, _SH.c.name_lc)
        .select_from(_G.join(_SH, _G.c.share_ref == _SH.c.id))
        .where(_G.c.privilege == "SELECT")
    )
    for grant in tx.conn.execute(held):
        granted.setdefault(grant.recipient_ref, []).append(grant.name_lc)
    rows = sorted(tx.conn.execute(sa.select(_R)).all(), key=lambda r: r.name_lc)
    return tuple(
        RecipientConfig(
            name=row.name,
            tokens=tuple(tokens.get(row.id, ())),
            shares=tuple(sorted(granted.get(row.id, ()))),
            allowed_ip_addresses=tuple(row.allowed_ip_addresses),
            properties=dict(row.properties),
        )
        for row in rows
    )

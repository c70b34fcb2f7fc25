"""Catalogs, schemas and tables in the catalog database, and the rules for table locations.

Each function runs inside the caller's transaction (:class:`Tx`) and raises the package's errors:
InvalidParameter for a bad name or value, ResourceNotFound naming the missing object,
AlreadyExists when a name (compared without regard to case at its level) or a location is taken.
"""

from __future__ import annotations

import posixpath
import re
import uuid
from typing import Any
from urllib.parse import unquote, urlsplit

import sqlalchemy as sa
from sqlalchemy.engine import Row

from deltaport.catalog import db
from deltaport.catalog.model import CatalogInfo, SchemaInfo, TableInfo
from deltaport.catalog.names import check_name, name_key, split_name
from deltaport.catalog.store_sql import insert_row, one_row, write_unique
from deltaport.catalog.store_types import Tx
from deltaport.errors import AlreadyExists, InvalidParameter

_C, _S, _T = db.catalogs, db.catalog_schemas, db.catalog_tables
#: What no location may hold: control characters, and unpaired surrogates (no file system, URL or
#: database takes them).
_UNSTORABLE = re.compile(r"[\x00-\x1f\x7f\ud800-\udfff]")
_MAX_SEGMENT_BYTES = 255
_MAX_PATH_BYTES = 4095

# --- locations ----------------------------------------------------------------------------------


def location_key(location: object, what: str = "storage location") -> str:
    """The form two locations are compared in: ``file:///a/b`` for an absolute local path or a
    ``file:`` URL (percent-decoding undone), ``scheme://authority/a/b`` for any other URL; empty and
    '.' segments and a trailing '/' dropped. A '..' segment anywhere, a relative path, a query or a
    fragment is InvalidParameter: a location must name one place without resolving anything. So are
    a control character or unpaired surrogate anywhere, and a local path no file system holds (a
    segment over 255 bytes, or over 4095 bytes in all)."""
    if not isinstance(location, str) or not location.strip():
        raise InvalidParameter(
            f"{what} must be an absolute path or a URL such as s3://<bucket>/<path>, not {location!r}"
        )
    unstorable = InvalidParameter(
        f"{what} {location!r} holds a control character or an unpaired surrogate: give the location as plain text"
    )
    if _UNSTORABLE.search(location):
        raise unstorable
    if location.startswith("/"):
        prefix, path = "file://", location
    else:
        try:
            parts = urlsplit(location)
        except ValueError:  # e.g. an unclosed '[' of an IPv6 address
            raise InvalidParameter(
                f"{what} {location!r} is not a valid URL: write it as <scheme>://<authority>/<path>"
            ) from None
        scheme = parts.scheme.lower()
        if len(scheme) < 2:
            raise InvalidParameter(
                f"{what} {location!r} must be an absolute path or a URL such as s3://<bucket>/<path>"
            )
        if parts.query or parts.fragment:
            raise InvalidParameter(f"{what} {location!r} must not have a query ('?') or fragment ('#'): remove it")
        if scheme == "file":
            if parts.netloc not in ("", "localhost") or not parts.path.startswith("/"):
                raise InvalidParameter(
                    f"{what} {location!r} must be a local file URL: 'file://' and an absolute path, no host"
                )
            prefix, path = "file://", unquote(parts.path)
        else:
            if not parts.netloc:
                raise InvalidParameter(f"{what} {location!r} needs an authority: write {scheme}://<bucket>/<path>")
            prefix, path = f"{scheme}://{parts.netloc}", parts.path
    if _UNSTORABLE.search(unquote(path)):
        raise unstorable
    if ".." in path.split("/") or ".." in unquote(path).split("/"):
        raise InvalidParameter(f"{what} {location!r} must not contain a '..' segment: give the location itself")
    segments = [s for s in path.split("/") if s not in ("", ".")]
    if prefix == "file://" and (
        len(path.encode()) > _MAX_PATH_BYTES or any(len(s.encode()) > _MAX_SEGMENT_BYTES for s in segments)
    ):
        raise InvalidParameter(
            f"{what} is too long for a local path: at most {_MAX_SEGMENT_BYTES} bytes per folder name and "
            f"{_MAX_PATH_BYTES} in all"
        )
    return prefix + posixpath.join("/", *segments)


def _is_within(key: str, root_key: str) -> bool:
    """``key`` is ``root_key`` or below it, on a '/' boundary."""
    return key == root_key or key.startswith(root_key.rstrip("/") + "/")


# --- rows to values -------------------------------------------------------------------------------


def _catalog_info(row: Row[Any]) -> CatalogInfo:
    return CatalogInfo(row.name, row.comment, row.storage_root, row.created_at, row.updated_at)


def _schema_info(catalog_name: str, row: Row[Any]) -> SchemaInfo:
    return SchemaInfo(catalog_name, row.name, row.comment, row.created_at, row.updated_at)


def _table_info(catalog_name: str, schema_name: str, row: Row[Any]) -> TableInfo:
    return TableInfo(
        catalog_name,
        schema_name,
        row.name,
        row.storage_location,
        table_id=row.table_id,
        comment=row.comment,
        table_type=row.table_type,
        data_source_format=row.data_source_format,
        created_at=row.created_at,
        updated_at=row.updated_at,
    )


# --- lookups --------------------------------------------------------------------------------------


def catalog_row(tx: Tx, name: str) -> Row[Any]:
    check_name(name, "catalog", allow_dot=False)
    query = sa.select(_C).where(_C.c.name_lc == name_key(name))
    return one_row(tx, query, f"catalog '{name}' does not exist: create it first or check the name")


def schema_row(tx: Tx, catalog_name: str, name: str) -> tuple[Row[Any], Row[Any]]:
    """(catalog row, schema row)."""
    catalog = catalog_row(tx, catalog_name)
    check_name(name, "schema", allow_dot=False)
    query = sa.select(_S).where(_S.c.catalog_id == catalog.id, _S.c.name_lc == name_key(name))
    missing = f"schema '{catalog.name}.{name}' does not exist: create it first or check the name"
    return catalog, one_row(tx, query, missing)


def table_row(tx: Tx, catalog_name: str, schema_name: str, name: str) -> tuple[Row[Any], Row[Any], Row[Any]]:
    """(catalog row, schema row, table row)."""
    catalog, schema = schema_row(tx, catalog_name, schema_name)
    check_name(name, "table", allow_dot=False)
    query = sa.select(_T).where(_T.c.schema_id == schema.id, _T.c.name_lc == name_key(name))
    missing = f"table '{catalog.name}.{schema.name}.{name}' does not exist: create it first or check the name"
    return catalog, schema, one_row(tx, query, missing)


def _count(tx: Tx, table: sa.Table, where: sa.ColumnElement[bool]) -> int:
    return int(tx.conn.execute(sa.select(sa.func.count()).select_from(table).where(where)).scalar_one())


# --- catalogs -------------------------------------------------------------------------------------


def create_catalog(tx: Tx, name: str, comment: str | None, storage_root: str | None) -> CatalogInfo:
    check_name(name, "catalog", allow_dot=False)
    if storage_root is not None:
        location_key(storage_root, f"storage root of catalog '{name}'")
    values = dict(
        name=name,
        name_lc=name_key(name),
        comment=comment,
        storage_root=storage_root,
        created_at=tx.now_ms,
        updated_at=tx.now_ms,
    )
    conflict = f"catalog '{name}' already exists: choose another name or update it"
    if tx.conn.execute(sa.select(_C.c.id).where(_C.c.name_lc == values["name_lc"])).first() is not None:
        raise AlreadyExists(conflict)
    insert_row(tx, _C, values, conflict)
    return _catalog_info(catalog_row(tx, name))


def get_catalog(tx: Tx, name: str) -> CatalogInfo:
    return _catalog_info(catalog_row(tx, name))


def list_catalogs(tx: Tx) -> list[CatalogInfo]:
    rows = tx.conn.execute(sa.select(_C)).all()
    return [_catalog_info(row) for row in sorted(rows, key=lambda r: r.name_lc)]


def update_catalog(tx: Tx, name: str, new_name: str | None, comment: str | None) -> CatalogInfo:
    row = catalog_row(tx, name)
    values: dict[str, Any] = {"updated_at": tx.now_ms}
    if comment is not None:
        values["comment"] = comment
    if new_name is not None:
        check_name(new_name, "catalog", allow_dot=False)
        taken = sa.select(_C.c.id).where(_C.c.name_lc == name_key(new_name), _C.c.id != row.id)
        if tx.conn.execute(taken).first() is not None:
            raise AlreadyExists(f"catalog '{new_name}' already exists: choose another name")
        values.update(name=new_name, name_lc=name_key(new_name))
    conflict = f"catalog '{values.get('name', row.name)}' already exists: choose another name"
    write_unique(tx, sa.update(_C).where(_C.c.id == row.id).values(**values), conflict)
    return get_catalog(tx, values.get("name", row.name))


def delete_catalog(tx: Tx, name: str, force: bool) -> None:
    """Without ``force`` only an empty catalog goes; with it, its schemas, their tables and every
    share object naming any of them go too (foreign-key cascades)."""
    row = catalog_row(tx, name)
    schemas = _count(tx, _S, _S.c.catalog_id == row.id)
    if schemas and not force:
        raise InvalidParameter(
            f"catalog '{row.name}' is not empty ({schemas} schema(s)): delete them first or delete with force"
        )
    tx.conn.execute(sa.delete(_C).where(_C.c.id == row.id))


# --- schemas --------------------------------------------------------------------------------------


def create_schema(tx: Tx, catalog_name: str, name: str, comment: str | None) -> SchemaInfo:
    catalog = catalog_row(tx, catalog_name)
    check_name(name, "schema", allow_dot=False)
    conflict = f"schema '{catalog.name}.{name}' already exists: choose another name or update it"
    taken = sa.select(_S.c.id).where(_S.c.catalog_id == catalog.id, _S.c.name_lc == name_key(name))
    if tx.conn.execute(taken).first() is not None:
        raise AlreadyExists(conflict)
    values = dict(
        catalog_id=catalog.id,
        name=name,
        name_lc=name_key(name),
        comment=comment,
        created_at=tx.now_ms,
        updated_at=tx.now_ms,
    )
    insert_row(tx, _S, values, conflict)
    return get_schema(tx, f"{catalog.name}.{name}")


def get_schema(tx: Tx, full_name: str) -> SchemaInfo:
    catalog_name, name = split_name(full_name, ("catalog", "schema"))
    catalog, row = schema_row(tx, catalog_name, name)
    return _schema_info(catalog.name, row)


def list_schemas(tx: Tx, catalog_name: str) -> list[SchemaInfo]:
    catalog = catalog_row(tx, catalog_name)
    rows = tx.conn.execute(sa.select(_S).where(_S.c.catalog_id == catalog.id)).all()
    return [_schema_info(catalog.name, row) for row in sorted(rows, key=lambda r: r.name_lc)]


def update_schema(tx: Tx, full_name: str, new_name: str | None, comment: str | None) -> SchemaInfo:
    catalog_name, name = split_name(full_name, ("catalog", "schema"))
    catalog, row = schema_row(tx, catalog_name, name)
    values: dict[str, Any] = {"updated_at": tx.now_ms}
    if comment is not None:
        values["comment"] = comment
    if new_name is not None:
        check_name(new_name, "schema", allow_dot=False)
        taken = sa.select(_S.c.id).where(
            _S.c.catalog_id == catalog.id, _S.c.name_lc == name_key(new_name), _S.c.id != row.id
        )
        if tx.conn.execute(taken).first() is not None:
            raise AlreadyExists(f"schema '{catalog.name}.{new_name}' already exists: choose another name")
        values.update(name=new_name, name_lc=name_key(new_name))
    full_name = f"{catalog.name}.{values.get('name', row.name)}"
    write_unique(tx, sa.update(_S).where(_S.c.id == row.id).values(**values), f"schema '{full_name}' already exists")
    return get_schema(tx, full_name)


def delete_schema(tx: Tx, full_name: str, force: bool) -> None:
    """Without ``force`` only an empty schema goes; with it, its tables too. Share objects naming
    the schema or its tables go with them."""
    catalog_name, name = split_name(full_name, ("catalog", "schema"))
    catalog, row = schema_row(tx, catalog_name, name)
    tables = _count(tx, _T, _T.c.schema_id == row.id)
    if tables and not force:
        raise InvalidParameter(
            f"schema '{catalog.name}.{row.name}' is not empty ({tables} table(s)): delete them first or "
            "delete with force"
        )
    tx.conn.execute(sa.delete(_S).where(_S.c.id == row.id))


# --- tables ---------------------------------------------------------------------------------------


def _check_table_kind(table_type: str, data_source_format: str) -> tuple[str, str]:
    if not isinstance(table_type, str) or table_type.upper() != "EXTERNAL":
        raise InvalidParameter(f"table_type {table_type!r} is not supported: only EXTERNAL tables can be registered")
    if not isinstance(data_source_format, str) or data_source_format.upper() != "DELTA":
        raise InvalidParameter(f"data_source_format {data_source_format!r} is not supported: only DELTA is accepted")
    return "EXTERNAL", "DELTA"


def _check_location(tx: Tx, catalog: Row[Any], full_name: str, storage_location: str) -> str:
    """The location's key, once it is within the catalog's storage root (when it has one) and no
    other table has it."""
    key = location_key(storage_location, f"storage location of table '{full_name}'")
    if catalog.storage_root is not None and not _is_within(key, location_key(catalog.storage_root)):
        raise InvalidParameter(
            f"storage location of table '{full_name}' is outside the storage root of catalog '{catalog.name}': "
            "give a location under the catalog's storage root"
        )
    holder = tx.conn.execute(
        sa.select(_C.c.name.label("catalog_name"), _S.c.name.label("schema_name"), _T.c.name.label("table_name"))
        .select_from(_T.join(_S, _T.c.schema_id == _S.c.id).join(_C, _S.c.catalog_id == _C.c.id))
        .where(_T.c.location_key == key)
    ).first()
    if holder is not None:
        other = f"{holder.catalog_name}.{holder.schema_name}.{holder.table_name}"
        raise AlreadyExists(
            f"table '{other}' has that storage location already: two tables cannot share a location; "
            "register another location or use the existing table"
        )
    return key


def create_table(
    tx: Tx,
    catalog_name: str,
    schema_name: str,
    name: str,
    storage_location: str,
    *,
    comment: str | None,
    table_type: str,
    data_source_format: str,
    table_id: str | None = None,
) -> TableInfo:
    """A new EXTERNAL Delta table with ``table_id`` (default: a new uuid4). Whether the location holds a
    readable Delta table is for the caller to check (after :func:`check_new_table`)."""
    schema_id, full_name, key = check_new_table(
        tx, catalog_name, schema_name, name, storage_location, table_type, data_source_format
    )
    values = dict(
        schema_id=schema_id,
        name=name,
        name_lc=name_key(name),
        table_id=table_id or str(uuid.uuid4()),
        storage_location=storage_location,
        location_key=key,
        comment=comment,
        table_type="EXTERNAL",
        data_source_format="DELTA",
        created_at=tx.now_ms,
        updated_at=tx.now_ms,
    )
    insert_row(tx, _T, values, f"table '{full_name}' or another table at its location exists already: check both")
    return get_table(tx, full_name)


def check_new_table(
    tx: Tx,
    catalog_name: str,
    schema_name: str,
    name: str,
    storage_location: str,
    table_type: str = "EXTERNAL",
    data_source_format: str = "DELTA",
) -> tuple[int, str, str]:
    """(schema id, full name, location key) of a table that may be created as given: its schema
    exists, its name is valid and free, it is an EXTERNAL Delta table, and its location follows the
    rules (see :func:`_check_location`). Run before anything reads the location."""
    catalog, schema = schema_row(tx, catalog_name, schema_name)
    check_name(name, "table", allow_dot=False)
    _check_table_kind(table_type, data_source_format)
    full_name = f"{catalog.name}.{schema.name}.{name}"
    taken = sa.select(_T.c.id).where(_T.c.schema_id == schema.id, _T.c.name_lc == name_key(name))
    if tx.conn.execute(taken).first() is not None:
        raise AlreadyExists(f"table '{full_name}' already exists: choose another name, or delete it first")
    return schema.id, full_name, _check_location(tx, catalog, full_name, storage_location)


def get_table(tx: Tx, full_name: str) -> TableInfo:
    catalog_name, schema_name, name = split_name(full_name, ("catalog", "schema", "table"))
    catalog, schema, row = table_row(tx, catalog_name, schema_name, name)
    return _table_info(catalog.name, schema.name, row)


def list_tables(tx: Tx, catalog_name: str, schema_name: str) -> list[TableInfo]:
    catalog, schema = schema_row(tx, catalog_name, schema_name)
    rows = tx.conn.execute(sa.select(_T).where(_T.c.schema_id == schema.id)).all()
    return [_table_info(catalog.name, schema.name, row) for row in sorted(rows, key=lambda r: r.name_lc)]


def table_exists(tx: Tx, full_name: str) -> bool:
    catalog_name, schema_name, name = split_name(full_name, ("catalog", "schema", "table"))
    query = (
        sa.select(_T.c.id)
        .select_from(_T.join(_S, _T.c.schema_id == _S.c.id).join(_C, _S.c.catalog_id == _C.c.id))
        .where(
            _C.c.name_lc == name_key(catalog_name),
            _S.c.name_lc == name_key(schema_name),
            _T.c.name_lc == name_key(name),
        )
    )
    return tx.conn.execute(query).first() is not None


def delete_table(tx: Tx, full_name: str) -> None:
    """The table goes, and every share object naming it (a foreign-key cascade)."""
    catalog_name, schema_name, name = split_name(full_name, ("catalog", "schema", "table"))
    _, _, row = table_row(tx, catalog_name, schema_name, name)
    tx.conn.execute(sa.delete(_T).where(_T.c.id == row.id))

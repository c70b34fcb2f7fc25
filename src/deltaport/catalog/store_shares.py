"""Shares, their data objects and the grants on them, in the catalog database.

Invariants kept here (and backed by unique constraints): within a share a catalog table or schema
appears once, and no two objects have the same ``shared_as`` (compared without regard to case). A
TABLE object is shared as "schema.table" (defaulting to the catalog's own schema and table names),
a SCHEMA object as one name (defaulting to the schema's). An object refers to its catalog table or
schema by id, so a rename in the catalog shows in the object's ``name`` and its ``shared_as``
stays what recipients already know.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Row

from deltaport.catalog import db
from deltaport.catalog.model import Grant, ObjectType, PartitionOp, PartitionValue, SharedObject, ShareInfo
from deltaport.catalog.names import check_name, name_key, split_name
from deltaport.catalog.served import (
    DIR,
    SharedTableConfig,
    check_access_modes,
    check_auxiliary_locations,
    check_comment,
    check_display_name,
    check_properties,
    dir_access_refusal,
)
from deltaport.catalog.store_catalog import schema_row, table_row
from deltaport.catalog.store_recipients import recipient_row
from deltaport.catalog.store_sql import BIGINT_MAX, insert_row, one_row, write_unique
from deltaport.catalog.store_types import ObjectUpdate, PermissionChange, Tx
from deltaport.errors import AlreadyExists, InvalidParameter, ResourceNotFound

_SH, _SO, _G = db.shares, db.share_objects, db.grants
_C, _S, _T, _R = db.catalogs, db.catalog_schemas, db.catalog_tables, db.recipients
PRIVILEGES = ("SELECT",)

# --- partitions -----------------------------------------------------------------------------------


def _partition_op(op: object, where: str) -> PartitionOp:
    try:
        return PartitionOp(str(getattr(op, "value", op)).upper())
    except ValueError:
        raise InvalidParameter(f"partition op {op!r} in {where} is not supported: use EQUAL or LIKE") from None


def partitions_to_json(partitions: Iterable[Iterable[PartitionValue]], where: str) -> list[list[dict[str, Any]]]:
    """The partitions checked (each with at least one value; each value with a column name and
    exactly one of value / recipient_property_key) and in their stored form."""
    out = []
    for partition in partitions:
        values = []
        for v in partition:
            if not isinstance(v, PartitionValue) or not isinstance(v.name, str) or not v.name:
                raise InvalidParameter(f"a partition value in {where} needs a column name: give one")
            if (v.value is None) == (v.recipient_property_key is None):
                raise InvalidParameter(
                    f"partition value for column '{v.name}' in {where} needs exactly one of value and "
                    "recipient_property_key"
                )
            op = _partition_op(v.op, where).value
            values.append(
                {"name": v.name, "op": op, "value": v.value, "recipient_property_key": v.recipient_property_key}
            )
        if not values:
            raise InvalidParameter(f"a partition in {where} has no values: give at least one, or remove it")
        out.append(values)
    return out


def partitions_from_json(data: Sequence[Sequence[dict[str, Any]]]) -> tuple[tuple[PartitionValue, ...], ...]:
    return tuple(
        tuple(PartitionValue(v["name"], PartitionOp(v["op"]), v["value"], v["recipient_property_key"]) for v in part)
        for part in data
    )


# --- lookups and values ---------------------------------------------------------------------------


def share_row(tx: Tx, name: str) -> Row[Any]:
    check_name(name, "share", allow_dot=True)
    query = sa.select(_SH).where(_SH.c.name_lc == name_key(name))
    return one_row(tx, query, f"share '{name}' does not exist: create it first or check the name")


def _shared_object(row: Row[Any], name: str) -> SharedObject:
    return SharedObject(
        name=name,
        data_object_type=ObjectType(row.object_type),
        shared_as=row.shared_as,
        history_shared=row.history_shared,
        cdf_enabled=row.cdf_enabled,
        start_version=row.start_version,
        comment=row.comment,
        partitions=partitions_from_json(row.partitions),
        added_at=row.added_at,
        access_modes=tuple(row.access_modes),
        auxiliary_locations=tuple(row.auxiliary_locations),
    )


def _objects(tx: Tx, share_refs: Sequence[int] | None) -> dict[int, list[tuple[int, SharedObject]]]:
    """Objects of the given shares (of all when None) with their catalog names as of now, by share
    id, in the order they were added: (object id, object)."""
    names = (_C.c.name.label("c_name"), _S.c.name.label("s_name"))
    tables = (
        sa.select(_SO, *names, _T.c.name.label("t_name"))
        .select_from(_SO.join(_T, _SO.c.table_ref == _T.c.id).join(_S, _T.c.schema_id == _S.c.id))
        .join(_C, _S.c.catalog_id == _C.c.id)
    )
    schemas = sa.select(_SO, *names, sa.null().label("t_name")).select_from(
        _SO.join(_S, _SO.c.schema_ref == _S.c.id).join(_C, _S.c.catalog_id == _C.c.id)
    )
    if share_refs is not None:
        tables = tables.where(_SO.c.share_ref.in_(share_refs))
        schemas = schemas.where(_SO.c.share_ref.in_(share_refs))
    rows = sorted([*tx.conn.execute(tables), *tx.conn.execute(schemas)], key=lambda r: r.id)
    out: dict[int, list[tuple[int, SharedObject]]] = {}
    for row in rows:
        name = ".".join(n for n in (row.c_name, row.s_name, row.t_name) if n is not None)
        out.setdefault(row.share_ref, []).append((row.id, _shared_object(row, name)))
    return out


def _share_info(row: Row[Any], objects: Iterable[tuple[int, SharedObject]] = ()) -> ShareInfo:
    return ShareInfo(
        name=row.name,
        comment=row.comment,
        objects=tuple(obj for _, obj in objects),
        id=row.share_id,
        created_at=row.created_at,
        updated_at=row.updated_at,
        display_name=row.display_name,
        properties=dict(row.properties),
    )


# --- shares ---------------------------------------------------------------------------------------


def _metadata(name: str, comment: object, display_name: object, properties: object) -> dict[str, Any]:
    """The share's comment, display name and properties checked (the protocol's limits), as stored;
    a None left out (unchanged)."""
    where = f"share '{name}'"
    values: dict[str, Any] = {}
    if comment is not None:
        values["comment"] = check_comment(comment, where, "comment")
    if display_name is not None:
        values["display_name"] = check_display_name(display_name, where, "display_name")
    if properties is not None:
        values["properties"] = check_properties(properties, where, "properties")
    return values


def create_share(
    tx: Tx,
    name: str,
    comment: str | None,
    share_id: str | None = None,
    display_name: str | None = None,
    properties: Mapping[str, str] | None = None,
) -> ShareInfo:
    check_name(name, "share", allow_dot=True)
    metadata = {"properties": {}, **_metadata(name, comment, display_name, properties)}
    conflict = f"share '{name}' already exists: choose another name or update it"
    if tx.conn.execute(sa.select(_SH.c.id).where(_SH.c.name_lc == name_key(name))).first() is not None:
        raise AlreadyExists(conflict)
    values = dict(
        share_id=share_id or str(uuid.uuid4()),
        name=name,
        name_lc=name_key(name),
        created_at=tx.now_ms,
        updated_at=tx.now_ms,
        **metadata,
    )
    insert_row(tx, _SH, values, conflict)
    return get_share(tx, name, include_objects=False)


def get_share(tx: Tx, name: str, *, include_objects: bool) -> ShareInfo:
    row = share_row(tx, name)
    return _share_info(row, _objects(tx, [row.id]).get(row.id, ()) if include_objects else ())


def list_shares(tx: Tx, *, include_objects: bool) -> list[ShareInfo]:
    """Every share, sorted by name without regard to case; with objects, in two more queries."""
    objects = _objects(tx, None) if include_objects else {}
    rows = sorted(tx.conn.execute(sa.select(_SH)).all(), key=lambda r: r.name_lc)
    return [_share_info(row, objects.get(row.id, ())) for row in rows]


def delete_share(tx: Tx, name: str) -> None:
    """The share goes with its objects and grants (foreign-key cascades)."""
    tx.conn.execute(sa.delete(_SH).where(_SH.c.id == share_row(tx, name).id))


def update_share(
    tx: Tx,
    name: str,
    *,
    new_name: str | None,
    comment: str | None,
    updates: Sequence[ObjectUpdate],
    display_name: str | None = None,
    properties: Mapping[str, str] | None = None,
) -> ShareInfo:
    """Rename, comment, display name, properties (each None: unchanged; an empty display name or
    properties: none) and object changes, applied in order inside the caller's one transaction:
    the first failing change fails the call and nothing of it stays."""
    row = share_row(tx, name)
    values: dict[str, Any] = {"updated_at": tx.now_ms, **_metadata(row.name, comment, display_name, properties)}
    if new_name is not None:
        check_name(new_name, "share", allow_dot=True)
        taken = sa.select(_SH.c.id).where(_SH.c.name_lc == name_key(new_name), _SH.c.id != row.id)
        if tx.conn.execute(taken).first() is not None:
            raise AlreadyExists(f"share '{new_name}' already exists: choose another name")
        values.update(name=new_name, name_lc=name_key(new_name))
    conflict = f"share '{values.get('name', row.name)}' already exists: choose another name"
    write_unique(tx, sa.update(_SH).where(_SH.c.id == row.id).values(**values), conflict)
    share_name = values.get("name", row.name)
    for update in updates:
        action = str(getattr(update, "action", "")).upper()
        if action == "ADD":
            _add(tx, row.id, share_name, update.data_object)
        elif action in ("REMOVE", "UPDATE"):
            object_id, current = _find(tx, row.id, share_name, update.data_object.name)
            if action == "REMOVE":
                tx.conn.execute(sa.delete(_SO).where(_SO.c.id == object_id))
            else:
                _update(tx, row.id, share_name, object_id, current, update.data_object)
        else:
            raise InvalidParameter(f"data object action {action!r} is not supported: use ADD, REMOVE or UPDATE")
    return get_share(tx, share_name, include_objects=True)


# --- share objects --------------------------------------------------------------------------------


def _object_type(value: object) -> ObjectType:
    try:
        return ObjectType(str(getattr(value, "value", value)).upper())
    except ValueError:
        raise InvalidParameter(f"data object type {value!r} is not supported: use TABLE or SCHEMA") from None


def _check_shared_as(shared_as: str, kind: ObjectType, where: str) -> str:
    """``shared_as`` itself when it is "schema.table" (a TABLE) or one name (a SCHEMA)."""
    shape = "'schema.table'" if kind is ObjectType.TABLE else "one name"
    message = (
        f"shared_as {shared_as!r} of {where} is invalid: write it as {shape}, each name at most 255 "
        "characters with no spaces, '/', '.' or control characters"
    )
    parts = shared_as.split(".") if isinstance(shared_as, str) else []
    if len(parts) != (2 if kind is ObjectType.TABLE else 1):
        raise InvalidParameter(message)
    for part in parts:
        check_name(part, "shared_as", allow_dot=False, error=lambda _: InvalidParameter(message))
    return shared_as


def _settings(obj: SharedObject, kind: ObjectType, where: str, locations: Sequence[str]) -> dict[str, Any]:
    """The object's settings checked, as stored. ``locations``: the storage locations of its table
    (a TABLE) or of the tables its schema has now (a SCHEMA), each checked for directory access
    when the object asks for it."""
    version = obj.start_version
    if not isinstance(version, int) or isinstance(version, bool) or not 0 <= version <= BIGINT_MAX:
        raise InvalidParameter(f"start_version of {where} must be a version number, 0 to {BIGINT_MAX}")
    if kind is ObjectType.SCHEMA and obj.partitions:
        raise InvalidParameter(f"{where} is a schema: partitions apply to tables only; share the tables instead")
    if kind is ObjectType.SCHEMA and obj.auxiliary_locations:
        raise InvalidParameter(
            f"{where} is a schema: auxiliary_locations apply to tables only; share the tables instead"
        )
    modes = check_access_modes(obj.access_modes, where, "access_modes")
    auxiliary = check_auxiliary_locations(
        obj.auxiliary_locations, locations[0] if locations else "", where, "auxiliary_locations"
    )
    if DIR in modes:
        for location in locations:
            table = SharedTableConfig(
                "",
                location,
                history_shared=bool(obj.history_shared),
                partitions=obj.partitions,
                auxiliary_locations=auxiliary,
            )
            refusal = dir_access_refusal(table)
            if refusal:
                raise InvalidParameter(f"access_modes of {where} has 'dir', but {refusal}")
    return dict(
        history_shared=bool(obj.history_shared),
        cdf_enabled=bool(obj.cdf_enabled),
        start_version=obj.start_version,
        comment=obj.comment,
        partitions=partitions_to_json(obj.partitions, where),
        access_modes=list(modes),
        auxiliary_locations=list(auxiliary),
    )


def _locations(tx: Tx, kind: ObjectType, ref: int) -> list[str]:
    """The storage location of a TABLE object's table, or of each table a SCHEMA object's schema has."""
    column = _T.c.id if kind is ObjectType.TABLE else _T.c.schema_id
    return list(tx.conn.execute(sa.select(_T.c.storage_location).where(column == ref).order_by(_T.c.id)).scalars())


def _check_shared_as_free(tx: Tx, share_ref: int, share_name: str, shared_as: str, except_id: int | None) -> None:
    taken = sa.select(_SO.c.id).where(_SO.c.share_ref == share_ref, _SO.c.shared_as_lc == name_key(shared_as))
    if except_id is not None:
        taken = taken.where(_SO.c.id != except_id)
    if tx.conn.execute(taken).first() is not None:
        raise AlreadyExists(
            f"share '{share_name}' already has a data object shared as '{shared_as}': give this one another shared_as"
        )


def _add(tx: Tx, share_ref: int, share_name: str, obj: SharedObject) -> None:
    kind = _object_type(obj.data_object_type)
    if kind is ObjectType.TABLE:
        catalog, schema, table = table_row(tx, *split_name(obj.name, ("catalog", "schema", "table")))
        full, ref_column, ref = f"{catalog.name}.{schema.name}.{table.name}", "table_ref", table.id
        default_as = f"{schema.name}.{table.name}"
    else:
        catalog, schema = schema_row(tx, *split_name(obj.name, ("catalog", "schema")))
        full, ref_column, ref, default_as = f"{catalog.name}.{schema.name}", "schema_ref", schema.id, schema.name
    where = f"{kind.value.lower()} '{full}' in share '{share_name}'"
    settings = _settings(obj, kind, where, _locations(tx, kind, ref))
    shared_as = _check_shared_as(obj.shared_as or default_as, kind, where)
    present = sa.select(_SO.c.id).where(_SO.c.share_ref == share_ref, _SO.c[ref_column] == ref)
    if tx.conn.execute(present).first() is not None:
        raise AlreadyExists(f"{kind.value.lower()} '{full}' is already in share '{share_name}': update it instead")
    _check_shared_as_free(tx, share_ref, share_name, shared_as, None)
    values = dict(
        share_ref=share_ref,
        object_type=kind.value,
        shared_as=shared_as,
        shared_as_lc=name_key(shared_as),
        added_at=tx.now_ms,
        **{ref_column: ref},
        **settings,
    )
    insert_row(tx, _SO, values, f"{where} collides with an object of the share added concurrently: try again")


def _find(tx: Tx, share_ref: int, share_name: str, name: str) -> tuple[int, SharedObject]:
    for object_id, obj in _objects(tx, [share_ref]).get(share_ref, ()):
        if isinstance(name, str) and name_key(obj.name) == name_key(name):
            return object_id, obj
    raise ResourceNotFound(
        f"share '{share_name}' has no data object '{name}': check the name against the share's objects"
    )


def _update(tx: Tx, share_ref: int, share_name: str, object_id: int, current: SharedObject, new: SharedObject) -> None:
    kind = current.data_object_type
    where = f"{kind.value.lower()} '{current.name}' in share '{share_name}'"
    row = tx.conn.execute(sa.select(_SO.c.table_ref, _SO.c.schema_ref).where(_SO.c.id == object_id)).one()
    settings = _settings(new, kind, where, _locations(tx, kind, row.table_ref or row.schema_ref))
    shared_as = _check_shared_as(new.shared_as or current.shared_as, kind, where)
    if name_key(shared_as) != name_key(current.shared_as):
        _check_shared_as_free(tx, share_ref, share_name, shared_as, object_id)
    statement = (
        sa.update(_SO)
        .where(_SO.c.id == object_id)
        .values(shared_as=shared_as, shared_as_lc=name_key(shared_as), **settings)
    )
    write_unique(tx, statement, f"share '{share_name}' already has a data object shared as '{shared_as}'")


# --- grants ---------------------------------------------------------------------------------------


def _privileges(values: Iterable[str], share_name: str) -> set[str]:
    out = set()
    for privilege in values:
        if not isinstance(privilege, str) or privilege.upper() not in PRIVILEGES:
            raise InvalidParameter(
                f"privilege {privilege!r} on share '{share_name}' is not supported: SELECT is the only privilege"
            )
        out.add(privilege.upper())
    return out


def update_permissions(tx: Tx, share_name: str, changes: Sequence[PermissionChange]) -> list[Grant]:
    """Grant and revoke in order; granting what is granted or revoking what is not is a no-op."""
    share = share_row(tx, share_name)
    for change in changes:
        recipient = recipient_row(tx, change.principal)
        add, remove = _privileges(change.add, share.name), _privileges(change.remove, share.name)
        if add & remove:
            raise InvalidParameter(
                f"recipient '{recipient.name}' is both granted and revoked {sorted(add & remove)} on share "
                f"'{share.name}': give each privilege once"
            )
        mine = sa.and_(_G.c.share_ref == share.id, _G.c.recipient_ref == recipient.id)
        held = set(tx.conn.execute(sa.select(_G.c.privilege).where(mine)).scalars())
        for privilege in sorted(add - held):
            insert = sa.insert(_G).values(share_ref=share.id, recipient_ref=recipient.id, privilege=privilege)
            write_unique(tx, insert, f"the grant on share '{share.name}' changed concurrently: try again")
        if remove:
            tx.conn.execute(sa.delete(_G).where(mine, _G.c.privilege.in_(sorted(remove))))
    return share_permissions(tx, share.name)


def _grants(tx: Tx, where: sa.ColumnElement[bool]) -> list[Grant]:
    rows = tx.conn.execute(
        sa.select(_SH.c.name.label("share"), _SH.c.name_lc.label("s_lc"), _R.c.name.label("recipient"))
        .add_columns(_R.c.name_lc.label("r_lc"), _G.c.privilege)
        .select_from(_G.join(_SH, _G.c.share_ref == _SH.c.id).join(_R, _G.c.recipient_ref == _R.c.id))
        .where(where)
    ).all()
    privileges: dict[tuple[str, str, str, str], set[str]] = {}
    for row in rows:
        privileges.setdefault((row.s_lc, row.r_lc, row.share, row.recipient), set()).add(row.privilege)
    return [Grant(key[2], key[3], tuple(sorted(p))) for key, p in sorted(privileges.items())]


def share_permissions(tx: Tx, share_name: str) -> list[Grant]:
    """The grants on a share, by recipient name without regard to case."""
    return _grants(tx, _G.c.share_ref == share_row(tx, share_name).id)


def recipient_permissions(tx: Tx, recipient_name: str) -> list[Grant]:
    """A recipient's grants, by share name without regard to case."""
    return _grants(tx, _G.c.recipient_ref == recipient_row(tx, recipient_name).id)

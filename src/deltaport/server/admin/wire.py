"""Unity Catalog's JSON shapes for the admin API: the one place catalog values become response
bodies (snake_case keys, times in epoch ms, absent values left out, as the Databricks SDK reads them).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import orjson

from deltaport.catalog.model import (
    CatalogInfo,
    Grant,
    ObjectType,
    RecipientInfo,
    RecipientToken,
    SchemaInfo,
    SharedObject,
    ShareInfo,
    TableInfo,
)
from deltaport.delta.schema import Schema


def _present(d: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in d.items() if v is not None}


def catalog_json(c: CatalogInfo) -> dict[str, Any]:
    return _present(
        {
            "name": c.name,
            "full_name": c.name,
            "comment": c.comment,
            "storage_root": c.storage_root,
            "catalog_type": "MANAGED_CATALOG",
            "created_at": c.created_at,
            "updated_at": c.updated_at,
        }
    )


def schema_json(s: SchemaInfo) -> dict[str, Any]:
    return _present(
        {
            "name": s.name,
            "catalog_name": s.catalog_name,
            "full_name": s.full_name,
            "comment": s.comment,
            "created_at": s.created_at,
            "updated_at": s.updated_at,
        }
    )


_TYPE_NAMES = {
    "integer": "INT",
    "long": "LONG",
    "short": "SHORT",
    "byte": "BYTE",
    "float": "FLOAT",
    "double": "DOUBLE",
    "boolean": "BOOLEAN",
    "string": "STRING",
    "binary": "BINARY",
    "date": "DATE",
    "timestamp": "TIMESTAMP",
    "timestamp_ntz": "TIMESTAMP_NTZ",
    "variant": "VARIANT",
}


def _type_name(t: Any) -> str:
    if isinstance(t, dict):
        return str(t.get("type", "struct")).upper()
    text = str(t)
    return "DECIMAL" if text.startswith("decimal") else _TYPE_NAMES.get(text, text.upper())


def columns_json(schema: Schema, partition_columns: Iterable[str]) -> list[dict[str, Any]]:
    """The table's columns as Unity Catalog describes them, from its Delta schema."""
    partitions = [p.lower() for p in partition_columns]
    out = []
    for position, f in enumerate(schema.fields):
        raw = {"name": f.name, "type": f.type, "nullable": f.nullable, "metadata": dict(f.metadata)}
        out.append(
            _present(
                {
                    "name": f.name,
                    "type_name": _type_name(f.type),
                    "type_text": f.type if isinstance(f.type, str) else _type_name(f.type).lower(),
                    "type_json": orjson.dumps(raw).decode(),
                    "position": position,
                    "nullable": f.nullable,
                    "partition_index": partitions.index(f.name.lower()) if f.name.lower() in partitions else None,
                    "comment": f.metadata.get("comment"),
                }
            )
        )
    return out


def table_json(t: TableInfo, columns: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return _present(
        {
            "name": t.name,
            "catalog_name": t.catalog_name,
            "schema_name": t.schema_name,
            "full_name": t.full_name,
            "table_type": t.table_type,
            "data_source_format": t.data_source_format,
            "storage_location": t.storage_location,
            "table_id": t.table_id,
            "comment": t.comment,
            "columns": columns,
            "created_at": t.created_at,
            "updated_at": t.updated_at,
        }
    )


def object_json(o: SharedObject) -> dict[str, Any]:
    partitions = [
        {
            "values": [
                _present(
                    {
                        "name": v.name,
                        "op": v.op.value,
                        "value": v.value,
                        "recipient_property_key": v.recipient_property_key,
                    }
                )
                for v in partition
            ]
        }
        for partition in o.partitions
    ]
    return _present(
        {
            "name": o.name,
            "data_object_type": o.data_object_type.value,
            "shared_as": o.shared_as or None,
            "history_data_sharing_status": "ENABLED" if o.history_shared else "DISABLED",
            "cdf_enabled": o.cdf_enabled if o.data_object_type is ObjectType.TABLE else None,
            "start_version": o.start_version if o.data_object_type is ObjectType.TABLE else None,
            "comment": o.comment,
            "partitions": partitions or None,
            "added_at": o.added_at,
            "status": "ACTIVE",
            "access_modes": list(o.access_modes),
            "auxiliary_locations": list(o.auxiliary_locations) or None,
        }
    )


def share_json(s: ShareInfo, *, with_objects: bool = False) -> dict[str, Any]:
    return _present(
        {
            "name": s.name,
            "comment": s.comment,
            "display_name": s.display_name,
            "properties": dict(s.properties) or None,
            "objects": [object_json(o) for o in s.objects] if with_objects else None,
            "created_at": s.created_at,
            "updated_at": s.updated_at,
        }
    )


def _token_json(t: RecipientToken, link: str | None) -> dict[str, Any]:
    return _present(
        {
            "id": t.id,
            "created_at": t.created_at,
            "expiration_time": t.expiration_time,
            "activation_url": link,
            "updated_at": t.activated_at or t.created_at,
        }
    )


def recipient_json(r: RecipientInfo, *, links: Mapping[str, str] | None = None) -> dict[str, Any]:
    """A recipient; ``links`` (token id -> activation URL) are its tokens' links not yet used: each
    token shows its own, the recipient the newest one's (as Unity Catalog: empty once used)."""
    links = links or {}
    tokens = [_token_json(t, links.get(t.id)) for t in r.tokens]
    newest = max((t for t in r.tokens if t.id in links), key=lambda t: t.created_at, default=None)
    return _present(
        {
            "name": r.name,
            "id": r.id,
            "comment": r.comment,
            "authentication_type": r.authentication_type,
            "activated": r.activated,
            "activation_url": links[newest.id] if newest is not None else None,
            "expiration_time": r.expiration_time,
            "ip_access_list": {"allowed_ip_addresses": list(r.allowed_ip_addresses)}
            if r.allowed_ip_addresses
            else None,
            "properties_kvpairs": {"properties": dict(r.properties)} if r.properties else None,
            "tokens": tokens,
            "created_at": r.created_at,
            "updated_at": r.updated_at,
        }
    )


def share_grants_json(grants: Iterable[Grant]) -> dict[str, Any]:
    return {"privilege_assignments": [{"principal": g.recipient, "privileges": list(g.privileges)} for g in grants]}


def recipient_grants_json(grants: Iterable[Grant]) -> dict[str, Any]:
    return {
        "permissions_out": [
            {
                "share_name": g.share,
                "privilege_assignments": [{"principal": g.recipient, "privileges": list(g.privileges)}],
            }
            for g in grants
        ]
    }

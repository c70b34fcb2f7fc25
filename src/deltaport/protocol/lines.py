"""NDJSON response lines, in the parquet and the delta response formats.

Builders take plain dicts (the Delta log's actions as dicts) and return one serialised line each,
ready to stream. Optional fields are omitted when None, as the reference server does.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import orjson

NDJSON = "application/x-ndjson; charset=utf-8"
VERSION_HEADER = "Delta-Table-Version"


def line(obj: Mapping[str, Any]) -> bytes:
    return orjson.dumps(obj) + b"\n"


def _compact(d: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in d.items() if v is not None}


# --- parquet format -------------------------------------------------------------------------


def placement(
    access_modes: Sequence[str], location: str | None = None, auxiliary_locations: Sequence[str] = ()
) -> dict[str, Any]:
    """Where a table is and how it may be read, as table listings and metaData lines carry it:
    ``location`` only with ``dir`` access (credentials for it can be had), ``auxiliaryLocations``
    only when there are some."""
    out: dict[str, Any] = {}
    if location is not None:
        out["location"] = location
        if auxiliary_locations:
            out["auxiliaryLocations"] = list(auxiliary_locations)
    out["accessModes"] = list(access_modes)
    return out


def protocol_parquet() -> bytes:
    return line({"protocol": {"minReaderVersion": 1}})


def clean_schema_for_parquet(schema: Mapping[str, Any]) -> dict[str, Any]:
    """Top-level field metadata stripped to ``comment`` only, as parquet-format clients expect."""
    fields = []
    for f in schema.get("fields", []):
        meta = f.get("metadata") or {}
        fields.append({**f, "metadata": {"comment": meta["comment"]} if "comment" in meta else {}})
    return {**schema, "fields": fields}


def metadata_parquet(
    *,
    id: str,
    schema_string: str,
    partition_columns: Sequence[str],
    configuration: Mapping[str, str],
    name: str | None = None,
    description: str | None = None,
    version: int | None = None,
    size: int | None = None,
    num_files: int | None = None,
    placement: Mapping[str, Any] | None = None,
) -> bytes:
    """``placement``: the table's ``location``, ``auxiliaryLocations`` and ``accessModes``
    (:func:`placement`), last in the line."""
    return line(
        {
            "metaData": _compact(
                {
                    "id": id,
                    "name": name,
                    "description": description,
                    "format": {"provider": "parquet"},
                    "schemaString": schema_string,
                    "partitionColumns": list(partition_columns),
                    "configuration": dict(configuration),
                    "version": version,
                    "size": size,
                    "numFiles": num_files,
                    **(placement or {}),
                }
            )
        }
    )


Kind = Literal["string", "number", "object"]


@dataclass(frozen=True)
class WireField:
    """One field of a line: its wire name, the builder's keyword for its value, how the value is
    rendered (a JSON string, number or object of strings) and whether it is left out when None."""

    name: str
    key: str
    kind: Kind
    optional: bool = False


#: The fields of a parquet-format file line (``file``, ``add``, ``remove``, ``cdf``), in wire order:
#: the one spelling of that line, read by both of its builders, :func:`file_parquet` (per row) and
#: the column-wise one (``server/fast/columnar_lines.py``). The first field must be required (the
#: column-wise builder writes a comma before each later field). ``stats`` is the log's JSON text,
#: sent as a JSON string.
FILE_FIELDS: tuple[WireField, ...] = (
    WireField("url", "url", "string"),
    WireField("id", "id", "string"),
    WireField("partitionValues", "partition_values", "object"),
    WireField("size", "size", "number"),
    WireField("stats", "stats", "string", optional=True),
    WireField("expirationTimestamp", "expiration_timestamp", "number", optional=True),
    WireField("version", "version", "number", optional=True),
    WireField("timestamp", "timestamp", "number", optional=True),
)


def fields_object(fields: Sequence[WireField], values: Mapping[str, Any]) -> dict[str, Any]:
    """The JSON object of ``fields`` in order, each from ``values[field.key]``; an optional field
    whose value is None is left out, a required one is ``null``."""
    out: dict[str, Any] = {}
    for f in fields:
        value = values[f.key]
        if value is None:
            if not f.optional:
                out[f.name] = None
        else:
            out[f.name] = dict(value) if f.kind == "object" else value
    return out


def file_parquet(
    kind: str,
    *,
    url: str,
    id: str,
    partition_values: Mapping[str, Any],
    size: int,
    stats: str | None = None,
    expiration_timestamp: int | None = None,
    version: int | None = None,
    timestamp: int | None = None,
) -> bytes:
    """A ``file`` (snapshot), ``add``, ``remove`` or ``cdf`` line (streaming and change data feed),
    with the fields of :data:`FILE_FIELDS`."""
    values = {
        "url": url,
        "id": id,
        "partition_values": partition_values,
        "size": size,
        "stats": stats,
        "expiration_timestamp": expiration_timestamp,
        "version": version,
        "timestamp": timestamp,
    }
    return line({kind: fields_object(FILE_FIELDS, values)})


# --- delta format ---------------------------------------------------------------------------


def protocol_delta(protocol: Mapping[str, Any], *, version: int | None = None) -> bytes:
    return line({"protocol": _compact({"deltaProtocol": dict(protocol), "version": version})})


def metadata_delta(
    delta_metadata: Mapping[str, Any],
    *,
    version: int | None = None,
    size: int | None = None,
    num_files: int | None = None,
    placement: Mapping[str, Any] | None = None,
) -> bytes:
    """``placement`` as in :func:`metadata_parquet`: beside ``deltaMetadata``, not inside it."""
    return line(
        {
            "metaData": _compact(
                {
                    "deltaMetadata": dict(delta_metadata),
                    "version": version,
                    "size": size,
                    "numFiles": num_files,
                    **(placement or {}),
                }
            )
        }
    )


def file_delta(
    kind: str,
    action: Mapping[str, Any],
    *,
    id: str,
    version: int | None = None,
    timestamp: int | None = None,
    expiration_timestamp: int | None = None,
    deletion_vector_file_id: str | None = None,
) -> bytes:
    """A file line wrapping a Delta single action (``add``, ``remove`` or ``cdc``)."""
    return line(
        {
            "file": _compact(
                {
                    "id": id,
                    "deletionVectorFileId": deletion_vector_file_id,
                    "version": version,
                    "timestamp": timestamp,
                    "expirationTimestamp": expiration_timestamp,
                    "deltaSingleAction": {kind: dict(action)},
                }
            )
        }
    )


# --- both -----------------------------------------------------------------------------------


def end_stream(
    *,
    refresh_token: str | None = None,
    next_page_token: str | None = None,
    min_url_expiration_timestamp: int | None = None,
    error_message: str | None = None,
) -> bytes:
    return line(
        {
            "endStreamAction": _compact(
                {
                    "refreshToken": refresh_token,
                    "nextPageToken": next_page_token,
                    "minUrlExpirationTimestamp": min_url_expiration_timestamp,
                    "errorMessage": error_message,
                }
            )
        }
    )


def error_body(error_code: str, message: str) -> bytes:
    return orjson.dumps({"errorCode": error_code, "message": message})

"""A shared table's schema on the recipient side: Delta types → Arrow, column mapping, partition values.

:class:`TableInfo` is what a reader needs to turn downloaded parquet files into rows of the
table: the logical Arrow schema (``timestamp`` → ``timestamp('us', tz='UTC')``,
``timestamp_ntz`` → ``timestamp('us')``, ``decimal(p,s)`` → ``decimal128(p, s)``, ...), the
physical name of every column (``delta.columnMapping.physicalName`` when column mapping is on;
data files, partition values and stats use it), and which columns are partition columns.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any

import orjson
import pyarrow as pa

from deltaport.client.model import Metadata, Protocol
from deltaport.errors import UnsupportedTableFeature

__all__ = [
    "CHANGE_COLUMNS",
    "SUPPORTED_READER_FEATURES",
    "ColumnSpec",
    "TableInfo",
    "delta_to_arrow",
    "parse_partition_value",
]

PHYSICAL_NAME_KEY = "delta.columnMapping.physicalName"
COLUMN_MAPPING_MODE_KEY = "delta.columnMapping.mode"
UTC_US = pa.timestamp("us", tz="UTC")
NTZ_US = pa.timestamp("us")

#: the change-feed columns appended to the table's columns, with their Arrow types
CHANGE_COLUMNS = (("_change_type", pa.string()), ("_commit_version", pa.int64()), ("_commit_timestamp", pa.int64()))

#: reader features this client reads (others make the table unreadable, and are named in the error)
SUPPORTED_READER_FEATURES = frozenset(
    {
        "deletionVectors",
        "columnMapping",
        "timestampNtz",
        "v2Checkpoint",
        "vacuumProtocolCheck",
        "typeWidening",
        "typeWidening-preview",
        "domainMetadata",
        "rowTracking",
        "checkpointProtection",
        "inCommitTimestamp",
        "changeDataFeed",
        "appendOnly",
        "invariants",
        "checkConstraints",
        "generatedColumns",
        "identityColumns",
        "icebergCompatV1",
        "icebergCompatV2",
        "materializePartitionColumns",
        "clustering",
        "allowColumnDefaults",
    }
)

_PRIMITIVES: dict[str, pa.DataType] = {
    "string": pa.string(),
    "long": pa.int64(),
    "integer": pa.int32(),
    "int": pa.int32(),
    "short": pa.int16(),
    "byte": pa.int8(),
    "float": pa.float32(),
    "double": pa.float64(),
    "boolean": pa.bool_(),
    "binary": pa.binary(),
    "date": pa.date32(),
    "timestamp": UTC_US,
    "timestamp_ntz": NTZ_US,
    "void": pa.null(),
}
_DECIMAL = re.compile(r"^decimal\(\s*(\d+)\s*,\s*(\d+)\s*\)$")


def delta_to_arrow(delta_type: Any, *, mapping: bool = False) -> tuple[pa.DataType, pa.DataType]:
    """(logical, physical) Arrow types of a Delta type; they differ only in nested struct field names."""
    if isinstance(delta_type, str):
        if delta_type in _PRIMITIVES:
            t = _PRIMITIVES[delta_type]
            return t, t
        if delta_type == "decimal":
            t = pa.decimal128(10, 0)
            return t, t
        m = _DECIMAL.match(delta_type)
        if m:
            precision, scale = int(m.group(1)), int(m.group(2))
            t = pa.decimal128(precision, scale) if precision <= 38 else pa.decimal256(precision, scale)
            return t, t
        raise UnsupportedTableFeature(
            f"the table has a column of type {delta_type!r}, which this client cannot "
            "read; ask the data provider to share a view without it",
            features=[delta_type],
        )
    if not isinstance(delta_type, Mapping) or "type" not in delta_type:
        raise UnsupportedTableFeature(f"cannot read the Delta type {delta_type!r}")
    kind = delta_type["type"]
    if kind == "struct":
        logical, physical = [], []
        for f in delta_type.get("fields", ()):
            lt, pt = delta_to_arrow(f["type"], mapping=mapping)
            nullable = bool(f.get("nullable", True))
            logical.append(pa.field(f["name"], lt, nullable))
            physical.append(pa.field(_physical_name(f, mapping), pt, nullable))
        return pa.struct(logical), pa.struct(physical)
    if kind == "array":
        lt, pt = delta_to_arrow(delta_type["elementType"], mapping=mapping)
        nullable = bool(delta_type.get("containsNull", True))
        return pa.list_(pa.field("element", lt, nullable)), pa.list_(pa.field("element", pt, nullable))
    if kind == "map":
        lk, pk = delta_to_arrow(delta_type["keyType"], mapping=mapping)
        lv, pv = delta_to_arrow(delta_type["valueType"], mapping=mapping)
        nullable = bool(delta_type.get("valueContainsNull", True))
        return (pa.map_(lk, pa.field("value", lv, nullable)), pa.map_(pk, pa.field("value", pv, nullable)))
    raise UnsupportedTableFeature(
        f"the table has a column of type {kind!r}, which this client cannot read", features=[str(kind)]
    )


def _physical_name(f: Mapping[str, Any], mapping: bool) -> str:
    if mapping:
        name = (f.get("metadata") or {}).get(PHYSICAL_NAME_KEY)
        if isinstance(name, str) and name:
            return name
    return f["name"]


@dataclass(frozen=True)
class ColumnSpec:
    """One top-level column: logical and physical names and types."""

    name: str
    physical_name: str
    type: pa.DataType
    physical_type: pa.DataType
    nullable: bool
    is_partition: bool


@dataclass(frozen=True, eq=False)
class TableInfo:
    """What a reader needs to know about a shared table (see the module docstring)."""

    arrow_schema: pa.Schema
    partition_columns: tuple[str, ...]
    schema_json: Mapping[str, Any]
    format: str
    version: int | None
    columns: tuple[ColumnSpec, ...]
    column_mapping_mode: str
    metadata: Metadata
    protocol: Protocol

    @classmethod
    def from_metadata(
        cls, metadata: Metadata, protocol: Protocol, *, format: str, version: int | None = None
    ) -> TableInfo:
        check_reader_features(protocol)
        try:
            schema_json = orjson.loads(metadata.schema_string or "")
        except orjson.JSONDecodeError as exc:
            raise UnsupportedTableFeature(f"the table's schemaString is not JSON ({exc})") from None
        mode = (metadata.configuration.get(COLUMN_MAPPING_MODE_KEY) or "none").lower()
        mapping = mode in ("name", "id")
        partitions = tuple(metadata.partition_columns)
        lowered = {p.lower() for p in partitions}
        columns = []
        for f in schema_json.get("fields", ()):
            logical, physical = delta_to_arrow(f["type"], mapping=mapping)
            columns.append(
                ColumnSpec(
                    f["name"],
                    _physical_name(f, mapping),
                    logical,
                    physical,
                    bool(f.get("nullable", True)),
                    f["name"].lower() in lowered,
                )
            )
        missing = lowered - {c.name.lower() for c in columns}
        if missing:
            raise UnsupportedTableFeature(f"partition column(s) {sorted(missing)} are not in the table schema")
        arrow_schema = pa.schema([pa.field(c.name, c.type, c.nullable) for c in columns])
        return cls(arrow_schema, partitions, schema_json, format, version, tuple(columns), mode, metadata, protocol)

    @property
    def change_schema(self) -> pa.Schema:
        """The table's schema plus ``_change_type``, ``_commit_version`` and ``_commit_timestamp``."""
        schema = self.arrow_schema
        for name, typ in CHANGE_COLUMNS:
            schema = schema.append(pa.field(name, typ))
        return schema

    def column(self, name: str) -> ColumnSpec:
        for c in self.columns:
            if c.name == name:
                return c
        lowered = name.lower()
        for c in self.columns:
            if c.name.lower() == lowered:
                return c
        raise KeyError(f"no column {name!r} in the table; columns are {[c.name for c in self.columns]}")


def check_reader_features(protocol: Protocol) -> None:
    features = set(protocol.reader_features or ())
    unsupported = sorted(features - SUPPORTED_READER_FEATURES)
    if unsupported:
        raise UnsupportedTableFeature(
            f"the table uses reader feature(s) {', '.join(unsupported)} that this client "
            "cannot read; ask the data provider to share a copy without them",
            features=unsupported,
        )
    if protocol.reader_features is None and protocol.min_reader_version > 3:
        raise UnsupportedTableFeature(
            f"the table needs reader version {protocol.min_reader_version}; this client reads versions up to 3"
        )


# --- partition values --------------------------------------------------------------------------------

_TS = re.compile(
    r"^(\d{4,})-(\d{1,2})-(\d{1,2})(?:[ T](\d{1,2}):(\d{1,2})(?::(\d{1,2})(?:\.(\d{1,9}))?)?)?"
    r"\s*(Z|[+-]\d{2}(?::?\d{2})?)?$"
)


def _parse_partition_timestamp(text: str, *, utc: bool) -> dt.datetime:
    m = _TS.match(text.strip())
    if not m:
        raise ValueError(f"not a Delta timestamp: {text!r}")
    year, month, day, hh, mm, ss, frac, zone = m.groups()
    micros = int((frac or "0").ljust(6, "0")[:6])
    value = dt.datetime(int(year), int(month), int(day), int(hh or 0), int(mm or 0), int(ss or 0), micros)
    if zone:
        if zone in ("Z", "z"):
            offset = dt.timedelta(0)
        else:
            sign = -1 if zone[0] == "-" else 1
            digits = zone[1:].replace(":", "")
            offset = sign * dt.timedelta(hours=int(digits[:2]), minutes=int(digits[2:4] or 0))
        value = value - offset  # now in UTC, naive
    if utc:
        return value.replace(tzinfo=dt.timezone.utc)
    return value


def parse_partition_value(text: str | None, typ: pa.DataType) -> Any:
    """A serialized partition value → the Python value of Arrow type ``typ`` (None for null / ``""``)."""
    if text is None or text == "":
        return None
    if pa.types.is_string(typ) or pa.types.is_large_string(typ):
        return text
    if pa.types.is_integer(typ):
        return int(text)
    if pa.types.is_floating(typ):
        return float(text)
    if pa.types.is_boolean(typ):
        lowered = text.strip().lower()
        if lowered not in ("true", "false"):
            raise ValueError(f"not a boolean: {text!r}")
        return lowered == "true"
    if pa.types.is_date(typ):
        return _parse_partition_timestamp(text, utc=False).date()
    if pa.types.is_timestamp(typ):
        return _parse_partition_timestamp(text, utc=typ.tz is not None)
    if pa.types.is_decimal(typ):
        try:
            return Decimal(text.strip())
        except InvalidOperation:
            raise ValueError(f"not a decimal: {text!r}") from None
    if pa.types.is_binary(typ) or pa.types.is_large_binary(typ):
        return text.encode("utf-8")
    if pa.types.is_null(typ):
        return None
    raise ValueError(f"a column of type {typ} cannot be a partition column")

"""Delta table schemas (Spark's JSON schema form) as Spark and Arrow types.

The Spark schema is what the data source declares; the Arrow schema is derived from it with
PySpark's own converter, so the record batches ``read()`` yields match what Spark expects byte
for byte (field names, nested field names, nullability, ``timestamp[us, UTC]``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import orjson
import pyarrow as pa
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    ByteType,
    DataType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    MapType,
    NullType,
    ShortType,
    StringType,
    StructField,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from deltaport.errors import UnsupportedOperation

__all__ = [
    "CDF_COLUMNS",
    "PHYSICAL_NAME_KEY",
    "arrow_schema",
    "cast_array",
    "delta_field_types",
    "delta_to_spark",
    "delta_type_to_spark",
    "with_cdf_columns",
]

PHYSICAL_NAME_KEY = "delta.columnMapping.physicalName"
# The change data feed adds these after the table's columns.
CDF_COLUMNS = (
    StructField("_change_type", StringType(), True),
    StructField("_commit_version", LongType(), True),
    StructField("_commit_timestamp", TimestampType(), True),
)

_PRIMITIVES: Mapping[str, DataType] = {
    "string": StringType(),
    "long": LongType(),
    "integer": IntegerType(),
    "int": IntegerType(),
    "short": ShortType(),
    "byte": ByteType(),
    "float": FloatType(),
    "double": DoubleType(),
    "boolean": BooleanType(),
    "binary": BinaryType(),
    "date": DateType(),
    "timestamp": TimestampType(),
    "timestamp_ntz": TimestampNTZType(),
    "void": NullType(),
}
_DECIMAL = re.compile(r"^decimal\(\s*(\d+)\s*,\s*(-?\d+)\s*\)$")
# Field metadata that only matters to Delta writers and readers of physical files.
_DROPPED_METADATA_PREFIXES = (
    "delta.columnMapping.",
    "delta.identity.",
    "delta.invariants",
    "delta.generationExpression",
    "delta.typeChanges",
)


def _load(schema: str | Mapping[str, Any]) -> Mapping[str, Any]:
    return orjson.loads(schema) if isinstance(schema, (str, bytes)) else schema


def delta_to_spark(schema: str | Mapping[str, Any], *, physical: bool = False) -> StructType:
    """A Delta schema string (or its parsed dict) as a Spark StructType, with logical names.

    Column-mapping metadata is dropped (names in the schema are already the logical ones); other
    field metadata such as ``comment`` is kept. With ``physical``, every field (nested ones too)
    is named by its ``delta.columnMapping.physicalName`` where it has one: the names in the
    table's parquet files.
    """
    parsed = _load(schema)
    if parsed.get("type") != "struct":
        raise UnsupportedOperation(f"a table schema must be a struct, not {parsed.get('type')!r}")
    result = delta_type_to_spark(parsed, physical=physical)
    assert isinstance(result, StructType)
    return result


def _field_name(f: Mapping[str, Any], physical: bool) -> str:
    if physical:
        name = (f.get("metadata") or {}).get(PHYSICAL_NAME_KEY)
        if isinstance(name, str) and name:
            return name
    return f["name"]


def delta_type_to_spark(t: Any, *, physical: bool = False) -> DataType:
    if isinstance(t, str):
        lowered = t.strip().lower()
        if lowered in _PRIMITIVES:
            return _PRIMITIVES[lowered]
        match = _DECIMAL.match(lowered)
        if match:
            return DecimalType(int(match.group(1)), int(match.group(2)))
        if lowered == "decimal":
            return DecimalType(10, 0)
        raise UnsupportedOperation(f"the Delta type {t!r} cannot be read through the deltaSharing data source")
    kind = t.get("type")
    if kind == "struct":
        return StructType(
            [
                StructField(
                    _field_name(f, physical),
                    delta_type_to_spark(f["type"], physical=physical),
                    bool(f.get("nullable", True)),
                    _metadata(f.get("metadata")),
                )
                for f in t.get("fields", [])
            ]
        )
    if kind == "array":
        return ArrayType(delta_type_to_spark(t["elementType"], physical=physical), bool(t.get("containsNull", True)))
    if kind == "map":
        return MapType(
            delta_type_to_spark(t["keyType"], physical=physical),
            delta_type_to_spark(t["valueType"], physical=physical),
            bool(t.get("valueContainsNull", True)),
        )
    raise UnsupportedOperation(f"the Delta type {kind!r} cannot be read through the deltaSharing data source")


def _metadata(metadata: Mapping[str, Any] | None) -> dict[str, Any]:
    return {k: v for k, v in (metadata or {}).items() if not k.startswith(_DROPPED_METADATA_PREFIXES)}


def with_cdf_columns(schema: StructType) -> StructType:
    """The table schema followed by ``_change_type``, ``_commit_version``, ``_commit_timestamp``."""
    return StructType([*schema.fields, *CDF_COLUMNS])


def arrow_schema(schema: StructType) -> pa.Schema:
    """The exact Arrow schema Spark expects for record batches of ``schema``."""
    return to_arrow_schema(schema, timezone="UTC")


def cast_array(column: pa.ChunkedArray | pa.Array, target: pa.DataType) -> pa.ChunkedArray | pa.Array:
    """Cast exactly to ``target``; timestamps may drop sub-microsecond digits."""
    if column.type.equals(target):
        return column
    try:
        return column.cast(target)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return column.cast(target, safe=False)


def delta_field_types(schema: str | Mapping[str, Any]) -> dict[str, Any]:
    """Top-level logical column name -> Delta type (a string for primitives, else a dict)."""
    return {f["name"]: f["type"] for f in _load(schema).get("fields", [])}

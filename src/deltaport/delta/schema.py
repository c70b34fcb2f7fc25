"""Delta table schemas (Spark's JSON schema form): parsing, column mapping, Arrow types."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson
import pyarrow as pa

from deltaport.errors import CorruptLog


@dataclass(frozen=True)
class StructField:
    name: str
    type: Any  # str for primitives, dict for struct/array/map
    nullable: bool = True
    metadata: Mapping[str, Any] = field(default_factory=dict)

    @property
    def physical_name(self) -> str:
        """The name in data files and stats under column mapping (else the logical name)."""
        return str(self.metadata.get("delta.columnMapping.physicalName") or self.name)

    @property
    def type_name(self) -> str:
        return self.type if isinstance(self.type, str) else str(self.type.get("type"))


@dataclass(frozen=True)
class Schema:
    fields: tuple[StructField, ...]
    raw: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def parse(cls, schema_string: str, *, table: str | None = None) -> "Schema":
        try:
            d = orjson.loads(schema_string)
            fields = tuple(
                StructField(f["name"], f["type"], bool(f.get("nullable", True)), f.get("metadata") or {})
                for f in d["fields"]
            )
        except (orjson.JSONDecodeError, KeyError, TypeError) as exc:
            raise CorruptLog(f"table schema cannot be parsed: {exc}", table=table) from exc
        return cls(fields, d)

    def field(self, name: str) -> StructField | None:
        for f in self.fields:
            if f.name == name:
                return f
        lowered = name.lower()
        for f in self.fields:
            if f.name.lower() == lowered:
                return f
        return None

    @property
    def names(self) -> list[str]:
        return [f.name for f in self.fields]

    def physical_names(self) -> dict[str, str]:
        return {f.name: f.physical_name for f in self.fields}


def delta_type_to_arrow(t: Any, *, column_mapping: bool = False) -> pa.DataType:
    """Arrow type for a Delta type (timestamps as UTC microseconds, as Delta stores them)."""
    if isinstance(t, str):
        if t.startswith("decimal"):
            inner = t[t.index("(") + 1 : t.index(")")]
            p, s = (int(x) for x in inner.split(","))
            return pa.decimal128(p, s)
        prim = {
            "string": pa.string(),
            "long": pa.int64(),
            "integer": pa.int32(),
            "short": pa.int16(),
            "byte": pa.int8(),
            "float": pa.float32(),
            "double": pa.float64(),
            "boolean": pa.bool_(),
            "binary": pa.binary(),
            "date": pa.date32(),
            "timestamp": pa.timestamp("us", tz="UTC"),
            "timestamp_ntz": pa.timestamp("us"),
            "void": pa.null(),
            "variant": pa.struct([("value", pa.binary()), ("metadata", pa.binary())]),
        }.get(t)
        if prim is None:
            raise ValueError(f"unknown Delta type {t!r}")
        return prim
    kind = t.get("type")
    if kind == "struct":
        return pa.struct(
            [
                pa.field(
                    (f.get("metadata") or {}).get("delta.columnMapping.physicalName", f["name"])
                    if column_mapping
                    else f["name"],
                    delta_type_to_arrow(f["type"], column_mapping=column_mapping),
                    nullable=f.get("nullable", True),
                )
                for f in t["fields"]
            ]
        )
    if kind == "array":
        return pa.list_(delta_type_to_arrow(t["elementType"], column_mapping=column_mapping))
    if kind == "map":
        return pa.map_(
            delta_type_to_arrow(t["keyType"], column_mapping=column_mapping),
            delta_type_to_arrow(t["valueType"], column_mapping=column_mapping),
        )
    raise ValueError(f"unknown Delta type {t!r}")


def is_primitive(t: Any) -> bool:
    return isinstance(t, str)

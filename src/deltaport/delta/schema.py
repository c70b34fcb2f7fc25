"""Delta table schemas (Spark's JSON schema form): parsing and column mapping."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

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


@dataclass(frozen=True)
class Schema:
    fields: tuple[StructField, ...]
    raw: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def parse(cls, schema_string: str, *, table: str | None = None) -> Schema:
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

"""Delta log actions.

Non-file actions (Protocol, Metadata, CommitInfo, ...) are small frozen objects that keep the raw
JSON dict they came from, so they can be passed on verbatim. File actions (add, remove, cdc) live in
Arrow tables with the canonical types below and become dicts only for the files actually emitted.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

DV_TYPE = pa.struct(
    [
        ("storageType", pa.string()),
        ("pathOrInlineDv", pa.string()),
        ("offset", pa.int32()),
        ("sizeInBytes", pa.int32()),
        ("cardinality", pa.int64()),
        ("maxRowIndex", pa.int64()),
    ]
)
TAGS_TYPE = pa.map_(pa.string(), pa.string())


def partition_values_type(physical_columns: list[str]) -> pa.StructType:
    """Partition values as a struct of raw strings keyed by physical partition column name."""
    return pa.struct([(c, pa.string()) for c in physical_columns])


def add_fields(pv_type: pa.DataType) -> list[tuple[str, pa.DataType]]:
    return [
        ("path", pa.string()),
        ("partitionValues", pv_type),
        ("size", pa.int64()),
        ("modificationTime", pa.int64()),
        ("dataChange", pa.bool_()),
        ("stats", pa.string()),
        ("tags", TAGS_TYPE),
        ("deletionVector", DV_TYPE),
        ("baseRowId", pa.int64()),
        ("defaultRowCommitVersion", pa.int64()),
        ("clusteringProvider", pa.string()),
    ]


def remove_fields(pv_type: pa.DataType) -> list[tuple[str, pa.DataType]]:
    return [
        ("path", pa.string()),
        ("deletionTimestamp", pa.int64()),
        ("dataChange", pa.bool_()),
        ("extendedFileMetadata", pa.bool_()),
        ("partitionValues", pv_type),
        ("size", pa.int64()),
        ("stats", pa.string()),
        ("tags", TAGS_TYPE),
        ("deletionVector", DV_TYPE),
        ("baseRowId", pa.int64()),
        ("defaultRowCommitVersion", pa.int64()),
    ]


def cdc_fields(pv_type: pa.DataType) -> list[tuple[str, pa.DataType]]:
    return [
        ("path", pa.string()),
        ("partitionValues", pv_type),
        ("size", pa.int64()),
        ("dataChange", pa.bool_()),
        ("tags", TAGS_TYPE),
    ]


FILE_FIELDS = {"add": add_fields, "remove": remove_fields, "cdc": cdc_fields}


def file_schema(kind: str, physical_partition_columns: list[str]) -> pa.Schema:
    return pa.schema(FILE_FIELDS[kind](partition_values_type(physical_partition_columns)))


def row_to_action(row: Mapping[str, Any]) -> dict[str, Any]:
    """A file-action dict in log form from an Arrow row: nulls dropped, maps as dicts."""
    out: dict[str, Any] = {}
    for key, value in row.items():
        if key.startswith("_"):
            continue
        if key == "partitionValues":
            out[key] = dict(value) if value is not None else {}
            continue
        if value is None:
            continue
        if key == "tags":
            if value:
                out[key] = dict(value)
            continue
        if key == "deletionVector":
            out[key] = {k: v for k, v in value.items() if v is not None}
            continue
        out[key] = value
    return out


@dataclass(frozen=True)
class Protocol:
    min_reader_version: int
    min_writer_version: int
    reader_features: tuple[str, ...] | None = None
    writer_features: tuple[str, ...] | None = None
    raw: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Protocol:
        rf = d.get("readerFeatures")
        wf = d.get("writerFeatures")
        return cls(
            int(d["minReaderVersion"]),
            int(d.get("minWriterVersion") or 0),
            tuple(rf) if rf is not None else None,
            tuple(wf) if wf is not None else None,
            dict(d),
        )

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "minReaderVersion": self.min_reader_version,
            "minWriterVersion": self.min_writer_version,
        }
        if self.reader_features is not None:
            out["readerFeatures"] = list(self.reader_features)
        if self.writer_features is not None:
            out["writerFeatures"] = list(self.writer_features)
        return out

    def has_reader_feature(self, name: str) -> bool:
        return self.reader_features is not None and name in self.reader_features


@dataclass(frozen=True)
class Metadata:
    id: str
    schema_string: str
    partition_columns: tuple[str, ...]
    configuration: Mapping[str, str]
    name: str | None = None
    description: str | None = None
    format_provider: str = "parquet"
    format_options: Mapping[str, str] = field(default_factory=dict)
    created_time: int | None = None
    raw: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Metadata:
        fmt = d.get("format") or {}
        return cls(
            id=str(d["id"]),
            schema_string=str(d["schemaString"]),
            partition_columns=tuple(d.get("partitionColumns") or ()),
            configuration={k: v for k, v in (d.get("configuration") or {}).items() if v is not None},
            name=d.get("name"),
            description=d.get("description"),
            format_provider=fmt.get("provider") or "parquet",
            format_options=dict(fmt.get("options") or {}),
            created_time=d.get("createdTime"),
            raw=dict(d),
        )

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"id": self.id}
        if self.name is not None:
            out["name"] = self.name
        if self.description is not None:
            out["description"] = self.description
        out["format"] = {"provider": self.format_provider, "options": dict(self.format_options)}
        out["schemaString"] = self.schema_string
        out["partitionColumns"] = list(self.partition_columns)
        out["configuration"] = dict(self.configuration)
        if self.created_time is not None:
            out["createdTime"] = self.created_time
        return out


@dataclass(frozen=True)
class CommitInfo:
    timestamp: int | None
    in_commit_timestamp: int | None
    operation: str | None
    operation_metrics: Mapping[str, Any]
    raw: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> CommitInfo:
        ts = d.get("timestamp")
        ict = d.get("inCommitTimestamp")
        return cls(
            int(ts) if isinstance(ts, (int, float)) else None,
            int(ict) if isinstance(ict, (int, float)) else None,
            d.get("operation"),
            d.get("operationMetrics") or {},
            dict(d),
        )

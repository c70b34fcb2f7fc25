"""Protocol + metadata, validated: reader features, column mapping, partition schema."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property

from deltaport.delta.actions import Metadata, Protocol
from deltaport.delta.schema import Schema
from deltaport.errors import CorruptLog, UnsupportedTableFeature

#: Reader features this engine reads correctly.
SUPPORTED_READER_FEATURES = frozenset(
    {
        "columnMapping",
        "deletionVectors",
        "timestampNtz",
        "typeWidening",
        "typeWidening-preview",
        "v2Checkpoint",
        "vacuumProtocolCheck",
    }
)
MAX_READER_VERSION = 3


def check_protocol(protocol: Protocol, *, table: str | None = None) -> None:
    """Refuse a protocol this engine cannot read, naming what is missing."""
    if protocol.min_reader_version > MAX_READER_VERSION:
        raise UnsupportedTableFeature(
            f"table needs Delta reader version {protocol.min_reader_version}; "
            f"this server reads versions up to {MAX_READER_VERSION}",
            table=table,
        )
    if protocol.min_reader_version == 3:
        if protocol.reader_features is None:
            raise CorruptLog("protocol has minReaderVersion 3 but no readerFeatures", table=table)
        unsupported = sorted(set(protocol.reader_features) - SUPPORTED_READER_FEATURES)
        if unsupported:
            raise UnsupportedTableFeature(
                f"table uses unsupported reader feature(s): {', '.join(unsupported)}; "
                "it cannot be read or shared by this server",
                features=unsupported,
                table=table,
            )


@dataclass(frozen=True)
class TableConfig:
    """The validated view of a table's protocol and metadata at one version."""

    protocol: Protocol
    metadata: Metadata
    table: str | None = None

    @classmethod
    def build(
        cls, protocol: Protocol | None, metadata: Metadata | None, *, table: str | None = None, check: bool = True
    ) -> TableConfig:
        if protocol is None:
            raise CorruptLog("the log has no protocol action", table=table)
        if metadata is None:
            raise CorruptLog("the log has no metaData action", table=table)
        if check:
            check_protocol(protocol, table=table)
        cfg = cls(protocol, metadata, table)
        if check:
            cfg.validate()
        return cfg

    def validate(self) -> None:
        names = set(self.schema.names)
        missing = [c for c in self.metadata.partition_columns if c not in names]
        if missing:
            raise CorruptLog(f"partition column(s) {missing} are not in the table schema", table=self.table)

    @cached_property
    def schema(self) -> Schema:
        return Schema.parse(self.metadata.schema_string, table=self.table)

    @property
    def configuration(self) -> Mapping[str, str]:
        return self.metadata.configuration

    @property
    def column_mapping_mode(self) -> str:
        return (self.configuration.get("delta.columnMapping.mode") or "none").lower()

    @property
    def partition_columns(self) -> list[str]:
        return list(self.metadata.partition_columns)

    @cached_property
    def physical_partition_columns(self) -> list[str]:
        """Keys of ``partitionValues`` in file actions (physical names under column mapping)."""
        if self.column_mapping_mode == "none":
            return self.partition_columns
        out = []
        for c in self.partition_columns:
            f = self.schema.field(c)
            out.append(f.physical_name if f is not None else c)
        return out

    @property
    def change_data_feed_enabled(self) -> bool:
        return (self.configuration.get("delta.enableChangeDataFeed") or "").lower() == "true"

    @property
    def features_beyond_parquet(self) -> list[str]:
        """The reader features a reader of this table needs besides decoding parquet files, in
        Delta's names: a table needing none can be served as plain parquet files."""
        needs = []
        if (
            self.deletion_vectors_enabled
            or (self.configuration.get("delta.enableDeletionVectors") or "").lower() == "true"
        ):
            needs.append("deletionVectors")
        if self.column_mapping_mode != "none":
            needs.append("columnMapping")
        return needs

    @property
    def deletion_vectors_enabled(self) -> bool:
        return self.protocol.has_reader_feature("deletionVectors")

    @property
    def in_commit_timestamps_enabled(self) -> bool:
        return (self.configuration.get("delta.enableInCommitTimestamps") or "").lower() == "true"

    @property
    def in_commit_timestamp_enablement_version(self) -> int | None:
        v = self.configuration.get("delta.inCommitTimestampEnablementVersion")
        return int(v) if v not in (None, "") else None

    @property
    def features(self) -> list[str]:
        """Every feature in effect: explicit ones plus those implied by legacy versions."""
        out = set(self.protocol.reader_features or ()) | set(self.protocol.writer_features or ())
        p = self.protocol
        if p.min_writer_version < 7:
            if p.min_writer_version >= 2:
                out |= {"appendOnly", "invariants"}
            if p.min_writer_version >= 3:
                out.add("checkConstraints")
            if p.min_writer_version >= 4:
                out |= {"changeDataFeed", "generatedColumns"}
            if p.min_writer_version >= 5:
                out.add("columnMapping")
            if p.min_writer_version >= 6:
                out.add("identityColumns")
        return sorted(out)

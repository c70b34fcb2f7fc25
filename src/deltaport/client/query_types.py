"""The values a table query is asked with and answered by: :data:`QueryOptions` (the protocol's
query body), :class:`ChangesOptions` (the change feed's parameters), :class:`MetadataResult` and
:class:`QueryResult` (every page of a response, merged)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from deltaport.client.model import FileAction, Metadata, Protocol
from deltaport.client.schema import TableInfo
from deltaport.protocol.requests import QueryRequest

__all__ = ["ChangesOptions", "MetadataResult", "QueryOptions", "QueryResult"]

#: the query body is the protocol's wire model (it renders with ``to_body()``)
QueryOptions = QueryRequest


@dataclass(frozen=True)
class ChangesOptions:
    """Query parameters of ``GET .../changes`` (the change data feed)."""

    starting_version: int | None = None
    ending_version: int | None = None
    starting_timestamp: str | None = None
    ending_timestamp: str | None = None
    include_historical_metadata: bool | None = None
    max_files: int | None = None
    page_token: str | None = None

    def params(self) -> dict[str, str]:
        out: dict[str, str] = {}
        pairs = (
            ("startingVersion", self.starting_version),
            ("endingVersion", self.ending_version),
            ("startingTimestamp", self.starting_timestamp),
            ("endingTimestamp", self.ending_timestamp),
            ("maxFiles", self.max_files),
            ("pageToken", self.page_token),
        )
        for key, value in pairs:
            if value is not None:
                out[key] = str(value)
        if self.include_historical_metadata is not None:
            out["includeHistoricalMetadata"] = "true" if self.include_historical_metadata else "false"
        return out


@dataclass(frozen=True)
class MetadataResult:
    protocol: Protocol
    metadata: Metadata
    format: str
    table_version: int | None

    def table_info(self) -> TableInfo:
        return TableInfo.from_metadata(self.metadata, self.protocol, format=self.format, version=self.table_version)


@dataclass(frozen=True)
class QueryResult:
    """Every page of a query or changes response, merged."""

    protocol: Protocol
    metadata: Metadata
    format: str
    files: Sequence[FileAction]
    table_version: int | None
    refresh_token: str | None = None
    pages: int = 1
    metadata_changes: tuple[Metadata, ...] = field(default=())
    min_url_expiration_timestamp: int | None = None

    def table_info(self) -> TableInfo:
        return TableInfo.from_metadata(self.metadata, self.protocol, format=self.format, version=self.table_version)

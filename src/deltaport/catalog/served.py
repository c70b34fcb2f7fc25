"""What the server serves: shares of schemas of tables, and recipients with their token digests and
grants. Built from the YAML config (server.sources.config) or from the catalog database (catalog.store);
the server's registry reads only these values.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from deltaport.catalog.model import PartitionValue


@dataclass(frozen=True)
class SharedTableConfig:
    """One shared table as the server config declares it (the Delta table's own protocol and
    metadata are :class:`deltaport.delta.TableConfig`).

    ``partitions``: the rows a recipient may read, OR over partitions of AND over values (a value
    may be a recipient property); empty means the whole table."""

    name: str
    location: str
    id: str = ""
    history_shared: bool = False
    start_version: int = 0
    storage_options: Mapping[str, Any] = field(default_factory=dict)
    partitions: tuple[tuple[PartitionValue, ...], ...] = ()
    comment: str | None = None
    #: how recipients may read it: "url" (the server lists files, /query) and/or "dir" (the server
    #: vends credentials scoped to ``location``, temporary-table-credentials)
    access_modes: tuple[str, ...] = ("url",)
    #: other roots the table's log names files under (absolute paths), readable with credentials too
    auxiliary_locations: tuple[str, ...] = ()


@dataclass(frozen=True)
class SchemaConfig:
    name: str
    tables: tuple[SharedTableConfig, ...]


@dataclass(frozen=True)
class ShareConfig:
    name: str
    schemas: tuple[SchemaConfig, ...]
    id: str = ""
    comment: str | None = None
    display_name: str | None = None
    properties: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class TokenHash:
    """A bearer token's SHA-256 digest and the time (epoch ms) it stops working, if any."""

    digest: bytes
    expiration_ms: int | None = None


@dataclass(frozen=True)
class RecipientConfig:
    name: str
    tokens: tuple[TokenHash, ...]
    shares: tuple[str, ...]  # lower-cased share names
    allowed_ip_addresses: tuple[str, ...] = ()  # IPs and CIDRs; empty: from anywhere
    properties: Mapping[str, str] = field(default_factory=dict)

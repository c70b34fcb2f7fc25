"""Directory access: reading a shared table's directory with delta-rs and temporary credentials.

A table offered with ``dir`` in its ``accessModes`` is read at its ``location`` by ``deltalake``
(delta-rs, the ``dir`` extra), with credentials from ``POST .../temporary-table-credentials``
mapped to delta-rs storage options. The version is pinned first (the server's answer to the
metadata request, which also resolves a ``timestamp``), so every scan reads one snapshot.

Renewal: credentials are fetched again once they expire within the margin (``refresh_margin_seconds``,
by default a quarter of their lifetime, at most 30 s) and the table is re-opened at the same
version. A partitioned table is read in up to :data:`MAX_CHUNKS` scans, each a group of its
partitions, and renewal is checked before each; a table without partitions is one scan, which
delta-rs runs under one set of credentials.

What delta-rs cannot do here: it takes no OAuth token for Google Cloud Storage, and reads a table
with one set of credentials, so a table with auxiliary locations, or on GCS, is read by file URLs
when the server offers them and refused otherwise.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import pyarrow as pa

from deltaport.client.errors import AccessModeError, IncompleteResponse, SharingServerError
from deltaport.client.model import DIR, URL, Table, TemporaryCredentials
from deltaport.client.rest import MetadataResult, RestClient
from deltaport.client.schema import TableInfo

__all__ = [
    "DIR",
    "MAX_CHUNKS",
    "URL",
    "DirectoryRead",
    "choose_mode",
    "deltalake_module",
    "directory_only",
    "storage_options",
]

log = logging.getLogger("deltaport.client")

MAX_CHUNKS = 16
#: partition column types whose values a scan predicate names exactly
_CHUNK_TYPES = {"string": "str", "integer": "int", "long": "int", "short": "int", "byte": "int", "date": "date"}
MODES = (URL, DIR)


def deltalake_module() -> Any:
    try:
        import deltalake
    except ImportError:
        raise ImportError("directory access needs the 'dir' extra: pip install \"deltaport[dir]\"") from None
    return deltalake


def choose_mode(asked: str | None, offered: Sequence[str], table: str) -> str:
    """The access mode to read ``table`` with, by the protocol's compatibility table: ``url`` unless
    the table offers only ``dir`` (or ``dir`` is asked); asking a mode the table does not offer fails."""
    if asked is not None and asked not in MODES:
        raise ValueError(f"access_mode must be None, 'url' or 'dir', not {asked!r}")
    says = f"table {table} offers accessModes [{', '.join(offered)}]"
    if asked is not None:
        if asked not in offered:
            raise AccessModeError(f"cannot read with access_mode={asked!r}: {says}; ask for one of those")
        return asked
    if URL in offered:
        return URL
    if DIR in offered:
        return DIR
    raise AccessModeError(f"cannot read: {says}, and this client reads only 'url' and 'dir'")


def _aws(values: Mapping[str, str]) -> dict[str, str]:
    out = {
        "AWS_ACCESS_KEY_ID": values["accessKeyId"],
        "AWS_SECRET_ACCESS_KEY": values["secretAccessKey"],
        "AWS_SESSION_TOKEN": values["sessionToken"],
    }
    endpoint = values.get("endpoint")
    if endpoint:
        out["AWS_ENDPOINT_URL"] = endpoint
        out["AWS_ALLOW_HTTP"] = "true" if endpoint.startswith("http://") else "false"
        out["AWS_VIRTUAL_HOSTED_STYLE_REQUEST"] = "false"
        out["AWS_REGION"] = values.get("region") or "us-east-1"
    elif values.get("region"):
        out["AWS_REGION"] = values["region"]
    return out


def _azure(values: Mapping[str, str]) -> dict[str, str]:
    out = {"AZURE_STORAGE_SAS_TOKEN": values["sasToken"]}
    endpoint = values.get("endpoint")
    if endpoint:
        out["AZURE_STORAGE_ENDPOINT"] = endpoint
        out["AZURE_ALLOW_HTTP"] = "true" if endpoint.startswith("http://") else "false"
    return out


def storage_options(credentials: TemporaryCredentials) -> dict[str, str]:
    """delta-rs ``storage_options`` for the credentials; AccessModeError for a kind it cannot use."""
    if credentials.kind == "aws":
        return _aws(credentials.values)
    if credentials.kind == "azure":
        return _azure(credentials.values)
    raise AccessModeError(
        f"delta-rs cannot read {credentials.location} with {credentials.kind} credentials "
        "(it takes no OAuth token for Google Cloud Storage)"
    )


def table_uri(location: str) -> str:
    """The location as delta-rs opens it (``s3a://`` is ``s3://`` to it)."""
    return "s3://" + location[len("s3a://") :] if location.startswith("s3a://") else location


def _literal(kind: str, value: str) -> str:
    if kind == "int":
        return str(int(value))
    quoted = "'" + value.replace("'", "''") + "'"
    return f"CAST({quoted} AS DATE)" if kind == "date" else quoted


def partition_chunks(dt: Any, max_chunks: int = MAX_CHUNKS) -> list[str | None]:
    """Scan predicates that together select every row once: groups of the table's partitions, or
    ``[None]`` (one scan) when it has one partition or a partition type a predicate cannot name."""
    columns = list(dt.metadata().partition_columns)
    types = {f.name: _CHUNK_TYPES.get(getattr(f.type, "type", "")) for f in dt.schema().fields}
    if not columns or any(types.get(c) is None for c in columns):
        return [None]
    partitions = sorted({tuple(p.get(c) for c in columns) for p in dt.partitions()}, key=repr)
    if len(partitions) < 2:
        return [None]

    def one(values: tuple) -> str:
        terms = []
        for column, value in zip(columns, values):
            name = '"' + column.replace('"', '""') + '"'
            terms.append(f"{name} IS NULL" if value is None else f"{name} = {_literal(types[column], value)}")  # type: ignore[arg-type]
        return "(" + " AND ".join(terms) + ")"

    size = -(-len(partitions) // max_chunks)
    return [" OR ".join(one(p) for p in partitions[i : i + size]) for i in range(0, len(partitions), size)]


class DirectoryRead:
    """One read of one table by its directory: credentials (renewed as they near expiry), the
    table opened at a pinned version, and the scans."""

    def __init__(
        self,
        rest: RestClient,
        table: Table,
        meta: MetadataResult,
        *,
        refresh_margin_seconds: float | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if meta.metadata.location is None:
            raise IncompleteResponse(
                f"table {table.full_name} offers directory access but its metadata names no 'location'",
                error_code="MALFORMED_RESPONSE",
            )
        self.rest, self.table, self.meta = rest, table, meta
        self.location: str = meta.metadata.location
        self.margin = refresh_margin_seconds
        self.clock = clock
        self.renewals = 0
        self._deltalake = deltalake_module()
        self._credentials = self._fetch()
        self._dt: Any = None
        self._scans: list[str | None] | None = None

    def _fetch(self) -> TemporaryCredentials:
        credentials = self.rest.temporary_table_credentials(self.table)
        self._options = storage_options(credentials)
        lifetime = credentials.expiration_time / 1000 - self.clock()
        self._margin = self.margin if self.margin is not None else max(0.0, min(30.0, lifetime / 4))
        return credentials

    def _open(self, *, renew: bool = False) -> Any:
        """The table at the pinned version; with ``renew``, re-opened with new credentials when these
        expire within the margin (between scans: a scan runs under one set of credentials)."""
        fresh = self.clock() + self._margin < self._credentials.expiration_time / 1000
        if self._dt is not None and (fresh or not renew):
            return self._dt
        if self._dt is not None:
            self._credentials = self._fetch()
            self.renewals += 1
            log.info("renewed the credentials of %s for directory access", self.table.full_name)
        self._dt = self._deltalake.DeltaTable(
            table_uri(self.location), version=self.meta.table_version, storage_options=self._options
        )
        return self._dt

    @property
    def info(self) -> TableInfo:
        return self.meta.table_info()

    def scans(self) -> list[str | None]:
        """The scans that together read the table (:func:`partition_chunks`), each read by :meth:`scan`."""
        if self._scans is None:
            self._scans = partition_chunks(self._open())
        return self._scans

    def scan(self, index: int) -> Iterator[pa.Table]:
        """One scan's rows, cast to the metadata's schema; the credentials renewed first (at the same
        version) when they near expiry."""
        schema = self.info.arrow_schema
        predicate = self.scans()[index]
        for batch in pa.RecordBatchReader.from_stream(self._open(renew=index > 0).scan(predicate=predicate)):
            yield _conform(pa.Table.from_batches([batch]), schema)

    def tables(self, limit: int | None = None) -> Iterator[pa.Table]:
        """The table's rows, a scan's batches at a time, cast to the schema the metadata gives."""
        left = limit
        for index in range(len(self.scans())):
            for table in self.scan(index):
                if left is not None:
                    if left <= 0:
                        return
                    table = table.slice(0, left)
                    left -= table.num_rows
                yield table
            if left is not None and left <= 0:
                return


def directory_only(rest: RestClient, table: Table, asked: str | None, refused: SharingServerError) -> bool:
    """Whether a read by file URLs that the server refused with ``refused`` is to be made by directory
    instead: the table offers only ``dir``. Raises ``refused`` when the table offers URLs (or the
    refusal is not one a mode explains: a timeout is not), and AccessModeError when ``url`` was asked of a
    dir-only table."""
    if refused.http_status in (401, 404, 408, 429) or not 400 <= refused.http_status < 500:
        raise refused
    offered = rest.metadata(table).metadata.access_modes
    if URL in offered:
        raise refused
    choose_mode(asked, offered, table.full_name)
    return True


def _conform(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """``table`` with the metadata schema's column order and types, as the URL path returns them."""
    if table.column_names != schema.names and set(table.column_names) == set(schema.names):
        table = table.select(schema.names)
    try:
        return table.cast(schema)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, ValueError):
        return table
